"""Snapshot and restore of every setting the Jetson backend may change (what the guard journals).

The CPU is read once per cpufreq policy, since a mode switch hot-plugs whole clusters and
each must get its own range back. Restoring is best effort per setting, in the order a
board accepts: see `restore_steps`. `cpu_clusters` says what each cluster is (clocked,
offline, or without a cpufreq folder), for `slm-dvfs device`.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from typing import Callable, Protocol

from engine.core.errors import DeviceError, NodeNotFoundError
from engine.device.jetson import writes as w
from engine.device.base import ClockDomain, ClockState, DeviceSettings, DomainSettings, PowerMode
from engine.device.jetson.discovery import CpuPolicy, JetsonNodes
from engine.device.sysfs import SysfsTree

log = logging.getLogger(__name__)


class JetsonBoard(Protocol):
    """What the snapshot needs of a JetsonDevice."""

    tree: SysfsTree

    @property
    def nodes(self) -> JetsonNodes: ...

    def clock(self, domain: ClockDomain) -> ClockState: ...

    def mode_or_none(self) -> PowerMode | None: ...

    def set_power_mode(self, mode_id: int) -> None: ...


def read_settings(dev: JetsonBoard) -> DeviceSettings:
    """Every setting we may change: the mode, each domain's range and governor, the EMC
    lock, each CPU policy, and the online CPUs."""
    domains: list[DomainSettings] = []
    for domain in ClockDomain:
        if domain is ClockDomain.CPU:
            domains += _cpu_settings(dev)
            continue
        try:
            s = dev.clock(domain)
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
    mode = dev.mode_or_none()
    return DeviceSettings(
        nvpmodel_id=None if mode is None else mode.id,
        domains=tuple(domains),
        online_cpus=w.online_cpus(dev.tree, dev.nodes),
    )


def _cpu_settings(dev: JetsonBoard) -> list[DomainSettings]:
    try:
        policies = dev.nodes.require_cpu()
    except NodeNotFoundError as exc:
        log.warning("cpu not in the snapshot: %s", exc.what)
        return []
    active = w.active_policies(dev.tree, dev.nodes)
    out = []
    for pol in policies:
        p = pol.path
        try:
            out.append(
                DomainSettings(
                    domain=ClockDomain.CPU,
                    min_hz=dev.tree.read_int(f"{p}/scaling_min_freq") * 1000,
                    max_hz=dev.tree.read_int(f"{p}/scaling_max_freq") * 1000,
                    governor=dev.tree.read_str(f"{p}/scaling_governor"),
                    policy=pol.cpu,
                )
            )
        except DeviceError as exc:
            if pol in active:
                raise
            # The kernel answers EBUSY for a fully offline cluster: restored from another policy.
            log.debug("offline CPU policy %d not in the snapshot: %s", pol.cpu, exc.what)
    return out


@dataclass(frozen=True)
class CpuCluster:
    """CPUs that share a clock: a cpufreq policy, or CPUs no policy covers (their cpufreq folder is
    missing: offline with their policy gone, or the driver lacks them). Only a cluster whose clock
    was read can be called pinned."""

    cpus: tuple[int, ...]
    policy: int | None  # the policy's CPU; None: no cpufreq folder covers these CPUs
    online: bool  # at least one of its CPUs is online
    min_hz: int | None = None  # None: not read (no policy, or the kernel refused the read)
    cur_hz: int | None = None
    max_hz: int | None = None
    governor: str | None = None
    why: str = ""  # why the clock is unknown

    @property
    def known(self) -> bool:
        return self.online and self.min_hz is not None and self.max_hz is not None

    @property
    def pinned(self) -> bool:
        return self.known and self.min_hz == self.max_hz

    @property
    def label(self) -> str:
        """`cpu0-3`, `cpu4`, `cpu0-3,5-7`."""
        runs: list[list[int]] = []
        for cpu in self.cpus:
            if runs and cpu == runs[-1][-1] + 1:
                runs[-1].append(cpu)
            else:
                runs.append([cpu])
        return "cpu" + ",".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)


def cpu_clusters(dev: JetsonBoard) -> tuple[CpuCluster, ...]:
    """Every CPU cluster of the board, in CPU order: each policy with its clocks where it is online,
    and runs of CPUs that no cpufreq policy covers, as unknown (never as pinned)."""
    nodes = dev.nodes
    online = set(w.online_cpus(dev.tree, nodes))
    present = sorted({cpu for cpu, _f in nodes.cpu_online} | {c for p in nodes.cpu_policies for c in p.cpus})
    out: list[CpuCluster] = []
    for pol in nodes.cpu_policies:
        is_online = not online or bool(online.intersection(pol.cpus))
        if not is_online:
            out.append(CpuCluster(pol.cpus, pol.cpu, False, why="offline"))
            continue
        try:
            t, p = dev.tree, pol.path
            out.append(CpuCluster(pol.cpus, pol.cpu, True, min_hz=t.read_int(f"{p}/scaling_min_freq") * 1000,
                                  cur_hz=t.read_int(f"{p}/scaling_cur_freq") * 1000,
                                  max_hz=t.read_int(f"{p}/scaling_max_freq") * 1000,
                                  governor=t.read_str(f"{p}/scaling_governor")))
        except DeviceError as exc:
            out.append(CpuCluster(pol.cpus, pol.cpu, True, why=f"its cpufreq files cannot be read: {exc.what}"))
    covered = {c for p in nodes.cpu_policies for c in p.cpus}
    run: list[int] = []
    for cpu in [c for c in present if c not in covered] + [-2]:  # -2: closes the last run
        if run and cpu != run[-1] + 1:
            is_online = bool(online.intersection(run))
            out.append(CpuCluster(tuple(run), None, is_online,
                                  why=f"no cpufreq policy covers {'it' if len(run) == 1 else 'them'}"
                                  + ("" if is_online else " (offline)")))
            run = []
        if cpu >= 0:
            run.append(cpu)
    return tuple(sorted(out, key=lambda c: c.cpus[0]))


def restore_steps(dev: JetsonBoard, settings: DeviceSettings) -> list[str]:
    """Restore a snapshot, best effort per setting; returns what failed (one line each),
    so one refused write does not leave every other pin in place.

    Order: CPU policies that a mode switch or hot-plug may take offline get their range
    back first, while they still take writes; then the mode (it rewrites caps and
    hot-plugs CPUs), the online CPUs, and each domain with min <= max at every step."""
    tree = dev.tree
    failed: list[str] = []
    cpu_failed: dict[int, str] = {}
    switch = False
    if settings.nvpmodel_id is not None:
        mode = dev.mode_or_none()
        switch = mode is None or mode.id != settings.nvpmodel_id
    hotplug = bool(settings.online_cpus) and set(settings.online_cpus) != set(w.online_cpus(tree, dev.nodes))
    if switch or hotplug:
        _restore_cpu(tree, settings, _policies_or_none(dev, active=True), cpu_failed)
    if switch:
        mode_id = settings.nvpmodel_id
        assert mode_id is not None
        _attempt(failed, f"nvpmodel mode {mode_id}", lambda: dev.set_power_mode(mode_id))
    if settings.online_cpus:
        _attempt(failed, "online CPUs", lambda: w.set_online(tree, dev.nodes, settings.online_cpus))
    for d in settings.domains:
        if d.domain is not ClockDomain.CPU:
            _attempt(failed, d.domain.value.upper(), functools.partial(_apply_domain, dev, d))
    active = _policies_or_none(dev, active=True)
    _restore_cpu(tree, settings, active, cpu_failed)
    # Offline clusters the snapshot knows and the first pass did not reach: the twin takes
    # the write, a board answers EBUSY (nothing more we can do there, so not a failure).
    for pol in _policies_or_none(dev, active=False):
        entry = _policy_entry(settings, pol.cpu, fallback=False)
        if pol not in active and entry is not None and pol.cpu not in cpu_failed:
            w.try_offline_policy(tree, pol, entry.governor, entry.min_hz, entry.max_hz)
    return failed + [cpu_failed[k] for k in sorted(cpu_failed)]


def _apply_domain(dev: JetsonBoard, d: DomainSettings) -> None:
    tree = dev.tree
    if d.domain is ClockDomain.GPU:
        g = dev.nodes.require_gpu()
        if d.governor:
            w.set_governor(tree, f"{g}/governor", f"{g}/available_governors", d.governor)
        w.write_range(tree, f"{g}/min_freq", f"{g}/max_freq", d.min_hz, d.max_hz)
    else:
        e = dev.nodes.require_emc()
        locked = tree.read_int(f"{e}/mrq_rate_locked") != 0
        if d.locked:
            rate = d.rate_hz if d.rate_hz is not None else d.max_hz
            if locked and tree.read_int(f"{e}/rate") == rate:
                return  # already so: no write (a read-only file must not fail a restore with nothing to do)
            tree.write(f"{e}/mrq_rate_locked", 1)
            tree.write(f"{e}/rate", rate)
        elif locked:
            tree.write(f"{e}/mrq_rate_locked", 0)


def _restore_cpu(
    tree: SysfsTree, settings: DeviceSettings, policies: tuple[CpuPolicy, ...], errors: dict[int, str]
) -> None:
    """Each policy's own snapshot entry (older journals: one entry for all); a later
    success clears an earlier failure of the same policy."""
    for pol in policies:
        d = _policy_entry(settings, pol.cpu, fallback=True)
        if d is None:
            continue
        try:
            w.set_policy(tree, pol, d.governor, d.min_hz, d.max_hz)
        except DeviceError as exc:
            errors[pol.cpu] = f"CPU policy {pol.cpu}: {exc.what}"
            log.warning("restoring CPU policy %d failed: %s", pol.cpu, exc.what)
        else:
            errors.pop(pol.cpu, None)


def _policies_or_none(dev: JetsonBoard, *, active: bool) -> tuple[CpuPolicy, ...]:
    try:
        return w.active_policies(dev.tree, dev.nodes) if active else dev.nodes.require_cpu()
    except DeviceError:
        return ()


def _attempt(failed: list[str], what: str, action: Callable[[], object]) -> None:
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
