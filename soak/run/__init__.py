"""The life of one run: conduct it, finalise it (analysis + report), close it after a kill, and the records
around it (summary, progress, environment, locks, JUnit). See docs/architecture.md."""
