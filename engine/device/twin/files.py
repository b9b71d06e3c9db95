"""The twin's own reads and writes of its tree while it runs.

The twin reads a few dozen control files to settle its state and keeps the state files
(current clocks, GPU load, INA3221 rails, temperatures) in memory: `put` records a file's new
text, `flush` renders it (an atomic replace) when something reads it or on the twin's coarse tick,
so a step touches no disk. Control files are read once and kept until they are `stale`: a write
through SysfsTree says so, `check` sees a change by a stat of each (a writer in another process),
and the twin's coarse tick reads them again anyway. Reads and
writes go through kept descriptors of the tree's folders (found once, through links inside the
tree only); a file is rendered only when its text changed.
"""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path
from typing import Mapping, Sequence

from engine.core.errors import DeviceError, errno_text
from engine.device.treefs import read_fd, replace_at, resolve_at
from engine.device.treegen import TreeLayout, proc_stat_text
from engine.device.twin.governors import ControlState, DomainControl
from engine.device.twin.profile import TwinProfile
from engine.device.twin.tree import SHUNT_MOHM, ina_reading

USER_HZ = 100  # /proc/stat counts in USER_HZ ticks (proc(5)); 100 on arm64 Linux
STAT_EVERY_S = 0.25  # /proc/stat is rewritten at most this often (a reader takes deltas)
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # a FIFO put in the tree must not block us


