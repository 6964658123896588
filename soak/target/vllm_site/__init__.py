"""A folder soak puts first on the PYTHONPATH of the vLLM it starts: its `sitecustomize` (see there)."""
