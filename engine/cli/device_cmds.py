"""`slm-dvfs device | pin | restore | monitor`: look at the board, pin clocks, undo, watch power."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import TYPE_CHECKING, Iterable, Sequence, TypedDict

from engine.cli import numbers
from engine.core import paths
from engine.device.base import ClockDomain, Device, PowerMode
from engine.core.text import shown
from engine.core.units import format_mhz
from engine.device.session import DEFAULT_TWIN, DeviceSession, open_device
from engine.device.snapshot import take_snapshot
from engine.core.errors import ConfigError, NodeNotFoundError, SlmDvfsError

if TYPE_CHECKING:
    from engine.device.guard.journal import Journal

NO_CONF = "unknown (no nvpmodel.conf - a container?)"


def add_device_args(parser: argparse.ArgumentParser) -> None:
    """The options every device-facing command shares."""
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--twin",
        metavar="PROFILE",
        nargs="?",
        const=DEFAULT_TWIN,
        help=f"use the digital twin (default profile {DEFAULT_TWIN}) instead of a board",
    )
    where.add_argument(
        "--sysfs-root",
        metavar="DIR",
        help="read and write device files below DIR instead of / (also $SLM_DVFS_SYSFS_ROOT)",
    )


def session_from_args(args: argparse.Namespace, *, realtime: bool = True) -> DeviceSession:
    return open_device(twin=args.twin, sysfs_root=args.sysfs_root, realtime=realtime)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("device", help="identity, clock tables, clocks, rails, temperatures, power mode")
    add_device_args(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_device)

    p = sub.add_parser("pin", help="pin clocks (journalled) and exit; `slm-dvfs restore` undoes it")
    add_device_args(p)
    p.add_argument("--gpu", metavar="MHZ", help="GPU clock in MHz, e.g. 816")
    p.add_argument("--cpu", metavar="MHZ", help="CPU clock in MHz (all clusters), e.g. 1497.6")
    p.add_argument("--emc", metavar="MHZ", help="memory clock in MHz, e.g. 3199")
    p.set_defaults(func=cmd_pin)

    p = sub.add_parser("restore", help="restore clocks changed by `pin` or by a run that did not exit cleanly",
                       description="Restore the clocks that `pin` left, or that a run which did not exit cleanly "
                                   "left changed: every board's, or with --sysfs-root / --twin that board's only.")
    add_device_args(p)
    p.set_defaults(func=cmd_restore)

    p = sub.add_parser("monitor", help="live rail power and energy")
    add_device_args(p)
    p.add_argument("--seconds", type=numbers.seconds, default=10.0, help="how long to watch (default 10)")
    p.add_argument("--rails", default="all", help="rails in the total: all | gpu+cpu | NAME,NAME (default all)")
    p.add_argument("--rate", type=numbers.float_range(0.0, 1000.0, low_open=True), default=20.0, help="samples per second (default 20; a sensor or twin that updates slower caps it, and says so)")
    p.add_argument("--json", action="store_true", help="print the energy window as JSON at the end")
    p.set_defaults(func=cmd_monitor)


# --- device -------------------------------------------------------------------------------
# What `slm-dvfs device` shows, as plain data: `--json` prints it, format_device_report writes it out.
class ClusterReport(TypedDict):
    cpus: list[int]
    label: str
    policy: int | None
    state: str  # online | offline | unknown
    min_hz: int | None
    cur_hz: int | None
    max_hz: int | None
    governor: str | None
    pinned: bool
    why: str


class ClockReport(TypedDict, total=False):
    error: str  # the domain could not be read: only this key
    table_hz: list[int]
    cur_hz: int
    min_hz: int
    max_hz: int
    governor: str | None
    pinned: bool
    clusters: list[ClusterReport]  # the CPU's, where the device tells them


class RailReport(TypedDict):
    name: str
    voltage_mv: float
    current_ma: float
    power_mw: float
    implausible: str | None


class ModeReport(TypedDict):
    id: int
    name: str
    gpu_max_hz: int | None
    cpu_max_hz: int | None
    emc_max_hz: int | None
    online_cpus: int | None


class ModeId(TypedDict):
    id: int
    name: str


class ScalingReport(TypedDict):
    enabled: bool  # the GPU's clock follows its load (3D scaling)
    via: str  # "enable_3d_scaling" (L4T r35/r36) or "governor NAME" (JetPack 7)


class DeviceReport(TypedDict):
    board: str
    module: str
    l4t: str | None
    jetpack: str | None
    serial: str | None
    twin: bool
    profile: str | None
    module_profile: str | None  # the module's shipped profile; an unknown module's fallback (module_known false)
    module_known: bool
    memory_total_mb: float | None
    source: str
    nvpmodel: ModeId | None
    nvpmodel_conf: bool
    power_modes: list[ModeReport]
    baseline: ModeId | None  # the uncapped mode every comparison runs against (engine.device.baseline); None: none
    clocks: dict[str, ClockReport]
    gpu_load: float | None
    gpu_3d_scaling: ScalingReport | None  # None: a device that cannot tell
    rails: list[RailReport]
    total_power_mw: float
    temperatures: dict[str, float]
    errors: dict[str, str]


def device_report(device: Device) -> DeviceReport:
    """Everything `slm-dvfs device` shows, as plain data (JSON-ready)."""
    snap = take_snapshot(device)
    ident = snap.identity
    try:
        modes = device.power_modes()
        no_conf = False
    except NodeNotFoundError:  # every L4T container: the board is there, its modes are not
        modes, no_conf = (), True
    clocks: dict[str, ClockReport] = {}
    clusters = _cpu_clusters(device)
    for domain in ClockDomain:
        state = snap.clock(domain)
        if state is None:
            clocks[domain.value] = {"error": snap.errors.get(domain.value, "unavailable")}
            continue
        clocks[domain.value] = {
            "table_hz": list(device.clock_table(domain)),
            "cur_hz": state.cur_hz,
            "min_hz": state.min_hz,
            "max_hz": state.max_hz,
            "governor": state.governor,
            "pinned": state.pinned,
        }
        if domain is ClockDomain.CPU and clusters:
            # The line shows the first online cluster: pinned only when every cluster is known and pinned.
            clocks["cpu"]["pinned"] = all(c["pinned"] for c in clusters if c["state"] != "offline") and all(
                c["state"] != "unknown" for c in clusters)
            clocks["cpu"]["clusters"] = clusters
    rails: list[RailReport] = [{"name": r.name, "voltage_mv": r.voltage_mv, "current_ma": r.current_ma, "power_mw": r.power_mw,
              "implausible": snap.implausible.get(r.name)} for r in snap.rails]
    return {
        "board": ident.board,
        "module": ident.module,
        "l4t": ident.l4t,
        "jetpack": ident.jetpack,
        "serial": ident.serial,
        "twin": ident.is_twin,
        "profile": ident.profile,
        "module_profile": ident.module_profile,
        "module_known": ident.module_known,
        "memory_total_mb": ident.memory_total_mb,
        "source": ident.source.value,
        "nvpmodel": None if snap.mode is None else {"id": snap.mode.id, "name": snap.mode.name},
        "nvpmodel_conf": not no_conf,
        "power_modes": [
            {"id": m.id, "name": m.name, "gpu_max_hz": m.gpu_max_hz, "cpu_max_hz": m.cpu_max_hz,
             "emc_max_hz": m.emc_max_hz, "online_cpus": m.online_cpus}
            for m in modes
        ],
        "baseline": _baseline(modes),
        "clocks": clocks,
        "gpu_load": snap.gpu_load,
        "gpu_3d_scaling": _gpu_scaling(device),
        "rails": rails,
        "total_power_mw": snap.total_power_mw,  # over the plausible rails: an implausible one is flagged, never summed
        "temperatures": {t.zone: t.celsius for t in snap.temperatures},
        "errors": dict(snap.errors),
    }


def _baseline(modes: Sequence[PowerMode]) -> ModeId | None:
    """The board's baseline mode by name and id; None where its conf names none (or there is no conf)."""
    from engine.device.baseline import uncapped_mode

    if not modes:
        return None
    try:
        mode = uncapped_mode(modes)
    except ConfigError:  # a run with --compare says why, with its remedy
        return None
    return {"id": mode.id, "name": mode.name}


