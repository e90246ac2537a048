"""A calculator with one bug: the workspace of jobs/examples/tiny-harness-sandbox.yaml."""


def add(a: int, b: int) -> int:
    return a - b


def mul(a: int, b: int) -> int:
    return a * b
