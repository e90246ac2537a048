"""`python -m lakeflow` runs the CLI."""

from lakeflow.cli import main

main()