def _gpu_scaling(device: Device) -> ScalingReport | None:
    """The GPU's 3D scaling state (a board or the twin; None for a device that cannot tell)."""
    read = getattr(device, "gpu_scaling", None)
    if read is None:
        return None
    try:
        scaling = read()
    except SlmDvfsError:
        return None
    return {"enabled": scaling.enabled, "via": scaling.via}


def _cpu_clusters(device: Device) -> list[ClusterReport]:
    """Each CPU cluster's state (a board or the twin; [] for a device that cannot tell)."""
    read = getattr(device, "cpu_clusters", None)
    if read is None:
        return []
    try:
        clusters = read()
    except SlmDvfsError:
        return []
    return [{"cpus": list(c.cpus), "label": c.label, "policy": c.policy,
             "state": "online" if c.known else "offline" if not c.online else "unknown",
             "min_hz": c.min_hz, "cur_hz": c.cur_hz, "max_hz": c.max_hz, "governor": c.governor,
             "pinned": c.pinned, "why": c.why} for c in clusters]


def _cluster_lines(c: ClockReport) -> list[str]:
    """The CPU's clusters under its line, where they are not all alike and online."""
    clusters = c.get("clusters") or []
    same = len({(k["state"], k["min_hz"], k["max_hz"], k["governor"]) for k in clusters}) <= 1
    if not clusters or (same and clusters[0]["state"] == "online"):
        return []
    out = []
    for k in clusters:
        if k["state"] == "online":
            pin = "  (pinned)" if k["pinned"] else ""
            out.append(f"    {k['label']:10} {_mhz(k['min_hz']):>6} / {_mhz(k['cur_hz']):>8} / "
                       f"{_mhz(k['max_hz']):>8}   {k['governor'] or '-'}{pin}")
        else:
            what = "offline" if k["state"] == "offline" else "unknown"
            out.append(f"    {k['label']:10} {what}" + (f": {k['why']}" if k["why"] != "offline" else ""))
    return out


