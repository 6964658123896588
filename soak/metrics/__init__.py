"""soak's series for the monitoring a team already runs: a live Prometheus page, an OTLP push, and an
OpenMetrics export of a stored run, all named from one catalog (`catalog.py`; docs/observability.md)."""
