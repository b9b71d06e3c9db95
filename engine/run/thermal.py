"""The thermal guard: experiments start on a cool board and stop before it overheats.

Before each sweep point (and each run of an experiment) the guard reads the hottest
thermal zone. Over `wait_c` it idles until the zone is back at or below `cooldown_c`
(hysteresis, so a point never starts just under the threshold); over `abort_c`, at
any step, it stops the experiment with `ThermalAbortError` (the clock guard around the
experiment then restores the clocks). Inside a run it does not raise: its listener
(`ThermalCheck`, and the sweep driver) answers the step with `RunControl.stop(reason, error)`,
the run ends at that boundary, and the harness raises the error once the run has wound down.
Outside a run (`check`, `before_point`: before a run starts, the baseline's cool-down) it raises.

Limits come from the device session (the twin profile's `[thermal_guard]` table) or
`DEFAULT_LIMITS` (75 / 85 / 65 degC, poll every 5 s); flags override both. The guard
waits through `session.idle`: on the twin that advances its idle time instead of
sleeping, so a sweep that has to cool down for minutes still finishes in moments.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import asdict, dataclass, fields, replace
from typing import TYPE_CHECKING, Callable

from engine.device.base import Device
from engine.core.errors import ConfigError, DeviceError
from engine.core.jsontypes import JsonObject
from engine.run.events import RunControl, RunListener, StepEnd
from engine.run.events import ThermalWait as ThermalWait  # defined with every event of a run

if TYPE_CHECKING:
    from engine.device.session import DeviceSession

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ThermalLimits:
    """Temperatures in degC of the hottest zone; times in s."""

    wait_c: float = 75.0
    abort_c: float = 85.0
    cooldown_c: float = 65.0
    poll_s: float = 5.0
    max_wait_s: float = 1800.0  # a board that does not cool within this is reported, not waited on
    origin: str = "defaults"  # where the limits came from: "defaults" | "profile NAME" | "+ flags"

    def __post_init__(self) -> None:
        for name in ("wait_c", "abort_c", "cooldown_c", "poll_s", "max_wait_s"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
                raise ConfigError(f"thermal limit {name} = {value!r} is not a number", "give degrees C / seconds")
        if not self.cooldown_c <= self.wait_c < self.abort_c:
            raise ConfigError(
                f"thermal limits must satisfy cooldown <= wait < abort, got cooldown {self.cooldown_c:g}, "
                f"wait {self.wait_c:g}, abort {self.abort_c:g} degC",
                "e.g. --thermal-cooldown-c 65 --thermal-wait-c 75 --thermal-abort-c 85",
            )
        if self.poll_s <= 0 or self.max_wait_s <= 0:
            raise ConfigError("thermal poll and maximum wait must be positive", "e.g. --thermal-poll-s 5")

    def with_overrides(self, **overrides: float | None) -> "ThermalLimits":
        """These limits with the given (non-None) values replaced; names as the fields."""
        given = {k: float(v) for k, v in overrides.items() if v is not None}
        unknown = set(given) - {f.name for f in fields(self)}
        if unknown:
            raise ConfigError(f"unknown thermal limit(s) {', '.join(sorted(unknown))}",
                              "use wait_c, abort_c, cooldown_c, poll_s, max_wait_s")
        if not given:
            return self
        return replace(self, **given, origin=f"{self.origin} + flags")

    def to_json(self) -> JsonObject:
        return {f.name: getattr(self, f.name) for f in fields(self)}


DEFAULT_LIMITS = ThermalLimits()


def limits_for(session: DeviceSession | None = None, **overrides: float | None) -> ThermalLimits:
    """The limits for a device session: its own (`session.thermal_guard_params()`, e.g. a
    twin profile's `[thermal_guard]`) when it has some, else the defaults; then the
    non-None overrides (wait_c=..., abort_c=..., ...)."""
    base = DEFAULT_LIMITS
    found = session.thermal_guard_params() if session is not None else None
    if found is not None:
        params, origin = found
        base = ThermalLimits(params.wait_c, params.abort_c, params.cooldown_c, params.poll_s, origin=origin)
    return base.with_overrides(**overrides)


class ThermalAbortError(DeviceError):
    """The board got hotter than the abort limit during an experiment."""


class ThermalGuard:
    """Reads a device's temperatures; waits for a cool board; aborts on a hot one.

    With a `session` (engine.device.session.DeviceSession) the guard waits through
    `session.idle` (the twin's virtual time); without one it sleeps
    (`sleep` is injectable for tests, and passed on to `session.idle`)."""

    def __init__(
        self,
        device: Device,
        limits: ThermalLimits = DEFAULT_LIMITS,
        *,
        session: DeviceSession | None = None,
        sleep: Callable[[float], None] = time.sleep,
        on_wait: Callable[[ThermalWait], RunControl | None] | None = None,
    ) -> None:
        self.device = device
        self.limits = limits
        self.session = session
        self._sleep = sleep
        self.on_wait = on_wait
        self.waits: list[ThermalWait] = []
        self.peak_c = -math.inf  # hottest reading seen

    def hottest(self) -> tuple[str, float]:
        """(zone, degC) of the hottest zone now; ("none", -inf) on a board with no zones."""
        try:  # the twin renders its files as they are read: they follow the last step
            temps = self.device.temperatures()
        except DeviceError as exc:
            log.warning("thermal guard cannot read temperatures (%s); not guarding", exc.what)
            return "none", -math.inf
        if not temps:
            return "none", -math.inf
        top = max(temps, key=lambda t: t.celsius)
        self.peak_c = max(self.peak_c, top.celsius)
        return top.zone, top.celsius

    def reading(self) -> tuple[float, ThermalAbortError | None]:
        """The hottest zone's degC, with the abort (not raised) when it is over abort_c."""
        zone, celsius = self.hottest()
        if celsius > self.limits.abort_c:
            return celsius, ThermalAbortError(
                f"{zone} is at {celsius:.1f} degC, over the {self.limits.abort_c:g} degC abort limit "
                f"({self.limits.origin}); the experiment was stopped and the clocks restored",
                "let the board cool and improve its cooling (fan mode, airflow), then run again "
                "(a sweep resumes where it stopped); or raise --thermal-abort-c if the limit is too strict",
            )
        return celsius, None

    def check(self) -> float:
        """Raise ThermalAbortError when the hottest zone is over abort_c; returns its degC."""
        celsius, abort = self.reading()
        if abort is not None:
            raise abort
        return celsius

    def step_control(self) -> RunControl | None:
        """Inside a run, after a step: stop (with the abort as its error) when over abort_c; else None."""
        _celsius, abort = self.reading()
        return None if abort is None else stop_for(abort)

    def point_control(self, label: str = "") -> RunControl | None:
        """Inside a run, before a sweep point: the wait of `before_point`, its abort answered as a stop."""
        result = self.cool_down(label)
        return stop_for(result) if isinstance(result, ThermalAbortError) else None

    def before_point(self, label: str = "") -> ThermalWait | None:
        """Abort (raise) if too hot; wait (idle) while over wait_c, until at or below cooldown_c."""
        result = self.cool_down(label)
        if isinstance(result, ThermalAbortError):
            raise result
        return result

    def cool_down(self, label: str = "") -> ThermalWait | ThermalAbortError | None:
        """Wait (idle) while over wait_c, until at or below cooldown_c: the wait, None when none was
        needed, or the abort (returned, not raised) when over abort_c or not cool within max_wait_s."""
        start, abort = self.reading()
        if abort is not None:
            return abort
        if start <= self.limits.wait_c:
            return None
        zone, _ = self.hottest()
        log.info("%s is at %.1f degC (over %g): waiting to cool to %g degC%s", zone, start,
                 self.limits.wait_c, self.limits.cooldown_c, f" before {label}" if label else "")
        waited = 0.0
        celsius = start
        while celsius > self.limits.cooldown_c:
            if waited >= self.limits.max_wait_s:
                return ThermalAbortError(
                    f"the board stayed above {self.limits.cooldown_c:g} degC for {waited:.0f} s "
                    f"({zone} at {celsius:.1f} degC)",
                    "check the fan and the air around the board, then run again (a sweep resumes)",
                )
            step = min(self.limits.poll_s, self.limits.max_wait_s - waited)
            if self.session is not None:
                self.session.idle(step, sleep=self._sleep)
            else:
                self._sleep(step)
            waited += step
            celsius, abort = self.reading()
            if abort is not None:
                return abort
        wait = ThermalWait(zone, start, celsius, waited, label,
                           simulated=self.session is not None and self.session.virtual_time)
        self.waits.append(wait)
        log.info("cooled from %.1f to %.1f degC in %.0f s%s", start, celsius, waited,
                 " (twin idle time)" if wait.simulated else "")
        if self.on_wait is not None:
            self.on_wait(wait)
        return wait

    def describe(self) -> JsonObject:
        return {
            "limits": self.limits.to_json(),
            "waits": [asdict(w) for w in self.waits],
            "peak_c": None if self.peak_c == -math.inf else self.peak_c,
        }


def stop_for(abort: ThermalAbortError) -> RunControl:
    """The run's answer to an abort: stop at this boundary, the abort's text its reason, the abort
    its error (the harness raises it once the run has wound down: stored failed, clocks restored)."""
    return RunControl.stop(abort.what, error=abort)


class ThermalCheck(RunListener):
    """A run's listener: after each step, stop the run when the board is over the guard's abort limit."""

    def __init__(self, guard: ThermalGuard) -> None:
        self.guard = guard

    def on_step_end(self, event: StepEnd) -> RunControl | None:
        return self.guard.step_control()
