"""The DVFS controller: a trainer callback that applies a policy's settings at step boundaries.

    with ClockGuard(device) as guard:         # the guard restores; the controller never does
        controller = DvfsController(device, make_policy("online"), PolicyContext(device, objective), guard=guard)
        Trainer(..., callbacks=[controller, ...]).run()

RunStarted applies the policy's initial setting (`prepare()` chooses and checks it before the
run is recorded, so a setting the board refuses stores no run). Each `StepEnergy` (the run harness's
power-monitor window over one step, summed over the run's rails; exact on the twin,
measured on a board) gives the policy that step's cost; a setting the policy returns is
applied before the next step (callbacks run synchronously on the training thread).
The controller reads no power itself: a run without a monitor gives the policy no costs.

jetson_clocks is run with `--store` the first time, into the state directory, and the
guard it was handed (the run harness's) is told, so that it runs `jetson_clocks --restore`
before putting its snapshot back (also when it recovers after a SIGKILL).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

from engine.core import paths
from engine.device.base import ClockDomain, Device
from engine.core.measurement import Measurement
from engine.dvfs.policies import Policy, PolicyContext
from engine.device.setting import DvfsSetting, check_setting
from engine.core.errors import DeviceError
from engine.core.jsontypes import JsonObject
from engine.workload.events import RunControl, RunStarted, StepBegin, StepEnd, StepEnergy, TrainingListener

if TYPE_CHECKING:
    from engine.device.guard.guard import ClockGuard

log = logging.getLogger(__name__)


class DvfsController(TrainingListener):
    """Applies a policy's settings to a device at step boundaries (a listener of the trainer's events)."""

    def __init__(
        self,
        device: Device,
        policy: Policy,
        ctx: PolicyContext,
        *,
        guard: ClockGuard | None = None,
    ) -> None:
        self.device = device
        self.policy = policy
        self.ctx = ctx
        self.guard = guard  # the run's clock guard, told of a jetson_clocks store (None: none guards)
        self.jetson_clocks_store: Path | None = None  # where jetson_clocks --store wrote, once run
        self.history: list[tuple[int, DvfsSetting]] = []  # (first step it applied to, setting)
        self.current: DvfsSetting | None = None
        self.last_cost: Measurement | None = None
        self._next_step = 1
        self._prepared: DvfsSetting | None = None

    # ------------------------------------------------------------------ the hooks

    def on_run_started(self, event: RunStarted) -> RunControl | None:
        self._next_step = event.start_step + 1
        first, self._prepared = self._prepared, None
        self.apply(first if first is not None else self.policy.initial(self.ctx))
        return None

    def on_step_begin(self, event: StepBegin) -> RunControl | None:
        self._next_step = event.step
        return None

    def on_step_end(self, event: StepEnd) -> RunControl | None:
        self._next_step = event.step + 1
        return None

    def on_step_energy(self, event: StepEnergy) -> RunControl | None:
        self._next_step = event.step + 1
        cost = self.measure(event)
        self.last_cost = cost
        new = self.policy.on_step_end(event.step, cost)
        if new is not None and new != self.current:
            self.apply(new)
        return None

    @staticmethod
    def measure(event: StepEnergy) -> Measurement | None:
        """The step's cost from its energy window; None for an empty one."""
        if event.time_s <= 0 or event.samples <= 0:
            log.debug("step %d: empty power window, no cost", event.step)
            return None
        return Measurement(event.time_s, event.total_energy_j, event.samples, event.peak_power_w, event.source)

    def prepare(self) -> DvfsSetting:
        """The policy's first setting, chosen and checked against the board now (an unlisted clock,
        an undefined mode, an oracle without a sweep raise here), before anything is recorded or
        changed; RunStarted then applies it without asking the policy again."""
        setting = self.policy.initial(self.ctx)
        check_setting(self.device, setting)
        self._prepared = setting
        return setting

    # ------------------------------------------------------------------ applying a setting

    def apply(self, setting: DvfsSetting) -> None:
        """Bring the device to `setting`: the nvpmodel mode first (a switch rewrites caps),
        then jetson_clocks if asked, then pin or unpin each domain. Only what differs from
        the last applied setting is touched, except on the first apply and after a mode
        switch or jetson_clocks, when every domain is set."""
        check_setting(self.device, setting)  # refuse before changing anything
        prev = self.current
        full = prev is None or prev.jetson_clocks != setting.jetson_clocks
        # Ask the board for its mode only when we did not put it there ourselves.
        if setting.nvpmodel is not None and (prev is None or prev.nvpmodel != setting.nvpmodel):
            if self.device.power_mode().id != setting.nvpmodel:
                self.device.set_power_mode(setting.nvpmodel)
                full = True
        if setting.jetson_clocks:
            self._jetson_clocks()
            full = True
        for domain in ClockDomain:
            want = setting.clock(domain)
            if not full and prev is not None and prev.clock(domain) == want:
                continue
            if want is not None:
                self.device.pin(domain, want)
            elif not setting.jetson_clocks:  # jetson_clocks holds what it pinned
                self._unpin(domain)
        self.current = setting
        self.history.append((self._next_step, setting))
        log.info("DVFS from step %d: %s", self._next_step, setting.label())

    def _jetson_clocks(self) -> None:
        """jetson_clocks, storing the state first the first time (also the fan, which our
        snapshot does not hold), with the run's guard told where, so it restores from it."""
        guard = self.guard if self.guard is not None and self.guard.active else None
        if self.jetson_clocks_store is not None or (guard is not None and guard.jetson_clocks_store is not None):
            self.device.jetson_clocks()  # the first store holds the state from before any of them
            return
        store = paths.state_dir() / f"jetson_clocks-{os.getpid()}.store"
        if guard is not None:
            guard.note_jetson_clocks_store(store)  # journalled before the store exists: a SIGKILL is covered
        else:
            log.warning("jetson_clocks without a clock guard: `jetson_clocks --restore %s` undoes it", store)
        self.device.jetson_clocks(store=store)
        self.jetson_clocks_store = store

    def _unpin(self, domain: ClockDomain) -> None:
        try:
            self.device.unpin(domain)
        except DeviceError as exc:
            # A domain the board lacks (no EMC debugfs without root) has no governor to give back.
            if self.device_has(domain):
                raise
            log.warning("cannot hand %s back to its governor: %s", domain, exc.what)

    def device_has(self, domain: ClockDomain) -> bool:
        try:
            self.device.clock(domain)
        except DeviceError:
            return False
        return True

    def describe(self) -> JsonObject:
        return {
            "policy": self.policy.describe(),
            "history": [{"from_step": step, "setting": s.to_json(), "label": s.label()} for step, s in self.history],
        }
