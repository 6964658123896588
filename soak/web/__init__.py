"""The live view: read-only web pages of the runs in a database (`soak web`, `soak start --web`).

It runs in a process of its own and reads the database only, so the load never waits for it. This package's
`__init__` imports nothing, so the conductor can start the process (soak.run.live_view) without loading Starlette.
"""
