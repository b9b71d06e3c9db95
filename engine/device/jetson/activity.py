"""Read a Jetson's activity from its files, as jetson-stats (jtop) reads them:

- per-core CPU load from /proc/stat, the busy share of each core's jiffies since the previous
  reading (jtop/core/cpu.py), and each core's clock from its cpufreq policy;
- the EMC load from actmon's `mc_all` and the EMC rate (jtop/core/memory.py, `read_emc`);
- the fan from hwmon: a node with a `pwmN` file, its rpm from `rpm`/`rpm_measured`/`fan1_input`
  in the same node or in the one tachometer-only node (jtop/core/fan.py pairs them so: on Orin
  the pwm is /sys/devices/platform/pwm-fan/hwmon/hwmon*/pwm1 and the rpm the tachometer's);
- MemTotal and MemAvailable from /proc/meminfo;
- thermal zones at or past a passive, hot or critical trip point (the kernel's thermal sysfs:
  `trip_point_N_type`, `trip_point_N_temp`).

jetson-stats: https://github.com/rbonghi/jetson_stats (read for the paths, not copied).
"""

from __future__ import annotations

import logging
import re
import threading
from dataclasses import dataclass
from typing import Callable

from engine.core.errors import DeviceError
from engine.device.activity import CoreLoad, DeviceActivity, FanReading, MemoryReading, TripCrossed, emc_load
from engine.device.meminfo import MEMINFO, parse_meminfo
from engine.device.activity import THROTTLE_TRIPS
from engine.device.base import TemperatureReading
from engine.device.jetson.discovery import JetsonNodes
from engine.device.sysfs import SysfsTree

log = logging.getLogger(__name__)

PROC_STAT = "proc/stat"
CPU_ONLINE = "sys/devices/system/cpu/online"
# Where L4T releases put actmon's memory-controller activity, in jtop's order of preference.
MC_ALL = (
    "sys/kernel/debug/cactmon/mc_all",
    "sys/kernel/debug/bpmp/debug/actmon/mc_all_avg_activity",
    "sys/kernel/actmon_avg_activity/mc_all",
)
HWMON = "sys/class/hwmon/hwmon*"
_PWM = re.compile(r"^pwm\d+$")
_RPM = ("rpm", "rpm_measured", "fan1_input")
PWM_MAX = 255  # hwmon's pwm range (Documentation/hwmon/sysfs-interface.rst)


@dataclass(frozen=True)
class FanNodes:
    name: str
    pwm: str | None  # root-relative file
    rpm: str | None


@dataclass(frozen=True)
class Trip:
    kind: str
    celsius: float


