"""One model's weight versions as a trainer publishes them: version 0 (the base model), then each
step's version coded against the one before (LATEST moves last: the commit point). With LoRA each
version after 0 is the adapter alone, with its adapter_config.json, coded against the previous adapter.

It keeps the published state the next delta is coded against (`base`). The trainer's writer
(`writer.py`) drives it.
"""

from __future__ import annotations

import logging

from lakeflow.errors import WeightsConflictError
from lakeflow.io import Store
from lakeflow.weights import AdapterInfo, State, latest_version, publish
from lakeflow.weights.publish import PublishGuard

log = logging.getLogger("lakeflow.trainer")


class Publisher:
    """One model's writes; `published` is the newest version this process published (or resumed from)."""

    def __init__(
        self, store: Store, model_id: str, full_every: int, workers: int | None = None, processes: bool = False
    ) -> None:
        self.store = store
        self.model_id = model_id
        self.full_every = full_every
        self.workers = workers  # threads (or forked processes) of the delta codec (None: every CPU)
        self.processes = processes
        self.base: State = {}  # the published state of the newest version: what the next delta is coded against
        self.published = -1
        self._force = True  # leftovers of a crashed predecessor may exist for the first publish
        self.lease: PublishGuard | None = None  # the model's trainer lease (lakeflow train sets it): force needs it
        self.adapter: AdapterInfo | None = None  # LoRA: every version after 0 is this adapter on version 0
        self.adapter_files: dict[str, bytes] | None = None  # and ships these files (adapter_config.json)

    def resumed(self, version: int, state: State) -> None:
        """The trainer holds published `version` (whose state is `state`, or {} on ranks that never publish)."""
        self.published, self.base = version, state

    def publish_base(self, state: State, files: dict[str, bytes]) -> int:
        """Version 0: the base model, with its config and tokenizer files."""
        manifest = publish(
            self.store,
            self.model_id,
            state,
            files=files,
            full_every=self.full_every,
            publisher="trainer",
            force=self.lease is not None,
            lease=self.lease,
        )
        self._force = False
        self.resumed(manifest.version, state)
        return manifest.version

    def publish(self, state: State, version: int) -> None:
        """`state` as `version`, coded against `base`; refused unless LATEST is `version - 1`."""
        found = latest_version(self.store, self.model_id)
        if found != version - 1:
            raise WeightsConflictError(
                f"the newest published version of {self.model_id!r} is {found}, expected {version - 1}: another "
                "trainer publishes this model; only one trainer may run per model"
            )
        manifest = publish(
            self.store,
            self.model_id,
            state,
            base=self.base,
            files=self.adapter_files,
            adapter=self.adapter,
            full_every=self.full_every,
            publisher="trainer",
            force=self._force and self.lease is not None,
            lease=self.lease,
            workers=self.workers,
            processes=self.processes,
        )
        self._force = False
        self.base = state
        self.published = manifest.version
