"""Test support shared by tests/ and bench/, kept out of the installed package.

`synthetic`: series and whole runs with known truth; `proof`: the Monte Carlo false-positive and power
measurements of the trend detectors built on them. pytest puts tests/ on sys.path (see pyproject.toml), so
tests import them as `support.synthetic` and `support.proof`; bench scripts add tests/ themselves.
"""
