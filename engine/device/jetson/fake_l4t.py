"""Stand-ins for L4T's `nvpmodel` and `jetson_clocks`, run in-process on a twin or test tree.

Nothing under a root we were handed is ever executed (docs/security.md): on a twin's tree
(or a test tree carrying `FAKE_L4T_MARKER`) `engine.device.jetson.l4t_tools` calls
`nvpmodel_main` / `jetson_clocks_main` here as Python functions with the tree's root.
They act on the tree's files as the real tools act on a board's:
nvpmodel keeps `var/lib/nvpmodel/status` and writes a mode's caps into the clock and
hot-plug files; jetson_clocks pins CPU, GPU and EMC to the mode's maximum and can
store and restore the clock files. The twin's sync then follows those files.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Sequence, TextIO

from engine.device.base import PowerMode
from engine.device.jetson.discovery import JetsonNodes, discover
from engine.device.nvpmodel import EMC_CAP_FILE, parse_conf
from engine.device.jetson.writes import write_range
from engine.device.sysfs import SysfsTree
from engine.device.treefs import put_file
from engine.core.errors import SlmDvfsError

NVPMODEL_PATH = "usr/sbin/nvpmodel"
JETSON_CLOCKS_PATH = "usr/bin/jetson_clocks"
DEFAULT_STORE = "root/l4t_dfs.conf"  # jetson_clocks' default store file, under the root

# --------------------------------------------------------------------------- nvpmodel


def nvpmodel_main(root: str, argv: Sequence[str], out: TextIO | None = None, err: TextIO | None = None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    tree = SysfsTree(root)
    try:
        modes, _default = parse_conf(tree.read_str("etc/nvpmodel.conf"))
        args = list(argv)
        if args and args[0] == "-q":
            mode_id = current_mode_id(tree)
            name = next((m.name for m in modes if m.id == mode_id), f"MODE_{mode_id}")
            print(f"NV Power Mode: {name}", file=out)
            print(mode_id, file=out)
            return 0
        if len(args) >= 2 and args[0] == "-m":
            try:
                mode_id = int(args[1])
            except ValueError:
                mode_id = -1
            mode = next((m for m in modes if m.id == mode_id), None)
            if mode is None:
                print(f"NVPM ERROR: Invalid mode {args[1]} (modes: {[m.id for m in modes]})", file=err)
                return 1
            apply_mode(tree, mode)
            return 0
        if args and args[0] == "-p":
            for m in modes:
                print(f"POWER_MODEL: ID={m.id} NAME={m.name}", file=out)
            return 0
    except SlmDvfsError as exc:
        print(f"NVPM ERROR: {exc}", file=err)
        return 1
    print("Usage: nvpmodel -q | -m <mode id> | -p --verbose", file=err)
    return 1


def current_mode_id(tree: SysfsTree) -> int:
    text = tree.read_str("var/lib/nvpmodel/status")
    m = re.search(r"pmode:(\d+)", text)
    return int(m.group(1)) if m else 0


def apply_mode(tree: SysfsTree, mode: PowerMode) -> None:
    """Write a mode's caps as nvpmodel does: online CPUs, CPU and GPU max (and min
    where it would exceed the new max), the EMC cap, then the status file."""
    nodes = discover(tree)
    online_n = mode.online_cpus
    if online_n is not None:
        files = [(cpu, f) for cpu, f in nodes.cpu_online if f]
        for cpu, f in files:  # bring up first, then down, never all off
            if cpu < online_n:
                tree.write(f, 1)
        for cpu, f in reversed(files):
            if cpu >= online_n and cpu != 0:
                tree.write(f, 0)
        if tree.exists("sys/devices/system/cpu/online"):
            tree.write("sys/devices/system/cpu/online", f"0-{online_n - 1}" if online_n > 1 else "0")
    for pol in nodes.cpu_policies:
        table = tree.read_ints(f"{pol.path}/scaling_available_frequencies")
        top = max(table)
        cap_khz = top if mode.cpu_max_hz is None else _at_most(table, mode.cpu_max_hz // 1000)
        _write_range(tree, f"{pol.path}/scaling_min_freq", f"{pol.path}/scaling_max_freq", None, cap_khz)
    if nodes.gpu_devfreq:
        g = nodes.gpu_devfreq
        table = tree.read_ints(f"{g}/available_frequencies")
        cap = max(table) if mode.gpu_max_hz is None else _at_most(table, mode.gpu_max_hz)
        _write_range(tree, f"{g}/min_freq", f"{g}/max_freq", min(table), cap)
    emc_cap = EMC_CAP_FILE.lstrip("/")
    if tree.path(emc_cap).parent.is_dir():
        tree.write(emc_cap, 0 if mode.emc_max_hz is None else mode.emc_max_hz)
    tree.write("var/lib/nvpmodel/status", f"pmode:{mode.id:04d} fmode:quiet")


# --------------------------------------------------------------------------- jetson_clocks


def jetson_clocks_main(root: str, argv: Sequence[str], out: TextIO | None = None, err: TextIO | None = None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    tree = SysfsTree(root)
    args = list(argv)
    try:
        nodes = discover(tree)
        if not args:
            pin_to_max(tree, nodes)
            return 0
        if args[0] in ("--store", "--restore"):
            if len(args) > 1:  # a file slm-dvfs chose (its state dir), or a person's
                path = Path(args[1])
                if args[0] == "--store":
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_text(store_text(tree, nodes))
                else:
                    if not path.is_file():
                        raise SlmDvfsError(f"no stored state at {path}", "run `jetson_clocks --store` first")
                    restore_text(tree, path.read_text())
            elif args[0] == "--store":  # the default file is the tree's own: written as its files are
                put_file(tree.root, DEFAULT_STORE, store_text(tree, nodes).encode())
            else:
                restore_text(tree, tree.read_str(DEFAULT_STORE))
            return 0
        if args[0] == "--show":
            out.write(show(tree, nodes))
            return 0
    except (SlmDvfsError, OSError) as exc:
        print(f"jetson_clocks: {exc}", file=err)
        return 1
    print("Usage: jetson_clocks [--show] [--store [file]] [--restore [file]]", file=err)
    return 1


def _control_files(tree: SysfsTree, nodes: JetsonNodes) -> list[str]:
    """Root-relative files jetson_clocks stores, in restore order."""
    files = [f for _cpu, f in nodes.cpu_online if f]
    for pol in nodes.cpu_policies:
        files += [f"{pol.path}/scaling_governor", f"{pol.path}/scaling_min_freq", f"{pol.path}/scaling_max_freq"]
    if nodes.gpu_devfreq:
        g = nodes.gpu_devfreq
        files += [f"{g}/governor", f"{g}/min_freq", f"{g}/max_freq"]
    if nodes.emc:
        files += [f"{nodes.emc}/mrq_rate_locked", f"{nodes.emc}/rate"]
    return files


def pin_to_max(tree: SysfsTree, nodes: JetsonNodes) -> None:
    online = {cpu for cpu, f in nodes.cpu_online if f is None or tree.read_int(f) == 1}
    for pol in nodes.cpu_policies:
        if online and not online.intersection(pol.cpus):
            continue
        tree.write(f"{pol.path}/scaling_min_freq", tree.read_int(f"{pol.path}/scaling_max_freq"))
    if nodes.gpu_devfreq:
        g = nodes.gpu_devfreq
        tree.write(f"{g}/min_freq", tree.read_int(f"{g}/max_freq"))
    if nodes.emc:
        table = sorted(tree.read_ints(nodes.emc_possible_rates)) if nodes.emc_possible_rates else []
        top = tree.read_int(f"{nodes.emc}/max_rate")
        cap = _emc_cap(tree)
        if cap:
            top = min(top, cap)
        if table:
            top = _at_most([r * 1000 for r in table], top)
        tree.write(f"{nodes.emc}/mrq_rate_locked", 1)
        tree.write(f"{nodes.emc}/rate", top)


def store_text(tree: SysfsTree, nodes: JetsonNodes) -> str:
    """What `jetson_clocks --store` writes: `/path:value` per control file."""
    return "\n".join(f"/{rel}:{tree.read_str(rel)}" for rel in _control_files(tree, nodes)) + "\n"


def restore_text(tree: SysfsTree, text: str) -> None:
    """`jetson_clocks --restore`: the stored control files written back, each range in a safe order."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        if ":" in line:
            rel, value = line.rsplit(":", 1)
            values[rel.lstrip("/")] = value.strip()
    pending_min: dict[str, str] = {}
    for rel, value in values.items():
        if rel.endswith(("min_freq", "scaling_min_freq")):
            pending_min[rel] = value  # written with its max, in a safe order
            continue
        if rel.endswith(("max_freq", "scaling_max_freq")):
            min_rel = rel.replace("max_freq", "min_freq")
            lo = int(pending_min.pop(min_rel)) if min_rel in pending_min else None
            _write_range(tree, min_rel, rel, lo, int(value))
            continue
        if rel.endswith("/rate") and values.get(rel.replace("/rate", "/mrq_rate_locked")) == "0":
            continue  # an unlocked EMC rate belongs to the automatic scaling
        tree.write(rel, value)
    for rel, value in pending_min.items():
        tree.write(rel, value)


