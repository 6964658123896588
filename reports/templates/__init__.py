"""Jinja2 templates of the HTML report."""
