"""Data-parallel training with FSDP2 when the trainer runs under torchrun (WORLD_SIZE > 1).

Every rank reads the whole batch (the payload is small beside the model) and trains on every
world-th microbatch of each minibatch; FSDP2 (`fully_shard` per decoder layer, then the root)
shards parameters, gradients and AdamW state across ranks. All ranks run the same number of
forward/backward passes (FSDP's collectives need it): a rank short of microbatches runs a pass
with zero weight. Rank 0 alone writes to the lake (checkpoint, heartbeat, publish); gathering
the full weights and optimizer state for it is a collective every rank joins.

Backend: NCCL on CUDA devices (each rank on `cuda:<LOCAL_RANK>`), gloo on CPU, which is how
this is tested here (two processes on one machine); the CUDA path has not been run.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class World:
    """This process's place in the job."""

    rank: int
    size: int
    device: str

    @property
    def lead(self) -> bool:
        """Rank 0: the one process that writes to the lake."""
        return self.rank == 0


def init(device: str) -> World | None:
    """Join the torchrun job (None when not launched by torchrun with more than one process)."""
    size = int(os.environ.get("WORLD_SIZE", "1"))
    if size <= 1:
        return None
    cuda = device.startswith("cuda")
    if not dist.is_initialized():
        dist.init_process_group("nccl" if cuda else "gloo")
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if cuda:
        torch.cuda.set_device(local)
    return World(dist.get_rank(), dist.get_world_size(), f"cuda:{local}" if cuda else device)


def shard(model: Any) -> Any:
    """FSDP2 over a Hugging Face causal LM: each decoder layer, then the root (embeddings, head)."""
    from torch.distributed.fsdp import fully_shard

    for layer in model.model.layers:
        fully_shard(layer)
    fully_shard(model)
    return model


def full_tensors(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The whole model's tensors on every rank (a collective), tied ones once under their first name."""
    from torch.distributed.tensor import DTensor

    out: dict[str, torch.Tensor] = {}
    seen: set[int] = set()
    for name, value in model.state_dict().items():
        local = value.to_local() if isinstance(value, DTensor) else value
        if local.data_ptr() in seen:  # a tied tensor (the LM head sharing the embedding)
            continue
        seen.add(local.data_ptr())
        out[name] = value.full_tensor() if isinstance(value, DTensor) else value
    return out


def any_rank(flag: bool) -> bool:
    """True on every rank when `flag` is True on any (a collective)."""
    value = torch.tensor([1 if flag else 0])
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return bool(value.item())


def total(values: list[float]) -> list[float]:
    """Element-wise sums over ranks (a collective)."""
    tensor = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(tensor)
    return [float(v) for v in tensor]


def largest(values: list[float]) -> list[float]:
    """Element-wise maxima over ranks (a collective)."""
    tensor = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return [float(v) for v in tensor]


def my_share(micro: list[list[int]], world: World) -> Iterator[tuple[list[int], float]]:
    """This rank's microbatches with their loss weight: every world-th one at weight 1, then
    zero-weight repeats of the first until every rank runs as many passes."""
    mine = micro[world.rank :: world.size]
    passes = -(-len(micro) // world.size)
    for rows in mine:
        yield rows, 1.0
    for _ in range(passes - len(mine)):
        yield micro[0], 0.0
