"""`python -m soak …` is the `soak` command."""

from soak.cli import main

main()
