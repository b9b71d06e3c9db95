"""The Jetson backend's clock writes, each in an order the kernel accepts.

A [min, max] range never passes through min > max, a governor is only written where the
node offers it, CPU hot-plug never takes the last CPU away, and a pin is checked until the
clock shows it. Functions over a `SysfsTree` and the discovered `JetsonNodes`, so the
device class keeps only the what, not the how.
"""

from __future__ import annotations

import logging
import time

from engine.core.errors import ClockNotAppliedError, DeviceError
from engine.device.base import ClockDomain
from engine.device.jetson.discovery import CpuPolicy, JetsonNodes
from engine.device.sysfs import SysfsTree

log = logging.getLogger(__name__)

_POLL_S = 0.01


def read_governors(tree: SysfsTree, rel: str) -> tuple[str, ...]:
    """The governors an `available_governors` file offers; () when it cannot be read."""
    try:
        return tuple(tree.read_str(rel).split())
    except DeviceError:
        return ()


def set_governor(tree: SysfsTree, gov_file: str, avail_file: str, governor: str) -> None:
    available = read_governors(tree, avail_file)
    current = tree.read_str(gov_file)
    if governor == current:
        return
    if available and governor not in available:
        log.warning("governor %s not offered by %s (%s); keeping %s", governor, avail_file, available, current)
        return
    tree.write(gov_file, governor)


def write_range(tree: SysfsTree, min_file: str, max_file: str, lo: int, hi: int) -> None:
    """Set [lo, hi] so that min never exceeds max on the way: raise max first when the
    new max is at or above the current min, otherwise lower min first. A range already in
    place is not written (a restore that has nothing to change must not fail on a read-only file)."""
    cur_min = tree.read_int(min_file)
    if cur_min == lo and tree.read_int(max_file) == hi:
        return
    if hi >= cur_min:
        tree.write(max_file, hi)
        tree.write(min_file, lo)
    else:
        tree.write(min_file, lo)
        tree.write(max_file, hi)


def set_policy(tree: SysfsTree, pol: CpuPolicy, governor: str | None, lo_hz: int, hi_hz: int) -> None:
    """One cpufreq policy's governor and range (the files are in kHz)."""
    p = pol.path
    if governor:
        set_governor(tree, f"{p}/scaling_governor", f"{p}/scaling_available_governors", governor)
    write_range(tree, f"{p}/scaling_min_freq", f"{p}/scaling_max_freq", lo_hz // 1000, hi_hz // 1000)


def try_offline_policy(tree: SysfsTree, pol: CpuPolicy, governor: str | None, lo_hz: int, hi_hz: int) -> None:
    """`set_policy` on a cluster that may be offline: a board answers EBUSY there, which is fine."""
    try:
        set_policy(tree, pol, governor, lo_hz, hi_hz)
    except DeviceError as exc:
        log.debug("offline CPU policy %d left as it is: %s", pol.cpu, exc.what)


def verify_clock(
    tree: SysfsTree, domain: ClockDomain, files: list[str], hz: int, unit: int, table: tuple[int, ...],
    settle_s: float,
) -> None:
    """Poll the current-frequency files until they show `hz` or settle_s has passed."""
    deadline = time.monotonic() + settle_s
    while True:
        readings = [tree.read_int(f) * unit for f in files]
        if all(_matches(domain, r, hz, table) for r in readings):
            return
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            bad = ", ".join(f"{tree.path(f)} = {r / 1e6:g} MHz" for f, r in zip(files, readings) if r != hz)
            raise ClockNotAppliedError(
                f"{domain.value.upper()} clock set to {hz / 1e6:g} MHz but after {settle_s:g} s {bad}",
                "another tool (jetson_clocks, nvpmodel, jtop) or a thermal cap may be holding the clock; "
                "check `slm-dvfs device`, then retry (a longer settle time may help)",
            )
        time.sleep(min(_POLL_S, remaining))


def _matches(domain: ClockDomain, read_hz: int, hz: int, table: tuple[int, ...]) -> bool:
    if read_hz == hz:
        return True
    if domain is ClockDomain.CPU:
        # tegra194-cpufreq derives scaling_cur_freq from counters: accept the nearest entry.
        return min(table, key=lambda f: abs(f - read_hz)) == hz
    return False


# --- CPU hot-plug ----------------------------------------------------------------------------
def online_cpus(tree: SysfsTree, nodes: JetsonNodes) -> tuple[int, ...]:
    out = []
    for cpu, f in nodes.cpu_online:
        if f is None:
            out.append(cpu)  # no hotplug file: always online
            continue
        try:
            if tree.read_int(f) == 1:
                out.append(cpu)
        except DeviceError:
            out.append(cpu)
    return tuple(out)


def active_policies(tree: SysfsTree, nodes: JetsonNodes) -> tuple[CpuPolicy, ...]:
    """Policies with at least one online CPU (a fully offline cluster cannot be clocked)."""
    policies = nodes.require_cpu()
    online = set(online_cpus(tree, nodes))
    active = tuple(p for p in policies if not online or online.intersection(p.cpus))
    if not active:
        raise DeviceError("every CPU policy is offline",
                          "bring CPUs online (`sudo nvpmodel -m <id>`, a mode with CPUs online: `slm-dvfs device` "
                          "lists the modes)")
    return active


def set_online(tree: SysfsTree, nodes: JetsonNodes, wanted: tuple[int, ...]) -> None:
    files = dict(nodes.cpu_online)
    current = set(online_cpus(tree, nodes))
    target = set(wanted)
    for cpu in sorted(target - current):  # bring up first, so we never drop to none
        if (path := files.get(cpu)):
            tree.write(path, 1)
    for cpu in sorted(current - target, reverse=True):
        if (path := files.get(cpu)):
            tree.write(path, 0)