def _mhz(hz: int | None) -> str:
    # An online cluster's clocks were all read (CpuCluster.known), so `-` is never shown there.
    return "-" if hz is None else format_mhz(hz)


def format_device_report(rep: DeviceReport) -> str:
    src = rep["source"]
    kind = f"digital twin ({rep['profile']})" if rep["twin"] else "real board"
    lines = [
        f"{rep['board']} · {rep['module']} · {kind}" + (f" · serial {rep['serial']}" if rep.get("serial") else ""),
        f"L4T {rep['l4t'] or '?'} · JetPack {rep['jetpack'] or '?'} · "
        + (f"memory {rep['memory_total_mb']:.0f} MB · " if rep.get("memory_total_mb") else "")
        + "power mode: " + _mode_text(rep),
        "",
        f"Clocks [{src}]       min / current / max MHz   governor",
    ]
    for name, c in rep["clocks"].items():
        if "error" in c:
            lines.append(f"  {name.upper():4} unavailable: {c['error'].splitlines()[0]}")
            continue
        gov = c["governor"] or "-"
        pin = "  (pinned)" if c["pinned"] else ""
        lines.append(
            f"  {name.upper():4} {format_mhz(c['min_hz']):>8} / {format_mhz(c['cur_hz']):>8} / {format_mhz(c['max_hz']):>8}"
            f"   {gov}{pin}"
        )
        lines += _cluster_lines(c)
    lines += ["", "Clock tables (MHz)"]
    for name, c in rep["clocks"].items():
        if "table_hz" in c:
            table = " ".join(format_mhz(f) for f in c["table_hz"])
            lines.append(f"  {name.upper():4} {table}  ({len(c['table_hz'])} steps)")
    lines += ["", f"Rails [{src}]            mV       mA       mW"]
    flagged = [r for r in rep["rails"] if r.get("implausible")]
    for r in rep["rails"]:
        mark = "  implausible" if r.get("implausible") else ""
        lines.append(f"  {r['name']:18} {r['voltage_mv']:7.0f}  {r['current_ma']:7.0f}  {r['power_mw']:7.0f}{mark}")
    left_out = f"  (without {', '.join(r['name'] for r in flagged)})" if flagged else ""
    lines.append(f"  {'total':18} {'':7}  {'':7}  {rep['total_power_mw']:7.0f}{left_out}")
    lines += [f"  implausible {r['name']}: {r['implausible']}; not summed" for r in flagged]
    load = "unknown" if rep["gpu_load"] is None else f"{rep['gpu_load'] * 100:.1f}%"
    lines += ["", f"GPU load [{src}] {load}"]
    if (scaling := rep.get("gpu_3d_scaling")) is not None:
        lines.append(f"GPU 3D scaling [{src}] {'on' if scaling['enabled'] else 'off'} ({scaling['via']})")
    lines.append(f"Temperatures [{src}] (°C)")
    lines += [f"  {zone:18} {c:6.1f}" for zone, c in rep["temperatures"].items()]
    lines += ["", "Power modes (nvpmodel)"]
    if not rep.get("nvpmodel_conf", True):
        lines.append(f"  {NO_CONF}: policies that switch modes (mode:N) cannot run here")
    for m in rep["power_modes"]:
        caps = []
        if m["gpu_max_hz"]:
            caps.append(f"GPU ≤ {format_mhz(m['gpu_max_hz'])} MHz")
        if m["cpu_max_hz"]:
            caps.append(f"CPU ≤ {format_mhz(m['cpu_max_hz'])} MHz")
        if m["emc_max_hz"]:
            caps.append(f"EMC ≤ {format_mhz(m['emc_max_hz'])} MHz")
        if m["online_cpus"]:
            caps.append(f"{m['online_cpus']} cores")
        base = rep.get("baseline")
        mark = "  (the baseline: what every saving is against)" if base is not None and base["id"] == m["id"] else ""
        lines.append(f"  {m['id']} {m['name']:10} {', '.join(caps) or 'no caps'}{mark}")
    if rep["errors"]:
        lines += ["", "Not available"] + [f"  {k}: {v}" for k, v in rep["errors"].items()
                                          if not (k == "nvpmodel" and not rep.get("nvpmodel_conf", True))]
    return "\n".join(lines)


