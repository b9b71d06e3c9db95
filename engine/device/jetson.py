"""The Jetson backend: the Device protocol over kernel files under a root (`/` on a board).

A digital twin renders the same files under another root (and marks it with a
`.slm-dvfs-twin` file), so this one code path serves the board and its twin.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import time
from pathlib import Path
from typing import Any, Mapping

from engine.device import jetson_clocks as jc
from engine.device import nvpmodel
from engine.device.base import (
    ClockDomain,
    ClockState,
    DeviceIdentity,
    DeviceSettings,
    DomainSettings,
    PowerMode,
    RailReading,
    TemperatureReading,
)
from engine.core.clocks import highest_at_most
from engine.device.discovery import CpuPolicy, JetsonNodes, discover
from engine.device.sysfs import SysfsTree
from engine.core.errors import (
    ClockNotAppliedError,
    DeviceError,
    NodeNotFoundError,
    UnsupportedFrequencyError,
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 (JetPack 6)
    import tomli as tomllib

log = logging.getLogger(__name__)

TWIN_MARKER = ".slm-dvfs-twin"
DEFAULT_RAIL_INTERVAL_S = 0.05
_POLL_S = 0.01
DEFAULT_GOVERNOR = {ClockDomain.GPU: "nvhost_podgov", ClockDomain.CPU: "schedutil"}

# Module part numbers as they appear in the device tree's `compatible`.
MODULES = {
    "p3701-0000": "P3701-0000 (AGX Orin 64GB)",
    "p3701-0004": "P3701-0004 (AGX Orin 32GB)",
    "p3701-0005": "P3701-0005 (AGX Orin 64GB)",
    "p3701-0008": "P3701-0008 (AGX Orin Industrial 64GB)",
}
# L4T release -> JetPack, exact first, then by major.minor, then by major.
_JETPACK_EXACT = {
    "36.4.4": "6.2.1", "36.4.3": "6.2", "36.4.0": "6.1", "36.3.0": "6.0", "36.2.0": "6.0 DP",
    "35.6.1": "5.1.5", "35.6.0": "5.1.4", "35.5.0": "5.1.3", "35.4.1": "5.1.2", "35.3.1": "5.1.1",
    "35.2.1": "5.1", "35.1.0": "5.0.2", "34.1.1": "5.0.1 DP", "34.1.0": "5.0 DP",
    "32.7.6": "4.6.6", "32.7.5": "4.6.5", "32.7.4": "4.6.4", "32.7.3": "4.6.3", "32.7.2": "4.6.2",
    "32.7.1": "4.6.1", "32.6.1": "4.6", "32.5.1": "4.5.1", "32.5.0": "4.5",
}  # fmt: skip
_JETPACK_MINOR = {"36.4": "6.1/6.2", "36.3": "6.0", "35.6": "5.1.4", "35.5": "5.1.3", "35.4": "5.1.2", "32.7": "4.6.x"}
_JETPACK_MAJOR = {"36": "6.x", "35": "5.1.x", "34": "5.0 DP", "32": "4.x"}


def jetpack_for(l4t: str | None) -> str | None:
    """The JetPack release that ships an L4T release ("36.3.0" -> "6.0")."""
    if not l4t:
        return None
    parts = l4t.split(".")
    return (
        _JETPACK_EXACT.get(l4t)
        or _JETPACK_MINOR.get(".".join(parts[:2]))
        or _JETPACK_MAJOR.get(parts[0])
    )


def module_for(compatible: str) -> str:
    """The module part from a NUL-separated `compatible` ("nvidia,p3737-0000+p3701-0000...")."""
    parts = re.findall(r"p\d{4}-\d{4}", compatible.replace("\0", " "))
    for part in parts:
        if part in MODULES:
            return MODULES[part]
    modules = [p for p in parts if not p.startswith("p3737")]  # p3737 is the carrier board
    return modules[0].upper() if modules else "unknown module"


class JetsonDevice:
    """A Jetson (or its twin) seen through its kernel files."""

    def __init__(
        self,
        root: str | os.PathLike[str] = "/",
        *,
        nvpmodel_cmd: str | None = None,
        jetson_clocks_cmd: str | None = None,
        settle_s: float = 0.5,
    ) -> None:
        self.root = Path(root)
        self.tree = SysfsTree(self.root)
        self.nvpmodel_cmd = nvpmodel_cmd or str(self.root / "usr/sbin/nvpmodel")
        self.jetson_clocks_cmd = jetson_clocks_cmd or str(self.root / "usr/bin/jetson_clocks")
        self.settle_s = settle_s
        self._nodes: JetsonNodes | None = None
        # Governors we replaced while pinning, to give back on unpin.
        self._prev_governor: dict[ClockDomain, str] = {}

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
        return self.nodes

    # ------------------------------------------------------------------ identity

    def identity(self) -> DeviceIdentity:
        board = self.tree.read_str("proc/device-tree/model").replace("\0", "").strip()
        try:
            module = module_for(self.tree.read_str("proc/device-tree/compatible"))
        except DeviceError:
            module = "unknown module"
        l4t = self._l4t()
        profile = self._twin_profile()
        return DeviceIdentity(
            board=board,
            module=module,
            l4t=l4t,
            jetpack=jetpack_for(l4t),
            is_twin=profile is not None,
            profile=profile or None,
        )

    def _l4t(self) -> str | None:
        try:
            text = self.tree.read_str("etc/nv_tegra_release")
        except DeviceError:
            return None
        m = re.search(r"#\s*R(\d+)\s*\(release\),\s*REVISION:\s*([\d.]+)", text)
        if not m:
            log.warning("unrecognised etc/nv_tegra_release: %r", text[:120])
            return None
        rev = m.group(2).rstrip(".")
        return f"{m.group(1)}.{rev}" if rev.count(".") >= 1 else f"{m.group(1)}.{rev}.0"

    def _twin_profile(self) -> str | None:
        """"" for a twin without a profile, None for a board."""
        marker = self.root / TWIN_MARKER
        if not marker.is_file():
            return None
        try:
            data = tomllib.loads(marker.read_text())
        except (tomllib.TOMLDecodeError, OSError) as exc:
            raise DeviceError(
                f"{marker} is not valid TOML ({exc})",
                'it should hold one line like `profile = "agx-orin-64gb"`; re-create the twin',
            ) from None
        return str(data.get("profile", ""))

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
                available_governors=self._governors(f"{g}/available_governors"),
            )
        if domain is ClockDomain.CPU:
            p = self._active_policies()[0].path
            return ClockState(
                domain=domain,
                cur_hz=t.read_int(f"{p}/scaling_cur_freq") * 1000,
                min_hz=t.read_int(f"{p}/scaling_min_freq") * 1000,
                max_hz=t.read_int(f"{p}/scaling_max_freq") * 1000,
                governor=t.read_str(f"{p}/scaling_governor"),
                available_governors=self._governors(f"{p}/scaling_available_governors"),
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
            self._write_range(f"{g}/min_freq", f"{g}/max_freq", hz, hz)
            self._verify(domain, [f"{g}/cur_freq"], hz, 1, table)
        elif domain is ClockDomain.CPU:
            khz = hz // 1000
            policies = self._active_policies()
            for pol in policies:
                self._write_range(f"{pol.path}/scaling_min_freq", f"{pol.path}/scaling_max_freq", khz, khz)
            self._verify(domain, [f"{p.path}/scaling_cur_freq" for p in policies], hz, 1000, table)
        else:
            e = self.nodes.require_emc()
            self.tree.write(f"{e}/mrq_rate_locked", 1)  # lock first, or the BPMP moves it back
            self.tree.write(f"{e}/rate", hz)
            self._verify(domain, [f"{e}/rate"], hz, 1, table)
        log.info("pinned %s to %.1f MHz", domain, hz / 1e6)
        return self.clock(domain)

    def unpin(self, domain: ClockDomain) -> ClockState:
        domain = ClockDomain(domain)
        if domain is ClockDomain.EMC:
            self.tree.write(f"{self.nodes.require_emc()}/mrq_rate_locked", 0)
            return self.clock(domain)
        table = self.clock_table(domain)
        mode = self._mode_or_none()
        cap = None if mode is None else (mode.gpu_max_hz if domain is ClockDomain.GPU else mode.cpu_max_hz)
        lo, hi = table[0], highest_at_most(table, cap)
        governor = self._prev_governor.pop(domain, DEFAULT_GOVERNOR[domain])
        if domain is ClockDomain.GPU:
            g = self.nodes.require_gpu()
            self._set_governor(f"{g}/governor", f"{g}/available_governors", governor)
            self._write_range(f"{g}/min_freq", f"{g}/max_freq", lo, hi)
        else:
            active = self._active_policies()
            for pol in active:
                self._set_policy(pol, governor, lo, hi)
            # A cluster that a mode switch took offline keeps the range it had (a pin's raised
            # minimum) and would come back online with it: hand it back too, where the kernel lets us.
            for pol in self.nodes.require_cpu():
                if pol not in active:
                    self._try_offline_policy(pol, governor, lo, hi)
        log.info("unpinned %s (%.1f-%.1f MHz, %s)", domain, lo / 1e6, hi / 1e6, governor)
        return self.clock(domain)

    # ------------------------------------------------------------------ sensors

    def rails(self) -> tuple[RailReading, ...]:
        return tuple(self._read_rail(r.name, r.voltage, r.current) for r in self.nodes.rails)

    def rail(self, name: str) -> RailReading:
        """One rail by its board label; a clear error names the rails that exist."""
        r = self.nodes.rail(name)
        return self._read_rail(r.name, r.voltage, r.current)

    def _read_rail(self, name: str, volt: str, curr: str) -> RailReading:
        volt_mv, curr_ma = self.tree.read_int(volt), self.tree.read_int(curr)
        return RailReading(name=name, voltage_mv=float(volt_mv), current_ma=float(curr_ma))

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

    def gpu_load(self) -> float:
        per_mille = self.tree.read_int(f"{self.nodes.require_gpu_device()}/load")
        return min(1.0, max(0.0, per_mille / 1000.0))

    # ------------------------------------------------------------------ modes

    def power_modes(self) -> tuple[PowerMode, ...]:
        conf = self.nodes.nvpmodel_conf
        if conf is None:
            raise NodeNotFoundError(
                f"no nvpmodel conf at {self.tree.path('etc/nvpmodel.conf')}",
                "check the L4T install (`ls -l /etc/nvpmodel.conf` should link to etc/nvpmodel/*.conf)",
            )
        modes, _default = nvpmodel.parse_conf(self.tree.read_str(conf))
        return modes

    def power_mode(self) -> PowerMode:
        if nvpmodel.is_executable(self.nvpmodel_cmd):
            mode_id, name = nvpmodel.query(self.nvpmodel_cmd)
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
                f"cannot tell the power mode: {self.nvpmodel_cmd} is not an executable and "
                f"{self.tree.path('var/lib/nvpmodel/status')} is missing",
                "install nvpmodel (JetPack) or pass its path with --nvpmodel",
            )
        text = self.tree.read_str(status)
        m = re.search(r"pmode:(\d+)", text)
        if not m:
            raise DeviceError(f"{self.tree.path(status)} holds {text!r}", "run `sudo nvpmodel -q` to repair it")
        return int(m.group(1)), f"MODE_{int(m.group(1))}"

    def _mode_or_none(self) -> PowerMode | None:
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
        nvpmodel.switch(self.nvpmodel_cmd, mode_id)
        log.info("switched nvpmodel to %d", mode_id)

    def jetson_clocks(self, store: Path | None = None) -> None:
        jc.run(self.jetson_clocks_cmd, store=store)

    def jetson_clocks_restore(self, store: Path) -> None:
        jc.restore(self.jetson_clocks_cmd, store)

    # ------------------------------------------------------------------ snapshot

    def read_settings(self) -> DeviceSettings:
        """Every setting we may change; the CPU once per cpufreq policy, since a mode switch
        hot-plugs whole clusters and each must get its own range back."""
        domains: list[DomainSettings] = []
        for domain in ClockDomain:
            if domain is ClockDomain.CPU:
                domains += self._cpu_settings()
                continue
            try:
                s = self.clock(domain)
            except NodeNotFoundError as exc:
                log.warning("%s not in the snapshot: %s", domain, exc.what)
                continue
            domains.append(
                DomainSettings(
                    domain=domain,
                    min_hz=s.min_hz,
                    max_hz=s.max_hz,
                    governor=s.governor,
                    locked=s.locked,
                    rate_hz=s.cur_hz if (domain is ClockDomain.EMC and s.locked) else None,
                )
            )
        mode = self._mode_or_none()
        return DeviceSettings(
            nvpmodel_id=None if mode is None else mode.id,
            domains=tuple(domains),
            online_cpus=self._online_cpus(),
        )

    def _cpu_settings(self) -> list[DomainSettings]:
        try:
            policies = self.nodes.require_cpu()
        except NodeNotFoundError as exc:
            log.warning("cpu not in the snapshot: %s", exc.what)
            return []
        active = self._active_policies()
        out = []
        for pol in policies:
            p = pol.path
            try:
                out.append(
                    DomainSettings(
                        domain=ClockDomain.CPU,
                        min_hz=self.tree.read_int(f"{p}/scaling_min_freq") * 1000,
                        max_hz=self.tree.read_int(f"{p}/scaling_max_freq") * 1000,
                        governor=self.tree.read_str(f"{p}/scaling_governor"),
                        policy=pol.cpu,
                    )
                )
            except DeviceError as exc:
                if pol in active:
                    raise
                # The kernel answers EBUSY for a fully offline cluster: restored from another policy.
                log.debug("offline CPU policy %d not in the snapshot: %s", pol.cpu, exc.what)
        return out

    def apply_settings(self, settings: DeviceSettings) -> None:
        """Restore a snapshot, best effort per setting, then raise one DeviceError listing
        what failed (so one refused write does not leave every other pin in place).

        Order: CPU policies that a mode switch or hot-plug may take offline get their range
        back first, while they still take writes; then the mode (it rewrites caps and
        hot-plugs CPUs), the online CPUs, and each domain with min <= max at every step."""
        failed: list[str] = []
        cpu_failed: dict[int, str] = {}
        switch = False
        if settings.nvpmodel_id is not None:
            mode = self._mode_or_none()
            switch = mode is None or mode.id != settings.nvpmodel_id
        hotplug = bool(settings.online_cpus) and set(settings.online_cpus) != set(self._online_cpus())
        if switch or hotplug:
            self._restore_cpu(settings, self._policies_or_none(active=True), cpu_failed)
        if switch:
            mode_id = settings.nvpmodel_id
            assert mode_id is not None
            _attempt(failed, f"nvpmodel mode {mode_id}", lambda: self.set_power_mode(mode_id))
        if settings.online_cpus:
            _attempt(failed, "online CPUs", lambda: self._set_online(settings.online_cpus))
        for d in settings.domains:
            if d.domain is not ClockDomain.CPU:
                _attempt(failed, d.domain.value.upper(), lambda d=d: self._apply_domain(d))
        active = self._policies_or_none(active=True)
        self._restore_cpu(settings, active, cpu_failed)
        # Offline clusters the snapshot knows and the first pass did not reach: the twin takes
        # the write, a board answers EBUSY (nothing more we can do there, so not a failure).
        for pol in self._policies_or_none(active=False):
            d = _policy_entry(settings, pol.cpu, fallback=False)
            if pol not in active and d is not None and pol.cpu not in cpu_failed:
                self._try_offline_policy(pol, d.governor, d.min_hz, d.max_hz)
        failed += [cpu_failed[k] for k in sorted(cpu_failed)]
        self._prev_governor.clear()
        if failed:
            raise DeviceError(
                f"{len(failed)} setting(s) could not be restored: " + "; ".join(failed),
                "the rest was restored; fix the cause above and run `slm-dvfs restore` again "
                "(`sudo nvpmodel -m <id>` resets a mode's clocks, a reboot resets everything)",
            )
        log.info("applied settings %s", settings.to_json())

    def _apply_domain(self, d: DomainSettings) -> None:
        if d.domain is ClockDomain.GPU:
            g = self.nodes.require_gpu()
            if d.governor:
                self._set_governor(f"{g}/governor", f"{g}/available_governors", d.governor)
            self._write_range(f"{g}/min_freq", f"{g}/max_freq", d.min_hz, d.max_hz)
        else:
            e = self.nodes.require_emc()
            if d.locked:
                self.tree.write(f"{e}/mrq_rate_locked", 1)
                self.tree.write(f"{e}/rate", d.rate_hz if d.rate_hz is not None else d.max_hz)
            else:
                self.tree.write(f"{e}/mrq_rate_locked", 0)

    def _restore_cpu(self, settings: DeviceSettings, policies: tuple[CpuPolicy, ...], errors: dict[int, str]) -> None:
        """Each policy's own snapshot entry (older journals: one entry for all); a later
        success clears an earlier failure of the same policy."""
        for pol in policies:
            d = _policy_entry(settings, pol.cpu, fallback=True)
            if d is None:
                continue
            try:
                self._set_policy(pol, d.governor, d.min_hz, d.max_hz)
            except DeviceError as exc:
                errors[pol.cpu] = f"CPU policy {pol.cpu}: {exc.what}"
                log.warning("restoring CPU policy %d failed: %s", pol.cpu, exc.what)
            else:
                errors.pop(pol.cpu, None)

    def _set_policy(self, pol: CpuPolicy, governor: str | None, lo_hz: int, hi_hz: int) -> None:
        p = pol.path
        if governor:
            self._set_governor(f"{p}/scaling_governor", f"{p}/scaling_available_governors", governor)
        self._write_range(f"{p}/scaling_min_freq", f"{p}/scaling_max_freq", lo_hz // 1000, hi_hz // 1000)

    def _try_offline_policy(self, pol: CpuPolicy, governor: str | None, lo_hz: int, hi_hz: int) -> None:
        try:
            self._set_policy(pol, governor, lo_hz, hi_hz)
        except DeviceError as exc:
            log.debug("offline CPU policy %d left as it is: %s", pol.cpu, exc.what)

    def _policies_or_none(self, *, active: bool) -> tuple[CpuPolicy, ...]:
        try:
            return self._active_policies() if active else self.nodes.require_cpu()
        except DeviceError:
            return ()

    # ------------------------------------------------------------------ reopen

    def describe(self) -> dict[str, Any]:
        return {
            "kind": "jetson",
            "root": str(self.root),
            "nvpmodel_cmd": self.nvpmodel_cmd,
            "jetson_clocks_cmd": self.jetson_clocks_cmd,
        }

    @classmethod
    def from_description(cls, d: Mapping[str, Any]) -> "JetsonDevice":
        if d.get("kind") != "jetson":
            raise DeviceError(
                f"cannot reopen a {d.get('kind')!r} device as a Jetson",
                "open it with the backend that described it",
            )
        return cls(d.get("root", "/"), nvpmodel_cmd=d.get("nvpmodel_cmd"), jetson_clocks_cmd=d.get("jetson_clocks_cmd"))

    # ------------------------------------------------------------------ helpers

    def _governors(self, rel: str) -> tuple[str, ...]:
        try:
            return tuple(self.tree.read_str(rel).split())
        except DeviceError:
            return ()

    def _set_governor(self, gov_file: str, avail_file: str, governor: str) -> None:
        available = self._governors(avail_file)
        current = self.tree.read_str(gov_file)
        if governor == current:
            return
        if available and governor not in available:
            log.warning("governor %s not offered by %s (%s); keeping %s", governor, avail_file, available, current)
            return
        self.tree.write(gov_file, governor)

    def _write_range(self, min_file: str, max_file: str, lo: int, hi: int) -> None:
        """Set [lo, hi] so that min never exceeds max on the way: raise max first when the
        new max is at or above the current min, otherwise lower min first."""
        cur_min = self.tree.read_int(min_file)
        if hi >= cur_min:
            self.tree.write(max_file, hi)
            self.tree.write(min_file, lo)
        else:
            self.tree.write(min_file, lo)
            self.tree.write(max_file, hi)

    def _verify(self, domain: ClockDomain, files: list[str], hz: int, unit: int, table: tuple[int, ...]) -> None:
        """Poll the current-frequency files until they show `hz` or settle_s has passed."""
        deadline = time.monotonic() + self.settle_s
        while True:
            readings = [self.tree.read_int(f) * unit for f in files]
            if all(_matches(domain, r, hz, table) for r in readings):
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                bad = ", ".join(f"{self.tree.path(f)} = {r / 1e6:g} MHz" for f, r in zip(files, readings) if r != hz)
                raise ClockNotAppliedError(
                    f"{domain.value.upper()} clock set to {hz / 1e6:g} MHz but after {self.settle_s:g} s {bad}",
                    "another tool (jetson_clocks, nvpmodel, jtop) or a thermal cap may be holding the clock; "
                    "check `slm-dvfs device`, then retry (a longer settle time may help)",
                )
            time.sleep(min(_POLL_S, remaining))

    def _active_policies(self) -> tuple[CpuPolicy, ...]:
        """Policies with at least one online CPU (a fully offline cluster cannot be clocked)."""
        policies = self.nodes.require_cpu()
        online = set(self._online_cpus())
        active = tuple(p for p in policies if not online or online.intersection(p.cpus))
        if not active:
            raise DeviceError("every CPU policy is offline", "bring CPUs online (`nvpmodel -m 0`)")
        return active

    def _online_cpus(self) -> tuple[int, ...]:
        out = []
        for cpu, f in self.nodes.cpu_online:
            if f is None:
                out.append(cpu)  # no hotplug file: always online
                continue
            try:
                if self.tree.read_int(f) == 1:
                    out.append(cpu)
            except DeviceError:
                out.append(cpu)
        return tuple(out)

    def _set_online(self, wanted: tuple[int, ...]) -> None:
        files = dict(self.nodes.cpu_online)
        current = set(self._online_cpus())
        target = set(wanted)
        for cpu in sorted(target - current):  # bring up first, so we never drop to none
            if files.get(cpu):
                self.tree.write(files[cpu], 1)
        for cpu in sorted(current - target, reverse=True):
            if files.get(cpu):
                self.tree.write(files[cpu], 0)


def _attempt(failed: list[str], what: str, action: Any) -> None:
    """Run one restore step; a DeviceError is noted (and logged) instead of stopping the rest."""
    try:
        action()
    except DeviceError as exc:
        log.warning("restoring %s failed: %s", what, exc.what)
        failed.append(f"{what}: {exc.what}")


def _policy_entry(settings: DeviceSettings, cpu: int, *, fallback: bool) -> DomainSettings | None:
    """The snapshot's entry for one CPU policy; with fallback, an entry for every policy
    (older journals), else the first policy's (a cluster offline at snapshot time)."""
    entries = [d for d in settings.domains if d.domain is ClockDomain.CPU]
    own = next((d for d in entries if d.policy == cpu), None)
    if own is not None or not fallback:
        return own
    return next((d for d in entries if d.policy is None), entries[0] if entries else None)


def _matches(domain: ClockDomain, read_hz: int, hz: int, table: tuple[int, ...]) -> bool:
    if read_hz == hz:
        return True
    if domain is ClockDomain.CPU:
        # tegra194-cpufreq derives scaling_cur_freq from counters: accept the nearest entry.
        return min(table, key=lambda f: abs(f - read_hz)) == hz
    return False
