"""Built-in soak scenarios: plain Locust user classes, loaded by name or path at run time."""
