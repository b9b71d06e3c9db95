"""The Jetson device: the Device protocol over kernel files under a root (`/` on a board).

A digital twin renders the same files under another root (and marks it with a
`.slm-dvfs-twin` file), so this one code path serves the board and its twin.
Who the board is: `identity.py`; how clocks are written safely: `writes.py`; the
settings the guard journals and restores: `settings.py`; L4T's tools: `l4t_tools.py`.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import Mapping

from engine.core.clocks import highest_at_most
from engine.core.errors import DeviceError, NodeNotFoundError, UnsupportedFrequencyError
from engine.core.jsontypes import JsonObject
from engine.device import nvpmodel
from engine.device.base import (
    ClockDomain,
    ClockState,
    DeviceIdentity,
    DeviceSettings,
    PowerMode,
    RailReading,
    TemperatureReading,
)
from engine.device.activity import DeviceActivity
from engine.device.jetson.activity import ActivityReader
from engine.device.jetson.discovery import CpuPolicy, JetsonNodes, RailNode, discover
from engine.device.jetson import l4t_tools
from engine.device.jetson import writes as w
from engine.device.jetson.identity import read_identity
from engine.device.jetson.scaling import GpuScaling, read_gpu_scaling
from engine.device.jetson.settings import CpuCluster, cpu_clusters, read_settings, restore_steps
from engine.device.sysfs import OpenFiles, SysfsTree

log = logging.getLogger(__name__)

DEFAULT_RAIL_INTERVAL_S = 0.05
DEFAULT_GOVERNOR = {ClockDomain.GPU: "nvhost_podgov", ClockDomain.CPU: "schedutil"}


class JetsonDevice:
    """A Jetson (or its twin) seen through its kernel files."""

    def __init__(
        self,
        root: str | os.PathLike[str] = "/",
        *,
        settle_s: float = 0.5,
    ) -> None:
        # The resolved root: `T/../T` is the same board (one lock, one journal key).
        self.root = Path(os.path.realpath(root))
        self.tree = SysfsTree(self.root)
        self.settle_s = settle_s
        self._nodes: JetsonNodes | None = None
        # The rail files, kept open: the power sampler reads them many times a second.
        self._rail_files = OpenFiles(self.tree)
        # Governors we replaced while pinning, to give back on unpin.
        self._prev_governor: dict[ClockDomain, str] = {}
        self._activity = ActivityReader(self.tree, lambda: self.nodes)

    def __repr__(self) -> str:
        return f"JetsonDevice(root={str(self.root)!r})"

    # ------------------------------------------------------------------ discovery

    @property
    def nodes(self) -> JetsonNodes:
        if self._nodes is None:
            self._nodes = discover(self.tree)
        return self._nodes

    def rediscover(self) -> JetsonNodes:
        """Look at the tree again (after a driver reload or a twin re-render)."""
        self._nodes = None
        self._rail_files.close()
        self._activity.reset()
        return self.nodes

    def close(self) -> None:
        """Close the rail files kept open (reading a rail again reopens them)."""
        self._rail_files.close()

    def __enter__(self) -> "JetsonDevice":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ identity

    def identity(self) -> DeviceIdentity:
        return read_identity(self.tree)

    # ------------------------------------------------------------------ clocks

    def clock_table(self, domain: ClockDomain) -> tuple[int, ...]:
        domain = ClockDomain(domain)
        if domain is ClockDomain.GPU:
            return tuple(sorted(self.tree.read_ints(f"{self.nodes.require_gpu()}/available_frequencies")))
        if domain is ClockDomain.CPU:
            pol = self._active_policies()[0]
            avail = f"{pol.path}/scaling_available_frequencies"
            if self.tree.exists(avail):
                return tuple(sorted(f * 1000 for f in self.tree.read_ints(avail)))
            lo = self.tree.read_int(f"{pol.path}/cpuinfo_min_freq")
            hi = self.tree.read_int(f"{pol.path}/cpuinfo_max_freq")
            return tuple(sorted({lo * 1000, hi * 1000}))
        emc = self.nodes.require_emc()
        if self.nodes.emc_possible_rates:
            return tuple(sorted(r * 1000 for r in self.tree.read_ints(self.nodes.emc_possible_rates)))  # kHz
        log.warning("no EMC possible_rates file; offering only the min and max rates")
        return tuple(sorted({self.tree.read_int(f"{emc}/min_rate"), self.tree.read_int(f"{emc}/max_rate")}))

    def clock(self, domain: ClockDomain) -> ClockState:
        domain = ClockDomain(domain)
        t = self.tree
        if domain is ClockDomain.GPU:
            g = self.nodes.require_gpu()
            return ClockState(
                domain=domain,
                cur_hz=t.read_int(f"{g}/cur_freq"),
                min_hz=t.read_int(f"{g}/min_freq"),
                max_hz=t.read_int(f"{g}/max_freq"),
                governor=t.read_str(f"{g}/governor"),
                available_governors=w.read_governors(self.tree, f"{g}/available_governors"),
            )
        if domain is ClockDomain.CPU:
            p = self._active_policies()[0].path
            return ClockState(
                domain=domain,
                cur_hz=t.read_int(f"{p}/scaling_cur_freq") * 1000,
                min_hz=t.read_int(f"{p}/scaling_min_freq") * 1000,
                max_hz=t.read_int(f"{p}/scaling_max_freq") * 1000,
                governor=t.read_str(f"{p}/scaling_governor"),
                available_governors=w.read_governors(self.tree, f"{p}/scaling_available_governors"),
            )
        e = self.nodes.require_emc()
        return ClockState(
            domain=domain,
            cur_hz=t.read_int(f"{e}/rate"),
            min_hz=t.read_int(f"{e}/min_rate"),
            max_hz=t.read_int(f"{e}/max_rate"),
            governor=None,
            locked=t.read_int(f"{e}/mrq_rate_locked") != 0,
        )

    def pin(self, domain: ClockDomain, hz: int) -> ClockState:
        domain = ClockDomain(domain)
        hz = int(hz)
        table = self.clock_table(domain)
        if hz not in table:
            raise UnsupportedFrequencyError(domain.value, hz, table)
        if domain is ClockDomain.GPU:
            g = self.nodes.require_gpu()
            state = self.clock(domain)
            if "userspace" in state.available_governors and state.governor != "userspace":
                self._prev_governor.setdefault(domain, state.governor or DEFAULT_GOVERNOR[domain])
                self.tree.write(f"{g}/governor", "userspace")
            w.write_range(self.tree, f"{g}/min_freq", f"{g}/max_freq", hz, hz)
            w.verify_clock(self.tree, domain, [f"{g}/cur_freq"], hz, 1, table, self.settle_s)
        elif domain is ClockDomain.CPU:
            khz = hz // 1000
            policies = self._active_policies()
            for pol in policies:
                w.write_range(self.tree, f"{pol.path}/scaling_min_freq", f"{pol.path}/scaling_max_freq", khz, khz)
            cur_files = [f"{p.path}/scaling_cur_freq" for p in policies]
            w.verify_clock(self.tree, domain, cur_files, hz, 1000, table, self.settle_s)
        else:
            e = self.nodes.require_emc()
            self.tree.write(f"{e}/mrq_rate_locked", 1)  # lock first, or the BPMP moves it back
            self.tree.write(f"{e}/rate", hz)
            w.verify_clock(self.tree, domain, [f"{e}/rate"], hz, 1, table, self.settle_s)
        log.info("pinned %s to %.1f MHz", domain, hz / 1e6)
        return self.clock(domain)

    def unpin(self, domain: ClockDomain) -> ClockState:
        domain = ClockDomain(domain)
        if domain is ClockDomain.EMC:
            self.tree.write(f"{self.nodes.require_emc()}/mrq_rate_locked", 0)
            return self.clock(domain)
        table = self.clock_table(domain)
        mode = self.mode_or_none()
        cap = None if mode is None else (mode.gpu_max_hz if domain is ClockDomain.GPU else mode.cpu_max_hz)
        lo, hi = table[0], highest_at_most(table, cap)
        governor = self._prev_governor.pop(domain, DEFAULT_GOVERNOR[domain])
        if domain is ClockDomain.GPU:
            g = self.nodes.require_gpu()
            w.set_governor(self.tree, f"{g}/governor", f"{g}/available_governors", governor)
            w.write_range(self.tree, f"{g}/min_freq", f"{g}/max_freq", lo, hi)
        else:
            active = self._active_policies()
            for pol in active:
                w.set_policy(self.tree, pol, governor, lo, hi)
            # A cluster that a mode switch took offline keeps the range it had (a pin's raised
            # minimum) and would come back online with it: hand it back too, where the kernel lets us.
            for pol in self.nodes.require_cpu():
                if pol not in active:
                    w.try_offline_policy(self.tree, pol, governor, lo, hi)
        log.info("unpinned %s (%.1f-%.1f MHz, %s)", domain, lo / 1e6, hi / 1e6, governor)
        return self.clock(domain)

    # ------------------------------------------------------------------ sensors

    def rails(self) -> tuple[RailReading, ...]:
        rails = self.nodes.rails
        values = self._read_rail_files(rails)
        return tuple(
            RailReading(name=r.name, voltage_mv=float(values[2 * i]), current_ma=float(values[2 * i + 1]))
            for i, r in enumerate(rails)
        )

    def rail(self, name: str) -> RailReading:
        """One rail by its board label; a clear error names the rails that exist."""
        r = self.nodes.rail(name)
        mv, ma = self._read_rail_files((r,))
        return RailReading(name=r.name, voltage_mv=float(mv), current_ma=float(ma))

    def _read_rail_files(self, rails: tuple[RailNode, ...]) -> list[int]:
        """mV and mA of each rail, in order, with `pread` on the files kept open."""
        try:
            return self._rail_files.read_ints([f for r in rails for f in (r.voltage, r.current)])
        except NodeNotFoundError as exc:
            gone = [r.name for r in rails if str(self.tree.path(r.voltage)) in exc.what
                    or str(self.tree.path(r.current)) in exc.what]
            raise DeviceError(
                f"power rail {', '.join(gone) or '?'} vanished: {exc.what}",
                "check the board's INA3221 driver (`slm-dvfs device` lists the rails) and restart the run",
            ) from None

    def rail_update_interval_s(self) -> float:
        f = self.nodes.rail_update_interval
        if f is None:
            return DEFAULT_RAIL_INTERVAL_S
        try:
            ms = self.tree.read_int(f)
        except DeviceError:
            return DEFAULT_RAIL_INTERVAL_S
        return ms / 1000.0 if ms > 0 else DEFAULT_RAIL_INTERVAL_S

    def temperatures(self) -> tuple[TemperatureReading, ...]:
        out = []
        for kind, zone in self.nodes.thermal_zones:
            try:
                out.append(TemperatureReading(kind, self.tree.read_int(f"{zone}/temp") / 1000.0))
            except DeviceError as exc:  # some zones refuse reads while their sensor is off
                log.debug("skipping thermal zone %s: %s", kind, exc.what)
        return tuple(out)

    def gpu_scaling(self) -> GpuScaling:
        """Whether the GPU's clock follows its load (3D scaling), where this L4T keeps that."""
        return read_gpu_scaling(self.tree, self.nodes)

    def gpu_load(self) -> float:
        per_mille = self.tree.read_int(f"{self.nodes.require_gpu_device()}/load")
        return min(1.0, max(0.0, per_mille / 1000.0))

    def activity(self, emc_hz: int | None = None, temperatures: tuple[TemperatureReading, ...] = ()) -> DeviceActivity:
        """Per-core CPU load and clock, EMC load, fan, memory and trip points crossed, as jtop reads
        them (engine/device/jetson/activity.py); a part this board lacks is None."""
        return self._activity.read(emc_hz, temperatures)

    # ------------------------------------------------------------------ modes

    def power_modes(self) -> tuple[PowerMode, ...]:
        conf = self.nodes.nvpmodel_conf
        if conf is None:
            raise NodeNotFoundError(
                f"no nvpmodel conf at {self.tree.path('etc/nvpmodel.conf')}: the power modes are unknown "
                f"(a container?)",
                "policies that switch modes (mode:N, maxn, static:...,mode=N) need the board's conf: run on the "
                "host, or bind-mount /etc/nvpmodel.conf and /etc/nvpmodel/ into the container; pinned clocks "
                "(static:gpu=MHz) and everything else work without it",
            )
        modes, _default = nvpmodel.parse_conf(self.tree.read_str(conf))
        return modes

    def power_mode(self) -> PowerMode:
        if l4t_tools.available(self.root, "nvpmodel"):
            mode_id, name = l4t_tools.nvpmodel_query(self.root)
        else:
            mode_id, name = self._status_mode()
        try:
            modes = self.power_modes()
        except DeviceError:
            modes = ()
        return next((m for m in modes if m.id == mode_id), PowerMode(mode_id, name))

    def _status_mode(self) -> tuple[int, str]:
        status = self.nodes.nvpmodel_status
        if status is None:
            raise DeviceError(
                f"cannot tell the power mode: nvpmodel cannot run here ({l4t_tools.route(self.root)}) and "
                f"{self.tree.path('var/lib/nvpmodel/status')} is missing",
                f"install nvpmodel (JetPack) at {l4t_tools.NVPMODEL}; in a container, the mode is unknown",
            )
        text = self.tree.read_str(status)
        m = re.search(r"pmode:(\d+)", text)
        if not m:
            raise DeviceError(f"{self.tree.path(status)} holds {text!r}", "run `sudo nvpmodel -q` to repair it")
        return int(m.group(1)), f"MODE_{int(m.group(1))}"

    def mode_or_none(self) -> PowerMode | None:
        """The power mode, or None (logged) where it cannot be told: then no mode cap applies."""
        try:
            return self.power_mode()
        except DeviceError as exc:
            log.warning("power mode unknown, no mode cap applied: %s", exc.what)
            return None

    def set_power_mode(self, mode_id: int) -> None:
        ids = [m.id for m in self.power_modes()]
        if mode_id not in ids:
            raise DeviceError(
                f"power mode {mode_id} is not defined", f"use one of {ids} (`slm-dvfs device` lists them)"
            )
        l4t_tools.nvpmodel_switch(self.root, mode_id)
        log.info("switched nvpmodel to %d", mode_id)

    def jetson_clocks(self, store: Path | None = None) -> None:
        l4t_tools.jetson_clocks(self.root, store=store)

    def jetson_clocks_restore(self, store: Path) -> None:
        l4t_tools.jetson_clocks_restore(self.root, store)

    # ------------------------------------------------------------------ snapshot

    def cpu_clusters(self) -> tuple[CpuCluster, ...]:
        """Each CPU cluster: clocked, offline, or without a cpufreq folder (unknown, never pinned)."""
        return cpu_clusters(self)

    def read_settings(self) -> DeviceSettings:
        """Every setting we may change; the CPU once per cpufreq policy, since a mode switch
        hot-plugs whole clusters and each must get its own range back."""
        return read_settings(self)

    def apply_settings(self, settings: DeviceSettings) -> None:
        """Restore a snapshot, best effort per setting, then raise one DeviceError listing
        what failed (so one refused write does not leave every other pin in place); the
        order is `settings.restore_steps`'s."""
        failed = restore_steps(self, settings)
        self._prev_governor.clear()
        if failed:
            raise DeviceError(
                f"{len(failed)} setting(s) could not be restored: " + "; ".join(failed),
                "the rest was restored; fix the cause above and run `slm-dvfs restore` again "
                "(`sudo nvpmodel -m <id>` resets a mode's clocks, a reboot resets everything)",
            )
        log.info("applied settings %s", settings.to_json())

    # ------------------------------------------------------------------ reopen

    def describe(self) -> JsonObject:
        return {
            "kind": "jetson",
            "root": str(self.root),
        }  # no tool paths: a journal never says what to execute

    @classmethod
    def from_description(cls, d: Mapping[str, object]) -> "JetsonDevice":
        if d.get("kind") != "jetson":
            raise DeviceError(
                f"cannot reopen a {d.get('kind')!r} device as a Jetson",
                "open it with the backend that described it",
            )
        return cls(str(d.get("root", "/")))  # tool paths in an old journal are ignored

    # ------------------------------------------------------------------ helpers

    def _active_policies(self) -> tuple[CpuPolicy, ...]:
        return w.active_policies(self.tree, self.nodes)