def _mode_text(rep: DeviceReport) -> str:
    mode = rep["nvpmodel"]
    if not rep.get("nvpmodel_conf", True):  # no names, no caps: at most the id nvpmodel's status file keeps
        return NO_CONF + (f" (its status file says mode {mode['id']})" if mode else "")
    return f"{mode['id']} {mode['name']}" if mode else "unknown"


def board_notes(session: DeviceSession) -> list[str]:
    """The session's notes, then what the clock guard has to say about this board (a dead run's
    clocks recovered, a pin left in place, a session running now)."""
    from engine.device.guard.notes import board_notes as guard_notes

    return [*session.notes, *guard_notes(session.device)]


def cmd_device(args: argparse.Namespace) -> int:
    with session_from_args(args) as session:
        notes = board_notes(session)
        rep = device_report(session.device)
    if args.json:
        print(json.dumps({**rep, "notes": notes}, indent=2))
    else:
        for note in notes:
            print(f"note: {note}", file=sys.stderr)
        print(format_device_report(rep))
    return 0


# --- pin / restore ---------------------------------------------------------------------------
def cmd_pin(args: argparse.Namespace) -> int:
    from engine.device.setting import DvfsSetting, check_setting
    from engine.core.clocks import parse_mhz
    from engine.device.base import ServiceWriter
    from engine.device.guard.guard import ClockGuard

    wanted = {ClockDomain.GPU: args.gpu, ClockDomain.CPU: args.cpu, ClockDomain.EMC: args.emc}
    wanted = {d: mhz for d, mhz in wanted.items() if mhz is not None}
    if not wanted:
        raise ConfigError("nothing to pin", "give at least one of --gpu, --cpu, --emc (in MHz)")
    with session_from_args(args) as session:
        device = session.device
        if isinstance(device, ServiceWriter):
            from engine.device.clockd.client import ServiceDevice

            if isinstance(device, ServiceDevice):
                device.require_client()  # no service this user may write through: why (its group, none running)
            # The clock service restores a client's clocks when it disconnects: a pin cannot
            # outlive this command through it. Refuse before changing anything.
            raise ConfigError(
                "the clock service holds pins only while a client is connected, so `pin` cannot leave one",
                "run the work under a policy instead (`slm-dvfs run --policy static:gpu=MHZ ...`), or, as root, "
                "stop the service (`sudo systemctl stop slm-dvfs-clockd`) and pin with SLM_DVFS_CLOCKD=off",
            )
        hz = {
            domain: parse_mhz(mhz, device.clock_table(domain), what=f"{domain.value} clock")
            for domain, mhz in wanted.items()
        }
        # Every clock is checked (listed, within the current mode's cap) before the first write.
        check_setting(device, DvfsSetting(gpu_hz=hz.get(ClockDomain.GPU), cpu_hz=hz.get(ClockDomain.CPU),
                                          emc_hz=hz.get(ClockDomain.EMC)))
        with ClockGuard(device, over_pin=True) as guard:  # a second pin keeps the first's snapshot
            for domain, value in hz.items():
                state = device.pin(domain, value)
                print(f"{domain.value.upper()} pinned at {format_mhz(state.cur_hz)} MHz")
            path = guard.keep()
    print(f"journalled in {path}; `slm-dvfs restore` puts the clocks back")
    return 0


