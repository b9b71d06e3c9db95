"""The results store's errors: each says what was wrong with the database and what to do."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from engine.core.errors import SlmDvfsError, UnknownChoiceError
from engine.core.text import shown

T = TypeVar("T")


class StoreError(SlmDvfsError):
    """The results database cannot be used as asked."""


class CorruptStoreError(StoreError):
    """The database file is damaged or is not a database at all."""

    path: Path | None  # None: a row's value (CorruptRowError), read from the store in use

    def __init__(self, path: Path, detail: str) -> None:
        super().__init__(
            f"the results database {path} is unreadable: {detail}",
            f"move it aside (e.g. `mv {path} {path}.broken`) and slm-dvfs starts a new one there; "
            "nothing was deleted. Or point --db / $SLM_DVFS_DB at another file",
        )
        self.path = path


class CorruptRowError(CorruptStoreError):
    """A stored row holds a value outside its fixed set (a status, a mode, a precision...) that slm-dvfs never
    writes: edited by hand or by another program. Named, never passed on as if it were one of the set."""

    def __init__(self, row: str, column: str, value: object, choices: Sequence[str]) -> None:
        StoreError.__init__(
            self,
            f"the results database's {row} holds {column} {shown(value)!r}, which is not one slm-dvfs writes "
            f"({', '.join(choices)})",
            f"the row was changed outside slm-dvfs: set its {column} to one of those with sqlite3, or move the "
            "database aside (slm-dvfs starts a new one there); nothing was changed",
        )
        self.path = None
        self.row = row
        self.column = column
        self.value = value


def stored_choice(parse: Callable[[object], T], value: object, row: str, column: str) -> T:
    """A stored value of a fixed set, parsed as it is read (`parse`: engine.core.constants.parse_mode and the
    like); CorruptRowError naming the row when it is outside the set."""
    try:
        return parse(value)
    except UnknownChoiceError as exc:
        raise CorruptRowError(row, column, value, exc.choices) from None


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
