"""Issue 10's board-safety cases, replayed on generated r36 trees (the twin's tree, or treegen's):
one writer per board, a journal we can trust, crash-left runs, nothing executed from a handed
path, containers. Two-session cases use a real second process holding the lock."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from engine.cli import main
from engine.device.base import ClockDomain
from engine.device.guard.guard import ClockGuard, list_journals
from engine.device.guard.journal import PINNED, SESSION, Journal, device_key
from engine.device.twin.orin import VirtualOrin

GPU_DEVFREQ = "sys/devices/platform/bus@0/17000000.gpu/devfreq/17000000.gpu"
CPU0 = "sys/devices/system/cpu/cpu0/cpufreq"
EMC_LOCK = "sys/kernel/debug/bpmp/debug/clk/emc/mrq_rate_locked"
ROOT = Path(__file__).resolve().parents[1]


def _files(root: Path) -> dict[str, str]:
    names = [f"{GPU_DEVFREQ}/min_freq", f"{GPU_DEVFREQ}/max_freq", f"{GPU_DEVFREQ}/governor",
             f"{CPU0}/scaling_min_freq", f"{CPU0}/scaling_max_freq", f"{CPU0}/scaling_governor", EMC_LOCK]
    return {n: (root / n).read_text().strip() for n in names}


def _gpu_max(root: Path) -> str:
    return (root / GPU_DEVFREQ / "max_freq").read_text().strip()


@pytest.fixture
def twin_tree(isolated_env, tmp_path: Path) -> Path:
    """A persistent twin tree (an r36 layout rendered by treegen, with the twin's marker)."""
    root = tmp_path / "T"
    VirtualOrin("agx-orin-64gb", root=root).close()
    return root


_HOLDER = textwrap.dedent(
    """
    import sys, time
    from engine.device.base import ClockDomain
    from engine.device.twin.orin import VirtualOrin
    from engine.device.guard.guard import ClockGuard

    orin = VirtualOrin("agx-orin-64gb", root=sys.argv[1])
    orin.start(tick_s=0.01, realtime=False)
    dev = orin.device()
    with ClockGuard(dev):
        dev.pin(ClockDomain.GPU, int(sys.argv[2]) * 1_000_000)
        print("pinned", flush=True)
        time.sleep(60)
    """
)


def _holder(root: Path, mhz: int, state: Path) -> subprocess.Popen[str]:
    """Another session (its own process and state dir) holding the board with the GPU pinned."""
    env = {**os.environ, "SLM_DVFS_STATE_DIR": str(state), "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", _HOLDER, str(root), str(mhz)], stdout=subprocess.PIPE,
                            text=True, env=env)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "pinned", f"the holder did not pin (rc={proc.poll()})"
    return proc


