"""`python -m benchmarks NAME ...` runs one research benchmark (from the repository root)."""

from benchmarks.cli import main

main(prog_name="python -m benchmarks")
