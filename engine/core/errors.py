"""Errors that say what was wrong and what to do about it."""

from __future__ import annotations

import errno
import os
from collections.abc import Sequence

from engine.core.text import shown
from engine.core.units import format_mhz


def errno_text(err: int | None, message: str | None = None) -> str:
    """An errno as the kernel's name and message, e.g. "EACCES: Permission denied"."""
    code = errno.errorcode.get(err or 0, str(err))
    return f"{code}: {message or os.strerror(err or 0)}"


class SlmDvfsError(Exception):
    """Base error: every error of the tool carries a remedy for the user."""

    def __init__(self, what: str, remedy: str = "") -> None:
        super().__init__(what)
        self.what = what
        self.remedy = remedy

    def __str__(self) -> str:
        if self.remedy:
            return f"{self.what}\n  What to do: {self.remedy}"
        return self.what


def one_line(exc: BaseException) -> str:
    """An error on one line (a fleet's event or summary): ours as `what; what to do: remedy`,
    another with its type."""
    if isinstance(exc, SlmDvfsError):  # also a board's error re-raised by Ray (a subclass of both)
        return f"{exc.what}; what to do: {exc.remedy}" if exc.remedy else exc.what
    return f"{type(exc).__name__}: {exc}"


class DeviceError(SlmDvfsError):
    """Something about the board (or its twin) is missing or refused."""


class NodeNotFoundError(DeviceError):
    """A sysfs node the spec promises is not there."""


class UnsupportedFrequencyError(DeviceError):
    """A clock the board does not list was asked for."""

    def __init__(self, domain: str, requested_hz: int, available_hz: tuple[int, ...]) -> None:
        nearest = sorted(available_hz, key=lambda f: (abs(f - requested_hz), f))[:2]
        listed = ", ".join(f"{format_mhz(f)} MHz" for f in sorted(nearest))
        table = ", ".join(format_mhz(f) for f in sorted(set(available_hz)))
        super().__init__(
            f"{domain.upper()} clock {format_mhz(requested_hz)} MHz is not one the board lists",
            f"use a listed step; the nearest are {listed}. The board's {domain.upper()} table (MHz): {table}",
        )
        self.domain = domain
        self.requested_hz = requested_hz
        self.nearest_hz = tuple(sorted(nearest))


class PermissionDeniedError(DeviceError):
    """A write to a clock or mode file was refused by the kernel."""

    def __init__(self, path: str, err: int | None = None) -> None:
        why = f" ({errno_text(err)})" if err else ""
        super().__init__(
            f"no permission to write {path}{why}",
            "run as root (`sudo slm-dvfs ...`), or give your user write access to the "
            "clock files (see README, 'Real-board set-up')",
        )
        self.path = path


class ImplausibleReadingError(DeviceError):
    """A sensor reading the board cannot show (a negative current, a power past its limit)."""

    def __init__(self, what: str, remedy: str, rail: str) -> None:
        super().__init__(what, remedy)
        self.rail = rail


class ClockNotAppliedError(DeviceError):
    """A clock was written but the hardware did not follow."""


class UnsupportedBoardError(DeviceError):
    """A Jetson the device layer recognises but cannot drive yet (the AGX Thor): refused when its tree
    is first looked at, naming what is missing, never read as if it were a board we know."""

    def __init__(self, what: str, remedy: str, board: str, missing: Sequence[str]) -> None:
        super().__init__(what, remedy)
        self.board = board
        self.missing = tuple(missing)


class ProfileError(SlmDvfsError):
    """A shipped or user profile is missing or malformed."""


class ConfigError(SlmDvfsError):
    """A user-supplied option or specification is invalid."""


class UnknownChoiceError(ConfigError):
    """A value outside one of the fixed sets (precision, mode, padding, objective, ...): the remedy lists
    the set. engine.core.constants.parse_choice raises it at the edge where a text comes in."""

    def __init__(self, what: str, value: object, choices: Sequence[str], hint: str = "") -> None:
        listed = ", ".join(choices)
        super().__init__(f"unknown {what} {shown(value)!r}",
                         f"use one of {listed}" + (f" ({hint})" if hint else ""))
        self.kind = what
        self.value = value
        self.choices = tuple(choices)


class NoSweepPointsError(ConfigError):
    """The store holds no sweep points of the source and rails a selector learns from. `other_rails`: the rails
    presets its sweeps of that source do sum (a client offers --rails by this, never by the remedy's text)."""

    def __init__(self, what: str, remedy: str, other_rails: Sequence[str] = ()) -> None:
        super().__init__(what, remedy)
        self.other_rails = tuple(other_rails)


class NoRecordedSweepError(ConfigError):
    """A policy that chooses from a recorded sweep (the oracle) found none of the workload on the
    device: a client offers its own way to sweep it (the TUI its Sweep page) by this type."""