class TwinFiles:
    """Fast access to a rendered twin tree (`layout` under `root`) for a profile's board."""

    def __init__(self, root: Path, layout: TreeLayout, profile: TwinProfile) -> None:
        self.root = root
        self.layout = layout
        self.profile = profile
        self._at: dict[str, tuple[int, str]] = {}  # tree file -> (its folder's descriptor, its name)
        self._dirs: dict[tuple[int, int], int] = {}  # (st_dev, st_ino) of a folder -> its descriptor
        self._written: dict[str, str] = {}  # what we last put in each file
        self._pending: dict[str, str] = {}  # put, not rendered yet
        self._cache: dict[str, str] = {}  # what each file read or put holds, as far as we know
        self.stale = True  # a control file may have changed since it was read: read them again
        self._sig: dict[str, tuple[int, int, int, int]] = {}  # file read -> its (inode, mtime, ctime, size) then
        self._keys: dict[str, tuple[int, int, str]] = {}  # any path in the tree -> (its folder's dev, ino; name)
        # /proc/stat: (busy, idle) jiffies per CPU, when they were last advanced and last written
        self._jiffies = [[0.0, 0.0] for _ in layout.cpu_dirs]
        self._stat_t: float | None = None
        self._stat_written = -float("inf")

    def read_control(self) -> tuple[ControlState, list[DomainControl], int]:
        """The control state the files hold, every CPU policy's control, and the index of
        the policy that runs the work (the first with an online CPU)."""
        if self.stale:
            self.stale = False  # before the reads: a write meanwhile marks them stale again
            self.invalidate()
        rd, ri, lay = self.read, self.read_int, self.layout
        g = lay.gpu_devfreq
        gpu = DomainControl(ri(f"{g}/min_freq"), ri(f"{g}/max_freq"), rd(f"{g}/governor"), ri(f"{g}/cur_freq"))
        online = [i for i, d in enumerate(lay.cpu_dirs) if ri(f"{d}/online") == 1]
        policies = [
            DomainControl(
                ri(f"{p}/scaling_min_freq") * 1000,
                ri(f"{p}/scaling_max_freq") * 1000,
                rd(f"{p}/scaling_governor"),
                ri(f"{p}/scaling_cur_freq") * 1000,
            )
            for p in lay.cpu_policy_dirs
        ]
        main = self._first_online_policy(online)
        e = lay.emc
        emc = DomainControl(
            ri(f"{e}/min_rate"), ri(f"{e}/max_rate"), None, ri(f"{e}/rate"), locked=ri(f"{e}/mrq_rate_locked") != 0
        )
        m = re.search(r"pmode:(\d+)", rd(lay.nvpmodel_status))
        mode_id = int(m.group(1)) if m else self.profile.initial_mode
        control = ControlState(gpu=gpu, cpu=policies[main], emc=emc, online_cpus=max(len(online), 1), mode_id=mode_id)
        return control, policies, main

    def read(self, rel: str) -> str:
        """What a tree file holds: as last read or put (until `invalidate`), else read through its
        folder's descriptor, found once inside the tree; O_NOFOLLOW, regular files only."""
        text = self._cache.get(rel)
        if text is not None:
            return text
        path = os.path.join(self.root, rel)
        try:
            dir_fd, name = self._where(rel)
            fd = os.open(name, _READ, dir_fd=dir_fd)
            try:
                text = read_fd(fd, path).decode().strip()
                self._sig[rel] = _signature(os.fstat(fd))
            finally:
                os.close(fd)
        except (OSError, UnicodeDecodeError) as exc:
            raise DeviceError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}", "re-create the twin") from None
        self._cache[rel] = text
        return text

    def check(self) -> None:
        """Mark the control files stale if one changed since it was read (a writer we are not told
        of: another process, a shell): a stat of each, no read."""
        if self.stale:
            return
        for rel, sig in self._sig.items():
            try:
                dir_fd, name = self._where(rel)
                now = _signature(os.stat(name, dir_fd=dir_fd, follow_symlinks=False))
            except (OSError, DeviceError):
                now = None
            if now != sig:
                self.stale = True
                return

    def invalidate(self) -> None:
        """Forget what the files read held (the next reads go to disk); a file put and not rendered
        yet still holds what was put."""
        self._cache = {rel: text for rel, text in self._cache.items() if rel in self._pending}

    def written_by_other(self, rel: str) -> None:
        """Someone wrote `rel` (a path as they named it): what they wrote stands over what we put and
        did not render, and every control file is read again before the next settle."""
        self.stale = True
        key = self._key(rel) if self._pending else None
        if key is not None:  # as if ours had been rendered at once and theirs written over it
            for mine in [r for r in self._pending if self._key(r) == key]:
                del self._pending[mine]
                self._cache.pop(mine, None)

    def flush(self, rels: Sequence[str] | None = None) -> None:
        """Render what was put and not rendered yet: every such file, or those of `rels` (paths as
        a reader names them, links inside the tree followed)."""
        if not self._pending:
            return
        if rels is None:
            targets = list(self._pending)
        else:
            keys = {self._key(r) for r in rels}
            targets = list(self._pending) if None in keys else [r for r in self._pending if self._key(r) in keys]
        for rel in targets:
            text = self._pending.pop(rel, None)  # a signal handler's write may have taken it meanwhile
            if text is not None:
                self._render(rel, text)

    def read_int(self, rel: str) -> int:
        text = self.read(rel)
        try:
            return int(text.split()[0])
        except (ValueError, IndexError):
            raise DeviceError(f"{rel} holds {text!r}, not a number", "write an integer there") from None

    def _first_online_policy(self, online: list[int]) -> int:
        size = self.profile.cpu.cluster_size
        for i, p in enumerate(self.layout.cpu_policy_dirs):
            found = re.search(r"cpu(\d+)/cpufreq", p)
            assert found is not None  # the layout names each policy folder .../cpuN/cpufreq
            first = int(found.group(1))
            if any(first <= c < first + size for c in online):
                return i
        return 0

    def put_emc_rate(self, hz: int) -> None:
        """The EMC rate file is both control and state: the automatic scaling rewrites it
        while unlocked; a rate someone locked since our last write stands."""
        rel = f"{self.layout.emc}/rate"
        try:
            current = self.read(rel)
            locked = self.read_int(f"{self.layout.emc}/mrq_rate_locked") != 0
        except DeviceError:
            return
        if current == str(hz):
            self._written[rel] = current
            return
        if locked and self._written.get(rel) != current:
            return
        self.put(rel, hz, force=True)

    def write_rails(self, power: Mapping[str, float]) -> None:
        sums: dict[str, list[int]] = {}
        for rail in self.profile.rails:
            files = self.layout.rails.get(rail.name)
            if files is None:
                continue
            mv, ma = ina_reading(power.get(rail.name, 0.0), rail)
            volt, curr = files
            self.put(volt, mv)
            self.put(curr, ma)
            if rail.name in self.layout.rail_power:
                self.put(self.layout.rail_power[rail.name], mv * ma // 1000)
            m = re.match(r"(.*)/in(\d)_input$", volt)
            if m:  # hwmon: shunt voltage (uV) and the per-chip sums
                self.put(f"{m.group(1)}/in{int(m.group(2)) + 3}_input", ma * SHUNT_MOHM)
                sums.setdefault(m.group(1), []).append(ma)
        for d, currents in sums.items():
            self.put(f"{d}/in7_input", sum(currents) * SHUNT_MOHM)
            self.put(f"{d}/curr4_input", sum(currents))

    def write_temps(self, temps_c: Mapping[str, float]) -> None:
        for kind, zone in self.layout.thermal_zones.items():
            if kind in temps_c:  # Orin's sensors report in steps of 0.5 C
                self.put(f"{zone}/temp", int(round(temps_c[kind] * 2)) * 500)

    def write_cpu_stat(self, now: float, shares: Mapping[int, float], online: int) -> None:
        """Advance /proc/stat's per-CPU jiffies by the wall time since the last call, each online CPU
        busy for its share (0..1) of it, and rewrite the file at most every STAT_EVERY_S."""
        last, self._stat_t = self._stat_t, now
        jiffies = self._jiffies
        if last is not None and now > last:
            ticks = (now - last) * USER_HZ
            for cpu in range(min(online, len(jiffies))):
                busy = min(1.0, max(0.0, shares.get(cpu, 0.0)))
                jiffies[cpu][0] += busy * ticks
                jiffies[cpu][1] += (1.0 - busy) * ticks
        if now - self._stat_written >= STAT_EVERY_S:
            self._stat_written = now
            cores = [(int(b), int(i)) for b, i in jiffies[:online]]
            self.put(self.layout.proc_stat, proc_stat_text(cores).rstrip("\n"))

    def put(self, rel: str, value: object, *, force: bool = False) -> None:
        """Set a state file's text, rendered on the next `flush` that covers it (nothing when unchanged)."""
        text = f"{value}"
        if not force and self._written.get(rel) == text:
            return
        self._written[rel] = self._cache[rel] = self._pending[rel] = text

    def _render(self, rel: str, text: str) -> None:
        path = os.path.join(self.root, rel)
        try:
            dir_fd, name = self._where(rel)
            replace_at(dir_fd, name, f"{text}\n".encode(), path)
            if rel in self._sig:  # a file we also read (the EMC rate, current clocks): ours is no change
                self._sig[rel] = _signature(os.stat(name, dir_fd=dir_fd, follow_symlinks=False))
        except OSError as exc:
            raise DeviceError(f"cannot write {path} ({errno_text(exc.errno, exc.strerror)})",
                              "free space on the twin's disk (or re-create the twin), then try again") from None

    def _key(self, rel: str) -> tuple[int, int, str] | None:
        """Where a path in the tree leads, as (its folder's st_dev, st_ino, the file's name): a reader's
        path and ours may differ by links. None where it cannot be found."""
        key = self._keys.get(rel)
        if key is None:
            try:
                if rel in self._at:
                    dir_fd, name = self._at[rel]
                    st = os.fstat(dir_fd)
                else:  # a reader's path: its folder is not kept open (only the twin's own files' are)
                    dir_fd, name = resolve_at(self.root, rel)
                    try:
                        st = os.fstat(dir_fd)
                    finally:
                        os.close(dir_fd)
            except (OSError, DeviceError):
                return None
            if len(self._keys) > 4096:  # readers name a fixed set of files; bound it anyway
                self._keys.clear()
            key = self._keys[rel] = (st.st_dev, st.st_ino, name)
        return key

    def close(self) -> None:
        """Close the folders' descriptors (a later read or write finds its folder again)."""
        dirs, self._dirs, self._at, self._keys = self._dirs, {}, {}, {}
        for fd in dirs.values():
            with contextlib.suppress(OSError):
                os.close(fd)

    def __del__(self) -> None:  # a twin dropped without close() must not leak descriptors
        with contextlib.suppress(Exception):
            self.close()

    def _where(self, rel: str) -> tuple[int, str]:
        """(its folder's descriptor, its name) for a tree file, found once through links inside the
        tree only (engine.device.treefs); one descriptor per folder, kept until close()."""
        at = self._at.get(rel)
        if at is None:
            fd, name = resolve_at(self.root, rel)
            st = os.fstat(fd)
            kept = self._dirs.setdefault((st.st_dev, st.st_ino), fd)
            if kept != fd:
                os.close(fd)
            at = self._at[rel] = (kept, name)
        return at


def _signature(st: os.stat_result) -> tuple[int, int, int, int]:
    """What changes when a file is replaced or written in place."""
    return st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size
