"""Every exception lakeflow raises on purpose, in one flat module.

Storage methods raise the builtin `FileNotFoundError` (missing key) and
`FileExistsError` (a lost create-only write); the rest live here.
"""

from __future__ import annotations


class LakeflowError(Exception):
    """Base class of lakeflow's own errors."""


class InputError(LakeflowError, ValueError):
    """An argument, a name (model id, writer name), a URL or a value is not one lakeflow accepts; the
    message names it and what is allowed. The CLI exits with code 2 (bad usage) on it."""


class LakeFormatError(LakeflowError, ValueError):
    """An object or key in the lake is not what lakeflow writes there (a stray, damaged or hostile object,
    a batch whose samples cannot be trained on); the message names it."""


class WeightsFormatError(LakeflowError, ValueError):
    """A weights file or object (safetensors, a delta or one of its streams) is malformed or does not fit
    the state it applies to; nothing was loaded from it."""


class EtagMismatchError(LakeflowError):
    """A compare-and-swap lost: the object changed since its etag was read.

    Read the object again, recompute, and retry the swap.
    """


class UnsupportedStoreError(InputError):
    """The URL names a storage backend lakeflow cannot use (or cannot use for this operation)."""


class MissingExtraError(LakeflowError, ImportError):
    """An optional dependency is not installed; the message names the extra to install."""

    def __init__(self, package: str, extra: str) -> None:
        super().__init__(f"{package} is not installed: run `pip install 'lakeflow[{extra}]'` to use this feature")


class SampleValidationError(LakeflowError, ValueError):
    """A trajectory sample does not match the sample schema; the message names the field and row."""


class CorruptShardError(LakeflowError):
    """A committed shard is missing, truncated, or does not match its commit record."""


class CorruptCommitError(LakeflowError):
    """A commit record cannot be parsed; the message names the key."""


class WeightsConflictError(LakeflowError):
    """Another trainer published the same weight version first (a lost create-only write or LATEST swap).

    Only one trainer may publish a model; after a crash, publish again with `force`.
    """


class WeightsIntegrityError(LakeflowError):
    """Downloaded weight objects or a rebuilt state do not match their manifest; nothing was loaded."""


class WeightsChainError(WeightsIntegrityError):
    """A version's chain of manifests is not one lakeflow publishes (it loops, skips a version, points
    forward, names another version or model, or starts with a delta): refused, nothing was loaded."""


class ConfigError(LakeflowError, ValueError):
    """A config is missing, malformed, or has unknown or invalid keys, or names something that cannot be used
    (a dataset, a model source, an extension); the message names them."""


class ConfigFileError(ConfigError, InputError):
    """A config file (or the document a command line builds) cannot be read or does not validate: not
    YAML or JSON, not a mapping, unknown or invalid keys. The message names the file and the keys."""


class PolicyError(LakeflowError):
    """A data policy (SQL file) is invalid or failed; the message names the file."""


class LeaseHeldError(LakeflowError):
    """Another process holds a lease (the dataflow's serving lease, a model's trainer lease); the message
    names the holder and when its lease ends."""


class LakeNotFoundError(LakeflowError):
    """A read-only command was pointed at a lake that does not exist (nothing under its URL)."""


class StoreAccessError(LakeflowError):
    """The object store could not be used: no such bucket, no or rejected credentials, endpoint
    unreachable. The message names the URL and key and says what to do."""


class StorePermissionError(StoreAccessError):
    """The store refused one action on one key (S3 AccessDenied); the message names both."""


class StoreUnreachableError(StoreAccessError):
    """The store could not be reached (connection refused or reset, timeouts, 5xx): may be transient."""


class StoreOutageError(StoreAccessError):
    """The store stayed unreachable for longer than the process's outage budget; the message says how long."""


class MissingToolError(LakeflowError):
    """An external command lakeflow drives (kubectl, sky, sbatch) is not on PATH; the message names it
    and what it is for."""


class TableConflictError(LakeflowError):
    """The compacted table moved on since this committer read it (another committer wrote): nothing was
    committed; read it again (only the process holding the dataflow lease should compact)."""


class PluginError(ConfigError):
    """A config names an extension (workflow, environment, reward, dataset loader, loss, engine, actuator)
    that is not shipped, not importable as `package.module:attr`, not registered by an installed package,
    or not of the right shape; the message names the key, the name and what is known."""


class LaunchCheckError(ConfigError):
    """`lakeflow launch` found problems a run would meet when it starts on the cluster (unknown GPU type,
    unreachable dataset, a local path the nodes cannot see, …); nothing was written. One problem per line."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


class ServiceExitedError(LakeflowError, RuntimeError):
    """A process lakeflow started and supervises exited on its own (not asked to stop, not drained); the
    message names it, its exit code and its log."""


class WriterDiedError(LakeflowError):
    """The trainer's writer process exited without being asked to (killed, out of memory)."""


class JudgeRefusedError(LakeflowError):
    """A judge endpoint refused a request for good (HTTP 400, 401, 403, 404, 422: a bad key, an unknown model,
    a prompt it cannot take): every group would fail the same way, so the rollout service stops; the message
    names the endpoint, the status and what to check."""


class VerdictFailure(LakeflowError):
    """One attempt to get a judge's verdict failed (unreachable, timed out, HTTP 5xx or 429, a reply with no
    usable score); it is retried, and a group whose verdicts still fail is held, never scored 0. `reply`:
    the judge's text when one came."""

    def __init__(self, reason: str, reply: str = "") -> None:
        super().__init__(reason)
        self.reply = reply