def show(tree: SysfsTree, nodes: JetsonNodes) -> str:
    lines = ["SOC family:tegra234  Machine:" + _read(tree, "proc/device-tree/model")]
    lines.append("Online CPUs: " + _read(tree, "sys/devices/system/cpu/online"))
    for pol in nodes.cpu_policies:
        for cpu in pol.cpus:
            p = pol.path
            lines.append(
                f"cpu{cpu}: Online={_online(tree, nodes, cpu)} Governor={_read(tree, f'{p}/scaling_governor')} "
                f"MinFreq={_read(tree, f'{p}/scaling_min_freq')} MaxFreq={_read(tree, f'{p}/scaling_max_freq')} "
                f"CurrentFreq={_read(tree, f'{p}/scaling_cur_freq')}"
            )
    if nodes.gpu_devfreq:
        g = nodes.gpu_devfreq
        lines.append(
            f"GPU MinFreq={_read(tree, f'{g}/min_freq')} MaxFreq={_read(tree, f'{g}/max_freq')} "
            f"CurrentFreq={_read(tree, f'{g}/cur_freq')}"
        )
    if nodes.emc:
        e = nodes.emc
        lines.append(
            f"EMC MinFreq={_read(tree, f'{e}/min_rate')} MaxFreq={_read(tree, f'{e}/max_rate')} "
            f"CurrentFreq={_read(tree, f'{e}/rate')} FreqOverride={_read(tree, f'{e}/mrq_rate_locked')}"
        )
    try:
        mode_id = current_mode_id(tree)
        modes, _ = parse_conf(tree.read_str("etc/nvpmodel.conf"))
        name = next((m.name for m in modes if m.id == mode_id), f"MODE_{mode_id}")
        lines.append(f"NV Power Mode: {name}")
    except SlmDvfsError:
        pass
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- helpers


def _write_range(tree: SysfsTree, min_file: str, max_file: str, lo: int | None, hi: int) -> None:
    """Write [lo, hi] in the backend's safe order (lo None: keep min, lowered to hi if above)."""
    if lo is None:
        lo = min(tree.read_int(min_file), hi)
    write_range(tree, min_file, max_file, lo, hi)


def _at_most(table: Sequence[int], cap: int) -> int:
    below = [f for f in sorted(table) if f <= cap]
    return below[-1] if below else min(table)


def _emc_cap(tree: SysfsTree) -> int:
    rel = EMC_CAP_FILE.lstrip("/")
    try:
        return tree.read_int(rel) if tree.exists(rel) else 0
    except SlmDvfsError:
        return 0


def _read(tree: SysfsTree, rel: str) -> str:
    try:
        return tree.read_str(rel).replace("\0", "").strip()
    except SlmDvfsError:
        return "?"


def _online(tree: SysfsTree, nodes: JetsonNodes, cpu: int) -> int:
    f = dict(nodes.cpu_online).get(cpu)
    if not f:
        return 1
    try:
        return tree.read_int(f)
    except SlmDvfsError:
        return 1