class ActivityReader:
    """Reads a board's activity; keeps the previous /proc/stat counters (a load is a share of the
    time between two readings) and what it found of fans and trip points (they do not move)."""

    def __init__(self, tree: SysfsTree, nodes: Callable[[], JetsonNodes]) -> None:
        self.tree = tree
        self._nodes = nodes
        self._lock = threading.Lock()
        self._last: dict[int, tuple[int, int, float | None]] = {}  # cpu -> (busy, total) jiffies, its share
        self._fan: FanNodes | None | bool = False  # False: not looked for yet
        self._trips: dict[str, tuple[Trip, ...]] | None = None

    def reset(self) -> None:
        """Look for fans and trip points again (after a driver reload or a re-rendered tree)."""
        with self._lock:
            self._fan, self._trips = False, None

    def read(self, emc_hz: int | None = None, temperatures: tuple[TemperatureReading, ...] = ()) -> DeviceActivity:
        errors: list[tuple[str, str]] = []

        def attempt(part: str, fn: Callable[[], object]) -> object:
            try:
                return fn()
            except DeviceError as exc:
                errors.append((part, exc.what))
                return None

        with self._lock:
            cores = attempt("cpu load", self._cores)
            mc_all = attempt("emc load", self._mc_all) if emc_hz else None
            fan = attempt("fan", self._fan_reading)
            memory = attempt("memory", self._memory)
            trips = attempt("trip points", lambda: self._crossed(temperatures)) if temperatures else ()
        return DeviceActivity(
            cores=cores if isinstance(cores, tuple) else (),
            emc_load=emc_load(mc_all, emc_hz) if isinstance(mc_all, int) and emc_hz else None,
            fan=fan if isinstance(fan, FanReading) else None,
            memory=memory if isinstance(memory, MemoryReading) else None,
            trips=trips if isinstance(trips, tuple) else (),
            errors=tuple(errors),
        )

    # ------------------------------------------------------------------ CPU

    def _cores(self) -> tuple[CoreLoad, ...]:
        counters = parse_proc_stat(self.tree.read_str(PROC_STAT))
        online = self._online(counters)
        nodes = self._nodes()
        clock: dict[int, int | None] = {}
        for pol in nodes.cpu_policies:
            cur = None
            if any(c in online for c in pol.cpus):
                try:
                    cur = self.tree.read_int(f"{pol.path}/scaling_cur_freq") * 1000  # kHz
                except DeviceError:
                    cur = None
            for c in pol.cpus:
                clock[c] = cur
        cpus = sorted({c for c, _f in nodes.cpu_online} | set(counters) | set(clock))
        out = []
        last, self._last = self._last, {}
        for cpu in cpus:
            is_on = cpu in online
            load = None
            if is_on and cpu in counters:
                busy, total = counters[cpu]
                before = last.get(cpu)
                if before is not None:
                    # no time passed since the last reading (a tree not rewritten yet): its share stands
                    load = before[2] if total <= before[1] else min(1.0, max(0.0, (busy - before[0]) / (total - before[1])))
                self._last[cpu] = (busy, total, load)
            out.append(CoreLoad(cpu=cpu, online=is_on, load=load, cur_hz=clock.get(cpu) if is_on else None))
        return tuple(out)

    def _online(self, counters: dict[int, tuple[int, int]]) -> set[int]:
        """The online CPUs from the kernel's summary ("0-7,9"); /proc/stat lists the online ones
        too, which serves where the summary is missing."""
        try:
            return parse_cpu_list(self.tree.read_str(CPU_ONLINE))
        except DeviceError:
            return set(counters)

    # ------------------------------------------------------------------ EMC

    def _mc_all(self) -> int:
        for rel in MC_ALL:
            try:
                return self.tree.read_int(rel)
            except DeviceError:
                continue
        raise DeviceError("no actmon mc_all file (" + ", ".join(MC_ALL) + ")",
                          "the EMC load needs L4T's actmon driver; the EMC clock is shown without it")

    # ------------------------------------------------------------------ fan

    def _fan_reading(self) -> FanReading | None:
        if self._fan is False:
            self._fan = self._find_fan()
        fan = self._fan
        if not isinstance(fan, FanNodes):
            return None  # no fan on this board
        pwm = self.tree.read_int(fan.pwm) if fan.pwm else None
        rpm = self.tree.read_int(fan.rpm) if fan.rpm else None
        return FanReading(fan.name, None if pwm is None else round(100.0 * pwm / PWM_MAX, 1), rpm)

    def _find_fan(self) -> FanNodes | None:
        pwm_nodes: list[tuple[str, str, str | None]] = []  # (name, pwm file, rpm file in the same node)
        rpm_only: list[str] = []
        for node in sorted(self.tree.glob(HWMON)):
            try:
                files = sorted(f.rsplit("/", 1)[-1] for f in self.tree.glob(f"{node}/*"))
            except OSError:
                continue
            pwm = next((f for f in files if _PWM.match(f)), None)
            rpm = next((f for f in files if f in _RPM), None)
            name = _read_opt(self.tree, f"{node}/name") or node.rsplit("/", 1)[-1]
            if pwm:
                pwm_nodes.append((name, f"{node}/{pwm}", f"{node}/{rpm}" if rpm else None))
            elif rpm:
                rpm_only.append(f"{node}/{rpm}")
        if not pwm_nodes:
            return None
        name, pwm_file, rpm_file = pwm_nodes[0]
        if rpm_file is None and len(pwm_nodes) == 1 and len(rpm_only) == 1:
            rpm_file = rpm_only[0]  # the tachometer is a node of its own (Orin's 39c0000.tachometer)
        return FanNodes(name, pwm_file, rpm_file)

    # ------------------------------------------------------------------ memory

    def _memory(self) -> MemoryReading:
        info = parse_meminfo(self.tree.read_str(MEMINFO))
        if info is None:
            raise DeviceError(f"{MEMINFO} has no MemTotal line", "check that /proc is mounted")
        return info

    # ------------------------------------------------------------------ trip points

    def _crossed(self, temperatures: tuple[TemperatureReading, ...]) -> tuple[TripCrossed, ...]:
        if self._trips is None:
            self._trips = {kind: self._zone_trips(zone) for kind, zone in self._nodes().thermal_zones}
        out = []
        for t in temperatures:
            hit = [trip for trip in self._trips.get(t.zone, ()) if trip.kind in THROTTLE_TRIPS and t.celsius >= trip.celsius]
            if hit:
                worst = max(hit, key=lambda trip: trip.celsius)
                out.append(TripCrossed(t.zone, worst.kind, worst.celsius, t.celsius))
        return tuple(out)

    def _zone_trips(self, zone: str) -> tuple[Trip, ...]:
        trips = []
        for type_file in self.tree.glob(f"{zone}/trip_point_*_type"):
            kind = _read_opt(self.tree, type_file)
            temp = _read_opt(self.tree, type_file.removesuffix("_type") + "_temp")
            try:
                trips.append(Trip(kind or "", int(temp or "") / 1000.0))
            except ValueError:
                continue
        return tuple(trips)


def _read_opt(tree: SysfsTree, rel: str) -> str | None:
    try:
        return tree.read_str(rel).replace("\0", "").strip()
    except DeviceError:
        return None


def parse_proc_stat(text: str) -> dict[int, tuple[int, int]]:
    """(busy, total) jiffies per `cpuN` line of /proc/stat; idle and iowait are not busy
    (proc(5): user nice system idle iowait irq softirq steal ...; guest time is inside user)."""
    out: dict[int, tuple[int, int]] = {}
    for line in text.splitlines():
        m = re.match(r"cpu(\d+)\s+(.*)", line)
        if not m:
            continue
        try:
            fields = [int(v) for v in m.group(2).split()[:8]]
        except ValueError:
            continue
        if len(fields) < 4:
            continue
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
        total = sum(fields)
        out[int(m.group(1))] = (total - idle, total)
    return out


def parse_cpu_list(text: str) -> set[int]:
    """The kernel's CPU list format ("0-3,8-11")."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        try:
            cpus.update(range(int(lo), int(hi or lo) + 1))
        except ValueError:
            raise DeviceError(f"{CPU_ONLINE} holds {text.strip()!r}", "it should list CPUs as 0-3,8") from None
    return cpus