# --- case 1: two sessions on one board --------------------------------------------------------
def test_case1_a_second_writer_is_refused_whatever_path_or_state_dir(
    twin_tree: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = _files(twin_tree)
    holder = _holder(twin_tree, 612, tmp_path / "state-of-sudo")  # `sudo` vs `sudo -E`: another state dir
    try:
        other = twin_tree.parent / ".." / twin_tree.parent.name / twin_tree.name  # T/../T: the same board
        assert main(["pin", "--sysfs-root", str(other), "--gpu", "816"]) == 2
        err = capsys.readouterr().err
        assert f"pid {holder.pid}" in err and "What to do" in err  # who holds it, with its command line
        assert "-c" in err or "python" in err
        assert _gpu_max(twin_tree) == "612000000"  # the first session's clock was not moved
        assert list_journals() == []  # and we left nothing behind
    finally:
        holder.send_signal(signal.SIGTERM)
        holder.wait(timeout=20)
    assert _files(twin_tree) == before  # both gone: the board is as it was
    assert main(["restore"]) == 0 and "nothing to restore" in capsys.readouterr().out


def test_case1_the_lock_lives_with_the_board_not_the_user(twin_tree: Path) -> None:
    from engine.device.guard.lock import SYSTEM_LOCK_DIR, board_key, board_lock_dir

    assert board_lock_dir(str(twin_tree)) == twin_tree.resolve() / "run" / "slm-dvfs"
    assert board_lock_dir("/") == SYSTEM_LOCK_DIR == Path("/run/slm-dvfs")
    assert board_key(str(twin_tree)) == board_key(f"{twin_tree}/../{twin_tree.name}")
    serial = twin_tree / "proc/device-tree/serial-number"
    serial.parent.mkdir(parents=True, exist_ok=True)
    key = board_key(str(twin_tree))
    serial.write_bytes(b"1422921012345\0")
    assert board_key(str(twin_tree)) != key  # the serial is part of the identity


# --- case 2: a refused write ------------------------------------------------------------------
def test_case2_a_refused_write_is_shown_and_leaves_nothing(
    r36_tree, fake_tools, isolated_env, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from engine.device import sysfs as sysfs_mod

    root, _lay = r36_tree
    fake_tools(root)
    before = _files(root)
    real_open = sysfs_mod._open_write
    clocks = str((root / "sys").resolve())

    def read_only(path, *a, **kw):  # type: ignore[no-untyped-def]
        if str(Path(path).resolve()).startswith(clocks):  # what a non-root user sees
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *a, **kw)

    monkeypatch.setattr(sysfs_mod, "_open_write", read_only)
    assert main(["pin", "--sysfs-root", str(root), "--gpu", "612"]) == 2
    err = capsys.readouterr().err
    assert "no permission to write" in err and "EACCES" in err and "17000000.gpu/" in err
    assert "restoring the clocks failed" not in err
    assert _files(root) == before and list_journals() == []  # nothing half-applied, no journal to warn later
    assert main(["device", "--sysfs-root", str(root)]) == 0
    assert "note:" not in capsys.readouterr().err


# --- case 3: a truncated pin journal ----------------------------------------------------------
def test_case3_a_truncated_pin_journal_is_moved_aside_not_reused(
    isolated_env, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["pin", "--twin", "--gpu", "816"]) == 0
    pinned = Path(capsys.readouterr().out.split("journalled in ")[1].split(";")[0])
    text = pinned.read_text()
    pinned.write_text(text[: len(text) // 2])  # truncated (a full disk, a crash mid-copy)
    assert main(["pin", "--twin", "--gpu", "612"]) == 0
    out = capsys.readouterr()
    assert f"journalled in {pinned}" in out.out
    assert Journal.read(pinned).settings.domain(ClockDomain.GPU).max_hz == 816_000_000  # ours, readable
    moved = list(pinned.parent.glob(f"{pinned.name}.corrupt-*"))
    assert len(moved) == 1 and moved[0].read_text() == text[: len(text) // 2]
    assert main(["restore"]) == 1  # restored the readable pin, and reports the one moved aside
    out = capsys.readouterr()
    assert "restored: pinned journal" in out.out and str(moved[0]) in out.err and "What to do" in out.err
    root = isolated_env.state_dir / "twin" / "agx-orin-64gb"
    assert _gpu_max(root) == "816000000"  # the state the second pin found


# --- case 4: liveness from the flock, not pid + host ------------------------------------------
def test_case4_a_dead_session_from_another_host_is_recovered(
    twin_tree: Path, tmp_path: Path, isolated_env, capsys: pytest.CaptureFixture[str]
) -> None:
    before = _files(twin_tree)
    holder = _holder(twin_tree, 612, isolated_env.state_dir)
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=10)
    [journal] = list_journals()
    data = json.loads(journal.path.read_text())
    data.update(host="jetson-container-7f3a", pid=1)  # another host's name, and a pid that is alive here
    journal.path.write_text(json.dumps(data))
    assert _gpu_max(twin_tree) == "612000000"
    assert main(["restore"]) == 0
    assert "restored: session journal" in capsys.readouterr().out
    assert _files(twin_tree) == before and list_journals() == []


def test_case4_a_live_session_is_never_stolen(twin_tree: Path, isolated_env, capsys) -> None:
    holder = _holder(twin_tree, 612, isolated_env.state_dir)  # same state dir: its journal is visible
    try:
        [journal] = list_journals()
        assert journal.owner_alive()
        assert main(["restore"]) == 0  # a live session's journal is its own: nothing to restore
        assert _gpu_max(twin_tree) == "612000000" and list_journals() == [journal]
    finally:
        holder.send_signal(signal.SIGTERM)
        holder.wait(timeout=20)
    assert list_journals() == []


# --- case 5: crash-left runs --------------------------------------------------------------------
_RUNNER = textwrap.dedent(
    """
    import sys, time
    from engine.core.provenance import Source
    from engine.device.guard.lock import session_lock
    from engine.results.store import Store

    with Store(sys.argv[1]) as store:
        run = store.start_run(policy="static", source=Source.TWIN, steps=100, owner_lock=str(session_lock()))
    print(run, flush=True)
    time.sleep(60)
    """
)


def test_a_stored_owner_path_is_never_opened_as_a_lock_or_deleted(tmp_path: Path, isolated_env) -> None:
    # owner_lock comes from a database a user may have been handed: a path that is not a
    # session lock file (sessions/<pid>-<ns>.lock) is "cannot tell", so the run stays running
    # and the file stays where it is (a FIFO would have hung the open).
    from engine.core.provenance import Source
    from engine.results.store import Store

    precious = tmp_path / "precious.txt"
    precious.write_text("keep me")
    fifo = tmp_path / "sessions" / "1-2.lock"
    fifo.parent.mkdir()
    os.mkfifo(fifo)
    db = tmp_path / "results.sqlite"
    with Store(db) as store:
        a = store.start_run(policy="static", source=Source.TWIN, steps=10, owner_lock=str(precious))
        b = store.start_run(policy="static", source=Source.TWIN, steps=10, owner_lock=str(fifo))
    with Store(db) as store:
        assert store.get_run(a).status == store.get_run(b).status == "running"
    assert precious.read_text() == "keep me" and fifo.exists()


def test_case5_a_killed_run_is_marked_abandoned(tmp_path: Path, isolated_env, capsys) -> None:
    from engine.results.store import Store

    db = tmp_path / "results.sqlite"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", _RUNNER, str(db)], stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None
    run_id = int(proc.stdout.readline())
    with Store(db) as store:
        assert store.get_run(run_id).status == "running"  # its owner is alive: left alone
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    assert main(["runs", "--db", str(db)]) == 0  # any command that opens the store notices
    assert "abandoned" in capsys.readouterr().out
    with Store(db) as store:
        run = store.get_run(run_id)
    assert run.status == "abandoned" and run.finished_at and run.last_sample_t is None
    assert main(["show", str(run_id), "--db", str(db)]) == 0
    assert f"warning: run {run_id} was abandoned" in capsys.readouterr().err
    assert main(["export", str(run_id), "--db", str(db), "--out", str(tmp_path / "r.csv")]) == 0
    assert "abandoned" in capsys.readouterr().err


def test_case5_an_old_store_is_migrated_to_the_current_version(tmp_path: Path) -> None:
    from engine.results import migrations
    from engine.results.store import Store

    db = tmp_path / "v3.sqlite"
    conn = sqlite3.connect(db)
    for step in migrations.MIGRATIONS[:3]:
        for statement in step:  # type: ignore[union-attr]
            conn.execute(statement)
    conn.execute("INSERT INTO runs (policy, status, started_at, source) VALUES ('maxn', 'running', 'x', 'twin')")
    conn.execute("PRAGMA user_version = 3")
    conn.commit()
    conn.close()
    with Store(db) as store:
        assert store.schema_version() == migrations.SCHEMA_VERSION == 12  # through v4 (abandoned), v5, v6, v7, v8, v9, v10, v11 and v12
        run = store.list_runs()[0]
        assert run.status == "running"  # no owner recorded before v4: it cannot be judged, so it stays
        with store._tx("test") as c:
            c.execute("UPDATE runs SET status = 'abandoned' WHERE id = ?", (run.id,))  # the check allows it now
        with pytest.raises(Exception):
            with store._tx("test") as c:
                c.execute("UPDATE runs SET status = 'bogus' WHERE id = ?", (run.id,))
        assert store.power_samples(run.id) == []  # the samples table still answers


# --- case 6: the state dir is not trusted outright ------------------------------------------------
def test_case6_a_crafted_journal_runs_nothing_and_deletes_nothing(
    twin_tree: Path, tmp_path: Path, isolated_env, capsys
) -> None:
    dev = VirtualOrin("agx-orin-64gb", root=twin_tree)
    try:
        settings = dev.device().read_settings()
    finally:
        dev.close()
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    evil = tmp_path / "evil.sh"
    evil.write_text(f"#!/bin/sh\ntouch {tmp_path}/ran\nrm -f \"$2\"\n")
    evil.chmod(0o755)
    journals = isolated_env.state_dir / "journals"
    journals.mkdir(parents=True, mode=0o700)
    description = {"kind": "jetson", "root": str(twin_tree), "nvpmodel_cmd": str(evil),
                   "jetson_clocks_cmd": str(evil)}
    path = journals / f"{device_key(description)}-{PINNED}.json"
    data = Journal(PINNED, 1, None, "h", 1.0, description, settings, path, jetson_clocks_store=str(victim)).to_json()
    path.write_text(json.dumps(data))
    path.chmod(0o600)
    assert main(["restore"]) == 0  # the settings are restored; the tool paths and the store are not used
    assert victim.read_text() == "precious\n" and not (tmp_path / "ran").exists()

    for mode, owner in ((0o666, None), (0o600, 65534)):  # writable by others; written by another uid
        path.write_text(json.dumps(data))
        path.chmod(mode)
        if owner is not None:
            os.chown(path, owner, owner)
        assert main(["restore"]) == 1
        err = capsys.readouterr().err
        assert "not trusted" in err and str(path) in err and "What to do" in err
        assert path.exists()  # not ours: kept for the person to look at
        path.unlink()
    assert victim.exists() and not (tmp_path / "ran").exists()


def test_case6_a_handed_root_is_never_executed(r36_tree, tmp_path: Path, isolated_env, capsys) -> None:
    root, _lay = r36_tree
    for rel in ("usr/sbin/nvpmodel", "usr/bin/jetson_clocks"):
        tool = root / rel
        tool.parent.mkdir(parents=True, exist_ok=True)
        tool.write_text(f"#!/bin/sh\ntouch {tmp_path}/ran\necho 'NV Power Mode: MAXN'\necho 0\n")
        tool.chmod(0o755)
    assert main(["device", "--sysfs-root", str(root)]) == 0
    assert main(["pin", "--sysfs-root", str(root), "--gpu", "306"]) in (0, 2)
    capsys.readouterr()
    main(["restore"])
    assert not (tmp_path / "ran").exists()


# --- case 9: containers, and a left pin -----------------------------------------------------------
def test_case9_device_in_a_container(r36_tree, isolated_env, capsys) -> None:
    from engine.core.errors import DeviceError
    from engine.device.jetson import JetsonDevice
    from engine.device.setting import DvfsSetting, check_setting

    root, _lay = r36_tree
    (root / "etc/nvpmodel.conf").unlink()  # every L4T container
    before = _files(root)
    assert main(["device", "--sysfs-root", str(root)]) == 0
    out = capsys.readouterr().out
    assert "power mode: unknown (no nvpmodel.conf - a container?)" in out and "GPU" in out
    assert main(["device", "--sysfs-root", str(root), "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["nvpmodel_conf"] is False and rep["clocks"]["gpu"]["table_hz"]
    dev = JetsonDevice(root)
    with pytest.raises(DeviceError) as err:
        check_setting(dev, DvfsSetting(nvpmodel=2))  # mode:2
    assert "no nvpmodel conf" in str(err.value) and "container" in str(err.value) and "mode:N" in err.value.remedy
    assert check_setting(dev, DvfsSetting(gpu_hz=612_000_000)) is None  # pinned clocks still work
    assert _files(root) == before


def test_case9_a_left_pin_is_mentioned_and_a_run_over_it_refused(isolated_env, tmp_path: Path, capsys) -> None:
    root = isolated_env.state_dir / "twin" / "agx-orin-64gb"
    assert main(["pin", "--twin", "--gpu", "816"]) == 0
    capsys.readouterr()
    assert main(["device", "--twin"]) == 0
    assert "left pinned by `slm-dvfs pin`" in capsys.readouterr().err
    assert main(["monitor", "--twin", "--seconds", "0.2", "--json"]) == 0
    assert "left pinned" in capsys.readouterr().err
    db = tmp_path / "db.sqlite"
    run = ["run", "--twin", "--model", "bert-tiny", "--task", "sst2", "--batch-size", "8", "--max-seq-len", "32",
           "--simulate", "--steps", "3", "--policy", "static:gpu=612", "--db", str(db)]
    assert main(run) == 2
    err = capsys.readouterr().err
    assert "pinned by `slm-dvfs pin`" in err and "slm-dvfs restore" in err
    assert _gpu_max(root) == "816000000"  # the pin stands: not silently overridden
    assert main(["runs", "--db", str(db)]) == 0
    assert "left pinned" in capsys.readouterr().err
    assert main(["restore"]) == 0
    assert main(run) == 0
    capsys.readouterr()
    assert list_journals() == [] and _gpu_max(root) != "612000000"


def test_case9_a_dead_runs_clocks_are_recovered_by_device(twin_tree: Path, isolated_env, capsys) -> None:
    before = _files(twin_tree)
    holder = _holder(twin_tree, 612, isolated_env.state_dir)
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=10)
    assert main(["device", "--sysfs-root", str(twin_tree)]) == 0
    assert "did not exit cleanly" in capsys.readouterr().err
    assert _files(twin_tree) == before and list_journals() == []


def test_journal_is_written_private_and_atomically(twin_tree: Path, isolated_env) -> None:
    dev = VirtualOrin("agx-orin-64gb", root=twin_tree)
    dev.start(tick_s=0.01, realtime=False)
    try:
        with ClockGuard(dev.device(), handle_signals=False):
            [j] = list_journals()
            st = j.path.stat()
            assert j.kind == SESSION and st.st_uid == os.geteuid() and st.st_mode & 0o077 == 0
            text = j.path.read_text()
            assert j.session_lock and "_cmd" not in text and "usr/sbin" not in text  # no command to run
            assert not list(j.path.parent.glob("*.tmp"))
    finally:
        dev.close()


def test_a_guard_names_its_runs_and_a_loose_journal_folder_is_tightened(twin_tree: Path, isolated_env) -> None:
    orin = VirtualOrin("agx-orin-64gb", root=twin_tree)
    orin.start(tick_s=0.01, realtime=False)
    try:
        with ClockGuard(orin.device(), handle_signals=False) as guard:
            guard.note_run(7)
            guard.note_run(3)
            [j] = list_journals()
            assert j.runs == (3, 7)  # a recovery can tell which runs it ended
            j.path.parent.chmod(0o775)  # a umask of 002
            [j] = list_journals()
            assert j.path.parent.stat().st_mode & 0o077 == 0
    finally:
        orin.close()


def test_case5_restore_marks_the_runs_a_dead_sessions_journal_names(twin_tree: Path, isolated_env, capsys) -> None:
    from engine.core.provenance import Source
    from engine.results.store.db import default_db_path
    from engine.results.store import Store

    with Store(default_db_path()) as store:
        run_id = store.start_run(policy="static", source=Source.TWIN, steps=10)  # no owner lock: only the journal knows
    holder = _holder(twin_tree, 612, isolated_env.state_dir)
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=10)
    [journal] = list_journals()
    data = json.loads(journal.path.read_text())
    data["runs"] = [run_id]
    journal.path.write_text(json.dumps(data))
    assert main(["restore"]) == 0
    assert f"marked run {run_id} abandoned" in capsys.readouterr().out
    with Store(default_db_path()) as store:
        assert store.get_run(run_id).status == "abandoned"
