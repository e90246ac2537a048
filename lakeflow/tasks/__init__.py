"""Repository tasks (`lakeflow tasks`, docs/tasks.md): SWE-style tasks synthesised from real packages' own tests
and mechanical bugs (`mutate.py`, `synth.py`), stored in the lake, checked (`check.py`) with the `repo_tests`
reward that scores an agent's episode by running the tests in its workspace."""
