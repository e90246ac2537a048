"""Research benchmarks of lakeflow: harnesses that put lakeflow beside the alternative on synthetic data,
tiny jobs and shaped links. They live in the checkout, not in the wheel (docs/benchmarks.md), and run as
`python -m benchmarks NAME` from the repository root; they may import lakeflow, lakeflow never imports them.
"""