def cmd_restore(args: argparse.Namespace) -> int:
    from engine.device.guard.guard import restore_report
    from engine.device.guard.journal import describe_journals

    root = None  # every board's journals
    if args.twin:
        from engine.device.session import twin_root

        root = str(twin_root(args.twin))
    elif args.sysfs_root or os.environ.get(paths.ENV_PREFIX + "SYSFS_ROOT"):
        root = str(paths.sysfs_root(args.sysfs_root))  # that board's only, as every device command takes it
        if not os.path.isdir(root):  # a mistyped root: "nothing to restore" would hide a board left pinned
            raise ConfigError(f"--sysfs-root {shown(root)}: no such folder", "give the root of the board's tree "
                              "(`/` on a board, the folder a test or twin tree was rendered in), or leave it out to "
                              "restore every board's journals")
    report = restore_report(root=root)
    for j in report.dropped:  # said even when nothing else happened: the journal the user saw is gone
        print(f"dropped: {j.path.name}: the twin's tree {j.device.get('root', '?')} is gone (reset at reboot): "
              f"nothing to restore, the twin starts from its defaults")
    if not report.restored and not report.problems:
        if report.dropped:
            return 0
        print(f"nothing to restore{' for ' + root if root else ''}: no pinned clocks and no journal left by a dead run")
        return 0
    for line in describe_journals(report.restored):
        print(f"restored: {line}")
    _abandon_runs_of(report.restored)
    for problem in report.problems:
        print(f"not restored: {problem.describe()}", file=sys.stderr)
    if report.problems:
        print(f"slm-dvfs: {len(report.problems)} clock journal(s) kept; see 'What to do' above", file=sys.stderr)
        return 1
    return 0


def _abandon_runs_of(journals: Iterable[Journal]) -> None:
    """The runs a recovered session journal names are over: mark them abandoned in the default store."""
    from engine.results.store.db import default_db_path
    from engine.results.errors import StoreError
    from engine.results.store import Store

    run_ids = sorted({r for j in journals for r in j.runs})
    if not run_ids or not default_db_path().exists():
        return
    try:
        with Store(default_db_path(), create=False) as store:
            for run_id in store.reap_abandoned(run_ids):
                print(f"marked run {run_id} abandoned: its session died while it ran")
    except StoreError as exc:
        print(f"slm-dvfs: could not mark runs {run_ids} abandoned: {exc.what}", file=sys.stderr)


# --- monitor ---------------------------------------------------------------------------------
def cmd_monitor(args: argparse.Namespace) -> int:
    from engine.device.monitor import PowerMonitor

    if args.seconds <= 0:
        raise ConfigError(f"--seconds must be positive, not {args.seconds}", "pass e.g. --seconds 10")
    with session_from_args(args) as session:
        for note in board_notes(session):
            print(f"note: {note}", file=sys.stderr)
        source = session.power_source()
        label = source.source.value
        with PowerMonitor(source, rate_hz=args.rate, rails=args.rails) as mon:
            if mon.rate_note:
                print(f"note: {mon.rate_note}", file=sys.stderr)
            mon.begin_window("monitor")
            first_sample = mon.sample_count
            start = time.monotonic()
            next_print = start
            while (now := time.monotonic()) - start < args.seconds:
                if now >= next_print and not args.json:
                    recent = mon.recent(1.0)
                    if recent:
                        s = recent[-1]
                        rails = "  ".join(f"{k} {v / 1000:6.2f} W" for k, v in s.rails_mw.items())
                        print(f"[{label}] t={now - start:5.1f}s  {rails}  total {s.total_mw / 1000:6.2f} W", flush=True)
                    next_print += 1.0
                time.sleep(0.05)
            result = mon.end_window("monitor")
            new_samples = mon.sample_count - first_sample
    got_hz = new_samples / (time.monotonic() - start)  # new values only: a stale read is not a sample
    if args.json:
        print(json.dumps({
            "source": label,
            "rails": list(result.rails),
            "duration_s": result.duration_s,
            "energy_j": dict(result.energy_j),
            "total_energy_j": result.total_energy_j,
            "avg_power_w": result.avg_power_w,
            "exact": result.exact,
            "rate_hz": args.rate,
            "sampling_hz": mon.rate_hz,
            "samples": new_samples,
            "samples_per_s": got_hz,
            "rate_note": mon.rate_note,
        }, indent=2))
    else:
        print(
            f"[{label}] {result.duration_s:.1f} s, energy {result.total_energy_j:.2f} J over "
            f"{'+'.join(result.rails)}, average {result.avg_power_w:.2f} W"
            + (" (exact)" if result.exact else " (integrated from samples)")
        )
        print(f"[{label}] {new_samples} samples, {got_hz:.1f} per second ({args.rate:g} Hz asked"
              + (f"; {mon.rate_note.split(': ', 1)[-1]})" if mon.rate_note else ")"))
    return 0
