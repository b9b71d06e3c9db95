"""The results store's errors: each says what was wrong with the database and what to do."""

from __future__ import annotations

from pathlib import Path

from engine.core.errors import SlmDvfsError


class StoreError(SlmDvfsError):
    """The results database cannot be used as asked."""


class CorruptStoreError(StoreError):
    """The database file is damaged or is not a database at all."""

    def __init__(self, path: Path, detail: str) -> None:
        super().__init__(
            f"the results database {path} is unreadable: {detail}",
            f"move it aside (e.g. `mv {path} {path}.broken`) and slm-dvfs starts a new one there; "
            "nothing was deleted. Or point --db / $SLM_DVFS_DB at another file",
        )
        self.path = path


class StoreVersionError(StoreError):
    """The database was written by a newer slm-dvfs."""


class UnknownRecordError(StoreError):
    """An id that the database does not hold."""


class SweepInUseError(StoreError):
    """A sweep with these parameters is running in another live process: resuming it would take it over."""

    def __init__(self, what: str, remedy: str, sweep_id: int, owner_lock: str) -> None:
        super().__init__(what, remedy)
        self.sweep_id = sweep_id
        self.owner_lock = owner_lock
