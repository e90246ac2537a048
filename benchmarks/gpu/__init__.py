"""The GPU check (docs/gpu.md): the trainer, the transformers engine and the weight codec measured on a CUDA
machine within a time budget; `check.py` runs the sections, `cli.py` is `scripts/gpu-check`."""
