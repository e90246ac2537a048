"""What a restarted trainer restores, besides the weights of the newest published version L.

The optimizer moments come from the newest checkpoint C <= L (checkpoints are written every K
versions, so C is at most K versions older). When C < L, one process retrains batches C .. L - 1
from version C's weights and moments, publishing nothing, which rebuilds the moments the
uninterrupted run would hold; its weights are checked against L's state hash (equal on
deterministic kernels) and kept when equal, else L's published weights are. With a publish dtype
narrower than the master weights' (fp32 master, bf16 published), checkpoints also hold the master
weights, which a resume restores (their rounding is checked against the published version). When that cannot run (a
batch or version C is gone, or under torchrun), the moments of C are used with L's weights, and
with no checkpoint at all AdamW starts fresh. Each case is logged.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
from typing import Any, Protocol

import torch
from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

from lakeflow.io import Store
from lakeflow.lake import layout
from lakeflow.trainer import distributed
from lakeflow.trainer.config import TrainerConfig
from lakeflow.trainer.data import load_batch
from lakeflow.trainer.model import load_model, published_tensors, to_state
from lakeflow.trainer.step import StepParts, train_step
from lakeflow.trainer.writer import OPTIMIZER_FILE, TRAINER_FILE, checkpoint_payload
from lakeflow.weights import read_manifest, state_sha256

log = logging.getLogger("lakeflow.trainer")


class Resumable(Protocol):
    """What a resume needs of the trainer (`loop.Trainer`, which imports this module)."""

    store: Store
    model_id: str
    config: TrainerConfig
    world: distributed.World | None
    model: Any
    parts: StepParts | None
    publish_dtype: str

    @property
    def lead(self) -> bool: ...

    def pull_version(self, version: int, name: str) -> str: ...

    def tensors(self) -> dict[str, torch.Tensor]: ...


def newest_checkpoint(store: Store, model_id: str, at_most: int) -> int | None:
    """The newest version <= `at_most` with an optimizer checkpoint, or None."""
    found = None
    for info in store.list(layout.model_checkpoints_prefix(model_id)):
        parsed = layout.parse_checkpoint_key(info.key)
        if parsed and info.key.endswith("/" + OPTIMIZER_FILE) and parsed[1] <= at_most:
            found = parsed[1] if found is None else max(found, parsed[1])
    return found


def write_checkpoint(store: Store, model_id: str, version: int, state: dict[str, Any], config: TrainerConfig) -> None:
    """A checkpoint written by this process (version 0's, whose moments are fresh: a few bytes)."""
    buffer = io.BytesIO()
    torch.save({**checkpoint_payload(state), "version": version}, buffer)
    info = {"model_id": model_id, "version": version, "config": config.model_dump(mode="json")}
    store.put(layout.checkpoint_object_key(model_id, version, TRAINER_FILE), json.dumps(info).encode())
    store.put(layout.checkpoint_object_key(model_id, version, OPTIMIZER_FILE), buffer.getvalue())


def restore(trainer: Resumable, latest: int) -> int:
    """Bring the trainer's optimizer to version `latest` (its weights are loaded); returns the version of
    the checkpoint used (-1 without one), from which the checkpoint schedule counts."""
    store, model_id = trainer.store, trainer.model_id
    found = newest_checkpoint(store, model_id, latest) if trainer.lead else None
    if trainer.world:  # rank 0's answer: the other ranks add 0
        value = (found if found is not None else -1) if trainer.lead else 0
        total = int(distributed.total([float(value)])[0])
        found = None if total < 0 else total
    if found is None:
        lost = "" if latest == 0 else " (Adam moments and step count of earlier training are lost)"
        log.info("no optimizer checkpoint for version %d: starting AdamW fresh%s", latest, lost)
        return -1
    if found == latest or trainer.world is not None or not _retrain(trainer, found, latest):
        master = _load_optimizer(trainer, found)
        if found < latest:
            log.info("optimizer moments are version %d's, %d versions older than the weights", found, latest - found)
        elif master is not None and not (trainer.config.lora is not None and latest == 0):  # (LoRA: v0 is the base)
            _adopt_master(trainer, master, latest)
    return found


def _retrain(trainer: Resumable, checkpoint: int, latest: int) -> bool:
    """Retrain batches checkpoint .. latest - 1 from version `checkpoint` (its master weights where the
    checkpoint has them), publishing nothing; False (and nothing changed) when a batch or that version is gone."""
    c, config = trainer.config, trainer.model.config
    if c.lora is not None:  # the retrain below rebuilds a whole model from a version: an adapter is not one
        log.info(
            "LoRA: not retraining from checkpoint %d; its moments are used with version %d's adapter",
            checkpoint,
            latest,
        )
        return False
    pad, vocab = getattr(config, "pad_token_id", None) or 0, getattr(config, "vocab_size", None)
    try:
        store, model_id = trainer.store, trainer.model_id
        batches = [load_batch(store, model_id, v, c.advantages, pad, vocab)[0] for v in range(checkpoint, latest)]
        source = load_model(trainer.pull_version(checkpoint, "retrain"), c.dtype)
    except FileNotFoundError as e:
        log.info("cannot retrain from checkpoint %d (%s): using its moments as they are", checkpoint, e)
        return False
    published = {name: t.detach().clone() for name, t in trainer.model.state_dict().items()}
    with torch.no_grad():
        for p, q in zip(trainer.model.parameters(), source.parameters(), strict=True):
            p.copy_(q.to(p.device))
    master = _load_optimizer(trainer, checkpoint)
    if master is not None:
        _copy_into(trainer.model, master)
    for batch in batches:
        train_step(_parts(trainer), batch)
    same = _published_sha256(trainer) == read_manifest(trainer.store, trainer.model_id, latest).state_sha256
    if not same:  # the published weights of `latest` (upcast where the master dtype is wider)
        _copy_into(trainer.model, published)
    what = "identical to" if same else "different from (non-deterministic kernels)"
    kept = "the retrained master weights are kept" if same else "whose weights are kept"
    log.info(
        "retrained batches %d..%d from checkpoint %d to rebuild the optimizer moments; the weights came out %s "
        "published version %d, %s",
        checkpoint, latest - 1, checkpoint, what, latest, kept,
    )  # fmt: skip
    return True


def _adopt_master(trainer: Resumable, master: dict[str, torch.Tensor], version: int) -> None:
    """The checkpoint's master weights in place of the published (narrower) ones, when they are what was published."""
    held = {name: t.detach().clone() for name, t in trainer.model.state_dict().items()}
    _copy_into(trainer.model, master)
    if _published_sha256(trainer) == read_manifest(trainer.store, trainer.model_id, version).state_sha256:
        log.info("restored the %s master weights of version %d from its checkpoint", trainer.config.dtype, version)
        return
    _copy_into(trainer.model, held)
    log.warning(
        "the master weights in the checkpoint of version %d do not round to its published weights: training goes "
        "on from the published %s weights",
        version, trainer.publish_dtype,
    )  # fmt: skip


def _published_sha256(trainer: Resumable) -> str:
    return state_sha256(to_state(published_tensors(trainer.tensors(), trainer.publish_dtype)))


def _copy_into(model: torch.nn.Module, tensors: dict[str, torch.Tensor]) -> None:
    """Tensors by name into the model's parameters and buffers (tied ones share storage: one name suffices)."""
    own = model.state_dict()
    with torch.no_grad():
        for name, t in tensors.items():
            if name in own:
                own[name].copy_(t.to(own[name].device))


def _load_optimizer(trainer: Resumable, version: int) -> dict[str, torch.Tensor] | None:
    """AdamW state of `version` from its checkpoint (rank 0 reads it and broadcasts it); returns the master
    weights the checkpoint holds (one process only; None without them)."""
    optimizer, c = _parts(trainer).optimizer, trainer.config
    key = layout.checkpoint_object_key(trainer.model_id, version, OPTIMIZER_FILE)
    saved: dict[str, Any] = {}
    if trainer.lead:
        with contextlib.suppress(FileNotFoundError):
            saved = torch.load(io.BytesIO(trainer.store.get(key)), weights_only=True, map_location="cpu")
    state = saved.get("optimizer_fqn", {})
    moments = bool(state.get("state"))  # version 0's checkpoint: fresh AdamW, nothing to set
    if trainer.world:
        moments = distributed.any_rank(moments)
    if moments:
        options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=trainer.world is not None)
        set_optimizer_state_dict(trainer.model, optimizer, state, options=options)
    for group in optimizer.param_groups:  # the config, not the checkpoint, sets hyperparameters
        group.update(lr=c.lr, betas=c.betas, weight_decay=c.weight_decay)
    log.info("loaded optimizer state of version %d from %s", version, key)
    master = saved.get("master")
    if master is not None and trainer.world is not None:
        log.info("under torchrun the master weights restart from the published ones of version %d", version)
        return None
    return master


def _parts(trainer: Resumable) -> StepParts:
    if trainer.parts is None:
        raise RuntimeError("Trainer.start() sets up the model before a resume")
    return trainer.parts
