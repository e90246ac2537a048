"""Test-suite speed only: in a lakeflow process started under coverage by the tests, import the heavy
third-party packages it is about to import anyway *before* coverage starts tracing.

Coverage's subprocess hook (`a1_coverage.pth`) starts its tracer at interpreter start-up, and on
Python 3.11 a tracer makes every line run slower, library code included: importing torch and
transformers took ~3 s more per service process, and measured nothing of lakeflow. `make venv` puts
this module and `a0_lakeflow_preimport.pth` (which sorts, and so runs, before coverage's .pth) into
the venv; the tests set LAKEFLOW_TEST_PREIMPORT=1 (tests/conftest.py). Outside the tests it does nothing.
lakeflow's own modules are never imported here, so every line of lakeflow is still measured.
"""

from __future__ import annotations

import os
import sys

TORCH_VERBS = {"train", "eval"}  # see below: not `raas`


def verb(argv: list[str]) -> str | None:
    """The lakeflow command of `python -m lakeflow VERB ...` or `.../bin/lakeflow VERB ...`; None otherwise."""
    if argv[1:3] == ["-u", "-m"]:
        argv = [argv[0], *argv[2:]]
    if argv[1:3] == ["-m", "lakeflow"] and len(argv) > 3:
        return argv[3]
    if len(argv) > 2 and os.path.basename(argv[1]) == "lakeflow":
        return argv[2]
    return None


def preimport() -> None:
    if not os.environ.get("COVERAGE_PROCESS_CONFIG"):
        return
    command = verb(list(sys.orig_argv))
    if command is None:
        return
    import boto3  # noqa: F401  (every lakeflow command opens a store)
    import duckdb  # noqa: F401
    import pyarrow  # noqa: F401

    if command in TORCH_VERBS:
        import torch  # noqa: F401
        from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: F401


preimport()
