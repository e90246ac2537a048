"""Where a launched run finds its file datasets: shipped with the configs, put into the lake, or read
where they are (a store URL, or Slurm's shared filesystem).

A small local file travels with the configs (a ConfigMap, SkyPilot file mounts, the Slurm config folder);
a larger one is copied into the lake under `data/` with `--put-data` (the config then reads it from
there: the dataflow process reads `s3://` dataset paths) or refused; a store URL is checked to exist
unless the launch is offline. Nothing rendered for Kubernetes or SkyPilot names a path of this machine.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lakeflow.errors import LakeflowError
from lakeflow.io import S3Options, open_store
from lakeflow.lake import layout
from lakeflow.launch.workloads import LaunchOptions

SHIP_LIMIT = 256 * 1024  # dataset files up to this size travel with the configs (a ConfigMap holds 1 MiB)


def _split(url: str) -> tuple[str, str]:
    """('s3://bucket/dir', 'name.jsonl') of a store URL."""
    parent, _, name = url.rstrip("/").rpartition("/")
    return parent, name


class Datasets:
    """Places the file datasets of one launch; problems and notes collect as it goes."""

    def __init__(self, target: str, options: LaunchOptions, config_dir: str, files: dict[str, str], notes: list[str]):
        self.target = target
        self.options = options
        self.config_dir = config_dir
        self.files = files
        self.notes = notes
        self.problems: list[str] = []

    def place(self, dataset: dict[str, Any] | None, who: str, prefix: str) -> None:
        """Rewrite `dataset["path"]` (a file dataset) to where the nodes read it."""
        if not dataset or dataset.get("type") != "file":
            return
        path = str(dataset["path"])
        if "://" in path:
            self._check_url(path, who)
            return
        local = Path(path)
        if not local.is_file():
            self.problems.append(f"{who}: dataset {path} does not exist here; fix the path or use an s3:// URL")
            return
        size = local.stat().st_size
        if size <= SHIP_LIMIT:
            name = f"{prefix}-{local.name}"
            self.files[name] = local.read_text()
            dataset["path"] = f"{self.config_dir}/{name}"
        elif self.options.put_data:
            dataset["path"] = self._put(local, who)
        elif self.target == "slurm":
            dataset["path"] = str(local.resolve())  # the nodes share this filesystem
        else:
            self.problems.append(
                f"{who}: dataset {path} is {size} bytes, over the {SHIP_LIMIT} shipped with the configs; pass "
                "--put-data to copy it into the lake, or point the config at an s3:// URL"
            )

    def _check_url(self, url: str, who: str) -> None:
        if self.options.offline:
            self.notes.append(f"{who}: dataset {url} not checked (--offline)")
            return
        parent, name = _split(url)
        try:
            open_store(parent, self._s3()).head(name)
        except FileNotFoundError:
            self.problems.append(f"{who}: dataset {url} does not exist; put it there first (or fix the URL)")
        except (LakeflowError, OSError, ValueError) as e:
            self.problems.append(f"{who}: cannot read dataset {url}: {e}")

    def _put(self, local: Path, who: str) -> str:
        """Copy `local` into the lake (create-only: the same file put twice is one object); its URL."""
        if self.options.offline:
            self.problems.append(f"{who}: --put-data needs the lake; drop --offline")
            return str(local)
        key = layout.dataset_key(local.name)
        store = open_store(self.options.lake, self._s3())
        data = local.read_bytes()
        try:
            store.put_if_absent(key, data)
        except FileExistsError:
            if store.get(key) != data:
                self.problems.append(
                    f"{who}: the lake already holds another {key}; rename {local.name} or remove the object"
                )
        self.notes.append(f"{who}: dataset {local} copied to {self.options.lake}/{key}")
        return f"{self.options.lake.rstrip('/')}/{key}"

    def _s3(self) -> S3Options:
        return S3Options(endpoint_url=self.options.endpoint_url).interactive()
