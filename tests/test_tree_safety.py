"""The board's tree, the board lock and the state dir (issue 20, h4), on generated trees and real
second users: links in a tree never lead out of it, root refuses a twin folder someone else could
change, the lock and the pin marker key on the board whatever path or state dir reaches it, tree
files are replaced atomically where the tree is ours, a FIFO or a full disk is a clear error, stale
temporary journals are cleaned or reported, and `restore` takes the board like every device command."""

from __future__ import annotations

import fcntl
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import textwrap
import traceback
from pathlib import Path
from typing import Callable, Iterator

import pytest

from engine.cli import main
from engine.device.guard.guard import list_journals
from engine.device.guard.journal import PINNED
from engine.device.treegen import default_orin_spec, render_tree
from engine.device.twin.orin import VirtualOrin

ROOT = Path(__file__).resolve().parents[1]
# A generated tree has no twin behind it: its cur_freq stays at the lowest step, so a pin there is
# one the "hardware" follows only at that step.
STATIC_MHZ, STATIC_HZ = "306", "306000000"
GPU_DEVFREQ = "sys/devices/platform/bus@0/17000000.gpu/devfreq/17000000.gpu"
CONTROLS = [f"{GPU_DEVFREQ}/min_freq", f"{GPU_DEVFREQ}/max_freq", f"{GPU_DEVFREQ}/governor",
            "sys/devices/system/cpu/cpufreq/policy0/scaling_min_freq",
            "sys/devices/system/cpu/cpufreq/policy0/scaling_max_freq"]

pytestmark = pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                                reason="these tests add a user, chown files and mount folders: run them as root")


def _files(root: Path) -> dict[str, str]:
    return {n: (root / n).read_text() for n in CONTROLS}


def _gpu_max(root: Path) -> str:
    return (root / GPU_DEVFREQ / "max_freq").read_text().strip()


@pytest.fixture(scope="module")
def user() -> Iterator[pwd.struct_passwd]:
    """A real second user (no home), removed afterwards."""
    name = f"slmtree{os.getpid() % 100000}"
    made = subprocess.run(["useradd", "-M", "-N", name], capture_output=True, text=True, timeout=60)
    if made.returncode != 0:
        pytest.skip(f"the OS refused `useradd {name}`: {made.stderr.strip()}")
    try:
        yield pwd.getpwnam(name)
    finally:
        subprocess.run(["userdel", name], capture_output=True, timeout=60)


@pytest.fixture
def base() -> Iterator[Path]:
    """A root-owned folder the second user can reach (pytest's own tmp is root-only)."""
    path = Path(tempfile.mkdtemp(prefix="slm-tree-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def as_user(user: pwd.struct_passwd, action: Callable[[], object]) -> str:
    """Run `action` in a child process with the user's uid and gid (forked: the interpreter is
    under /root, which the user could not start); what it returns comes back as a string."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            os.close(read_end)
            os.setgroups([])
            os.setgid(user.pw_gid)
            os.setuid(user.pw_uid)
            os.write(write_end, str(action() or "").encode())
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as fh:
        said = fh.read().decode()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the user's action failed (see the captured stderr)"
    return said


def _user_folder(path: Path, user: pwd.struct_passwd) -> Path:
    path.mkdir()
    os.chown(path, user.pw_uid, user.pw_gid)
    return path


# --- item 1: links in a tree, a twin folder someone else owns ----------------------------------------
def test_root_refuses_a_twin_folder_a_user_made_and_never_copies_through_its_links(
    user: pwd.struct_passwd, base: Path, isolated_env, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    secret = base / "secret"
    secret.write_text("root-only-secret\n")
    secret.chmod(0o600)
    state = _user_folder(base / "user-state", user)
    twin = state / "twin" / "agx-orin-64gb"
    governor = twin / GPU_DEVFREQ / "governor"

    def plant() -> None:  # the user's twin, its governor a link to a file only root may read
        VirtualOrin("agx-orin-64gb", root=twin).close()
        governor.unlink()
        governor.symlink_to(secret)

    as_user(user, plant)
    monkeypatch.setenv("SLM_DVFS_STATE_DIR", str(state))  # `sudo -E` with the user's state dir
    monkeypatch.setenv("SLM_DVFS_TWIN_DIR", str(state / "twin"))  # and the user's twins' folder
    assert main(["device", "--twin"]) == 2
    err = capsys.readouterr().err
    assert f"owned by uid {user.pw_uid}" in err and "What to do" in err and "mktemp" in err
    assert governor.is_symlink() and secret.read_text() == "root-only-secret\n"
    leaked = [p for p in twin.rglob("*") if p.is_file() and not p.is_symlink() and "root-only-secret" in p.read_text()]
    assert leaked == []


def test_root_refuses_a_twin_under_a_folder_a_user_owns(user: pwd.struct_passwd, base: Path, isolated_env,
                                                         monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    state = _user_folder(base / "pre-made", user)  # a fixed /tmp path a user made first
    monkeypatch.setenv("SLM_DVFS_STATE_DIR", str(state))
    monkeypatch.setenv("SLM_DVFS_TWIN_DIR", str(state / "twin"))
    assert main(["pin", "--twin", "--gpu", "612"]) == 2
    err = capsys.readouterr().err
    assert f"{state}, above it, is owned by uid {user.pw_uid}" in err
    assert list(state.iterdir()) == []  # nothing made in it, nothing pinned


def test_root_never_reads_or_writes_through_a_users_link_out_of_a_tree(
    user: pwd.struct_passwd, base: Path, isolated_env, capsys
) -> None:
    secret = base / "secret"
    secret.write_text("root-only-secret\n")
    secret.chmod(0o600)
    config = base / "root.conf"  # a root-owned file outside the tree
    config.write_text("keep me\n")
    tree = _user_folder(base / "user-tree", user)

    def plant() -> None:
        render_tree(tree, default_orin_spec("r36"))
        (tree / GPU_DEVFREQ / "governor").unlink()
        (tree / GPU_DEVFREQ / "governor").symlink_to(secret)  # absolute
        (tree / GPU_DEVFREQ / "max_freq").unlink()
        depth = len(Path(GPU_DEVFREQ).parts) + 1
        (tree / GPU_DEVFREQ / "max_freq").symlink_to("../" * depth + "root.conf")  # relative, `..` above the tree

    as_user(user, plant)
    assert main(["device", "--sysfs-root", str(tree), "--json"]) == 0
    out = capsys.readouterr().out
    gpu = json.loads(out)["clocks"]["gpu"]
    assert "root-only-secret" not in out and "out of the device tree" in gpu["error"]
    assert main(["pin", "--sysfs-root", str(tree), "--gpu", "612"]) == 2
    err = capsys.readouterr().err
    assert "out of the device tree" in err and "What to do" in err
    assert config.read_text() == "keep me\n" and secret.read_text() == "root-only-secret\n"
    assert list_journals() == []


def test_links_inside_a_tree_are_followed_and_dot_dot_out_of_it_is_not(r36_tree) -> None:
    from engine.device.sysfs import SysfsTree, UnsafeTreeError

    root, lay = r36_tree
    tree = SysfsTree(root)
    # treegen's own links (the devfreq class, cpuN/cpufreq, nvpmodel.conf), as on a board
    assert tree.read_int("sys/class/devfreq/17000000.gpu/max_freq") == 1300500000
    assert tree.read_str("sys/devices/system/cpu/cpu5/cpufreq/scaling_governor") == "schedutil"
    assert "POWER_MODEL" in tree.read_str("etc/nvpmodel.conf")
    (root / "var" / "inside").symlink_to("../" + lay.nvpmodel_status)  # relative, inside the tree
    assert tree.read_str("var/inside").startswith("pmode:")
    (root / "var" / "outside").symlink_to("../../outside")
    (root.parent / "outside").write_text("elsewhere\n")
    with pytest.raises(UnsafeTreeError, match="out of the device tree"):
        tree.read_str("var/outside")
    with pytest.raises(UnsafeTreeError):
        tree.write("var/outside", 1)
    assert (root.parent / "outside").read_text() == "elsewhere\n" and not tree.exists("var/outside")
    (root.parent / "elsewhere").mkdir()
    (root.parent / "elsewhere" / "secret-name").write_text("x")
    (root / "var" / "away").symlink_to(root.parent / "elsewhere")
    assert "var/away" not in tree.glob("var/*") and "var/inside" in tree.glob("var/*")  # nor behind a link out
    assert tree.glob("var/away/*") == []


def test_a_tree_whose_marker_is_not_ours_is_said_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from engine.device.treefs import own_tree

    root = tmp_path / "tree"
    root.mkdir()
    (root / ".slm-dvfs-twin").write_text("profile = 'agx-orin-64gb'\n")
    os.chmod(root / ".slm-dvfs-twin", 0o666)  # writable by others: not a marker to trust
    with caplog.at_level("WARNING"):
        assert not any(own_tree(root) for _ in range(5))
    assert sum("ignoring" in r.getMessage() for r in caplog.records) == 1


def test_restore_of_a_root_that_is_not_there_says_so(tmp_path: Path, isolated_env, capsys) -> None:
    assert main(["restore", "--sysfs-root", str(tmp_path / "no-such-tree")]) == 2
    err = capsys.readouterr().err
    assert ": no such folder" in err and "nothing to restore" not in err


# --- item 3: atomic writes where the tree is ours; in place elsewhere -------------------------------
_SIGNALLED = textwrap.dedent(
    """
    import os, signal, sys
    from engine.cli import main
    from engine.device.guard import guard

    # SIGTERM lands while the GPU's max_freq is being written under an active guard (the pin's first
    # write there): the guard's handler restores, reading that file, before the write goes on.
    armed = [True]
    started = []  # guards that have taken their snapshot (no registry holds them: we watch start())
    _start = guard.ClockGuard.start

    def start(self):
        _start(self)
        started.append(self)

    guard.ClockGuard.start = start

    def writing_max_freq(frame):
        while frame is not None:
            if (frame.f_code.co_name == "write" and frame.f_code.co_filename.endswith("sysfs.py")
                    and str(frame.f_locals.get("rel", "")).endswith("/max_freq")):
                return True
            frame = frame.f_back
        return False

    def hook(frame, event, arg):
        if (armed[0] and event == "c_call" and getattr(arg, "__name__", "") == "write" and started
                and writing_max_freq(frame)):
            armed[0] = False
            signal.raise_signal(signal.SIGTERM)

    sys.setprofile(hook)
    sys.exit(main(sys.argv[1:]))
    """
)


@pytest.mark.parametrize("board", ["test tree", "twin"])
def test_a_signal_during_a_write_leaves_the_tree_restorable(board: str, r36_tree, fake_tools, isolated_env,
                                                            capsys) -> None:
    if board == "twin":
        root = isolated_env.state_dir / "twin" / "agx-orin-64gb"
        VirtualOrin("agx-orin-64gb", root=root).close()
        where = ["--twin"]
    else:
        root, _lay = r36_tree
        fake_tools(root)
        where = ["--sysfs-root", str(root)]
    before = _files(root)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", _SIGNALLED, "pin", *where, "--gpu", "612"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 128 + 15, proc.stderr  # stopped by the signal, its clocks restored
    assert "restoring clocks failed" not in proc.stderr
    assert _files(root) == before and list_journals() == []
    assert not list(root.rglob(".*.tmp"))  # the write's temp file went with it
    assert main(["restore"]) == 0 and "nothing to restore" in capsys.readouterr().out


def test_our_trees_are_replaced_atomically_and_other_trees_written_in_place(r36_tree, fake_tools, isolated_env,
                                                                            tmp_path: Path) -> None:
    ours, _lay = r36_tree
    fake_tools(ours)
    other = tmp_path / "copy"
    render_tree(other, default_orin_spec("r36"))  # a copy of a board's files: no marker
    for root, replaced in ((ours, True), (other, False)):
        target = root / GPU_DEVFREQ / "max_freq"
        inode = target.stat().st_ino
        assert main(["pin", "--sysfs-root", str(root), "--gpu", STATIC_MHZ]) == 0
        assert _gpu_max(root) == STATIC_HZ and (target.stat().st_ino != inode) is replaced
        assert main(["restore"]) == 0


# --- item 4: a FIFO in a tree, a full state dir, stale temporary journals ----------------------------
_FIFO = textwrap.dedent(
    """
    import contextlib, io, json, sys
    from engine.cli import main
    out = {}
    for name, argv in json.loads(sys.argv[1]).items():
        o, e = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(o), contextlib.redirect_stderr(e):
            rc = main(argv)
        out[name] = [rc, o.getvalue(), e.getvalue()]
    print(json.dumps(out))
    """
)


def test_a_fifo_in_a_tree_is_refused_never_waited_on(r36_tree, fake_tools, isolated_env) -> None:
    tree, _lay = r36_tree
    fake_tools(tree)
    os.unlink(tree / GPU_DEVFREQ / "governor")
    os.mkfifo(tree / GPU_DEVFREQ / "governor")  # nobody writes it: an open for reading would wait forever
    before = {n: (tree / n).read_text() for n in CONTROLS if not n.endswith("governor")}
    twin = isolated_env.state_dir / "twin" / "agx-orin-64gb"
    VirtualOrin("agx-orin-64gb", root=twin).close()
    os.unlink(twin / "sys/kernel/debug/bpmp/debug/clk/emc/rate")
    os.mkfifo(twin / "sys/kernel/debug/bpmp/debug/clk/emc/rate")
    commands = {"device": ["device", "--sysfs-root", str(tree), "--json"],
                "pin": ["pin", "--sysfs-root", str(tree), "--gpu", "612"],
                "twin": ["device", "--twin", "--json"]}
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    # a hang shows up as this timeout (a guard, not a measured threshold)
    proc = subprocess.run([sys.executable, "-c", _FIFO, json.dumps(commands)], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    res = json.loads(proc.stdout)
    rc, out, err = res["device"]
    assert rc == 0 and "is a FIFO" in json.loads(out)["clocks"]["gpu"]["error"]
    rc, out, err = res["pin"]
    assert rc == 2 and "is a FIFO" in err and "What to do" in err
    assert {n: (tree / n).read_text() for n in before} == before and list_journals() == []
    rc, out, err = res["twin"]  # the twin's own tree: the file is rendered again, a regular file
    assert rc == 0 and (twin / "sys/kernel/debug/bpmp/debug/clk/emc/rate").is_file()


@pytest.fixture
def full_state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, isolated_env) -> Iterator[Path]:
    """The state dir on a tmpfs that is full."""
    mnt = tmp_path / "full"
    mnt.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,mode=0700", "tmpfs", str(mnt)],
                          capture_output=True, text=True, timeout=60)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.strip()}")
    try:
        fd = os.open(mnt / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            with pytest.raises(OSError, match="No space"):
                while True:
                    os.write(fd, b"\0" * 4096)
        finally:
            os.close(fd)
        monkeypatch.setenv("SLM_DVFS_STATE_DIR", str(mnt))
        monkeypatch.setenv("SLM_DVFS_TWIN_DIR", str(mnt / "twin"))
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True, timeout=60)


def test_a_full_state_dir_is_a_clear_error_and_changes_no_clock(full_state_dir: Path, r36_tree, capsys) -> None:
    tree, _lay = r36_tree
    before = _files(tree)
    assert main(["pin", "--sysfs-root", str(tree), "--gpu", "612"]) == 2
    err = capsys.readouterr().err
    assert "ENOSPC" in err and "df " in err and "nothing was changed" in err and "Traceback" not in err
    assert _files(tree) == before  # no clock changed without its journal
    assert main(["pin", "--twin", "--gpu", "612"]) == 2  # the twins' folder is on that disk too
    err = capsys.readouterr().err
    assert "cannot write the twin's tree" in err and "ENOSPC" in err and "What to do" in err


def test_stale_temporary_journals_are_cleaned_when_ours_and_dead_and_reported_otherwise(
    user: pwd.struct_passwd, isolated_env, capsys, caplog: pytest.LogCaptureFixture
) -> None:
    journals = isolated_env.state_dir / "journals"
    journals.mkdir(parents=True, mode=0o700)
    dead = journals / ".0123abcd-session-41-7.json.41.9.tmp"  # its writer was killed before the rename
    dead.write_text('{"version": 2, "ki')
    live = journals / ".0123abcd-session-42-7.json.42.9.tmp"  # being written now: its writer holds it
    live.write_text("{")
    foreign = journals / ".0123abcd-session-43-7.json.43.9.tmp"
    foreign.write_text("{}")
    os.chown(foreign, user.pw_uid, user.pw_gid)
    fd = os.open(live, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        assert main(["restore"]) == 1
        out = capsys.readouterr()
        assert not dead.exists() and live.exists() and foreign.exists()
        assert str(foreign) in out.err and f"owned by uid {user.pw_uid}" in out.err and "What to do" in out.err
        caplog.clear()
        assert main(["device", "--twin"]) == 0  # `device` reports it too (a warning line, as other journals')
        assert any(str(foreign) in r.getMessage() and "did not write" in r.getMessage() for r in caplog.records)
    finally:
        os.close(fd)


# --- item 2: the lock and the pin key on the board -------------------------------------------------
@pytest.fixture
def bind_mount(tmp_path: Path) -> Iterator[Callable[[Path], Path]]:
    """`mount --bind` a tree at a second path (unmounted afterwards)."""
    made: list[Path] = []

    def mount(src: Path) -> Path:
        dst = tmp_path / f"bind-{len(made)}"
        dst.mkdir()
        result = subprocess.run(["mount", "--bind", str(src), str(dst)], capture_output=True, text=True, timeout=60)
        if result.returncode != 0:
            pytest.skip(f"cannot bind-mount here: {result.stderr.strip()}")
        made.append(dst)
        return dst

    yield mount
    for dst in reversed(made):
        subprocess.run(["umount", "-l", str(dst)], capture_output=True, timeout=60)


_HOLDER = textwrap.dedent(
    """
    import sys, time
    from engine.device.base import ClockDomain
    from engine.device.jetson import JetsonDevice
    from engine.device.guard.guard import ClockGuard

    dev = JetsonDevice(sys.argv[1])
    with ClockGuard(dev):
        dev.pin(ClockDomain.GPU, 306000000)
        print("pinned", flush=True)
        time.sleep(60)
    """
)


def test_a_bind_mount_of_a_tree_meets_the_same_board_lock(r36_tree, fake_tools, bind_mount, isolated_env,
                                                           tmp_path: Path, capsys) -> None:
    tree, _lay = r36_tree
    fake_tools(tree)
    before = _files(tree)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SLM_DVFS_STATE_DIR": str(tmp_path / "other-state")}
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(tree)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "pinned"
        assert main(["pin", "--sysfs-root", str(bind_mount(tree)), "--gpu", "816"]) == 2
        err = capsys.readouterr().err
        assert f"pid {holder.pid}" in err and "What to do" in err
        assert _gpu_max(tree) == STATIC_HZ and list_journals() == []
    finally:
        holder.terminate()
        holder.wait(timeout=30)
    assert _files(tree) == before


@pytest.mark.parametrize("path", ["symlink", "bind mount"])
def test_a_pin_from_another_state_dir_is_refused_whatever_path_reaches_the_board(
    path: str, r36_tree, fake_tools, bind_mount, isolated_env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys
) -> None:
    tree, _lay = r36_tree
    fake_tools(tree)
    before = _files(tree)
    if path == "symlink":
        other = tmp_path / "linked"
        other.symlink_to(tree)
    else:
        other = bind_mount(tree)
    assert main(["pin", "--sysfs-root", str(tree), "--gpu", STATIC_MHZ]) == 0
    capsys.readouterr()
    monkeypatch.setenv("SLM_DVFS_STATE_DIR", str(tmp_path / "state-b"))  # `sudo` vs `sudo -E`
    assert main(["pin", "--sysfs-root", str(other), "--gpu", "612"]) == 2
    err = capsys.readouterr().err
    assert "from another state dir" in err and str(isolated_env.state_dir) in err and "restore" in err
    assert _gpu_max(tree) == STATIC_HZ and list_journals() == []
    assert main(["restore", "--sysfs-root", str(other)]) == 1  # not "nothing to restore" over a pinned board
    err = capsys.readouterr().err
    assert "from another state dir" in err and f"SLM_DVFS_STATE_DIR={isolated_env.state_dir}" in err
    monkeypatch.setenv("SLM_DVFS_STATE_DIR", str(isolated_env.state_dir))
    assert main(["restore", "--sysfs-root", str(other)]) == 0
    assert _files(tree) == before


# --- item 5: restore takes the board ---------------------------------------------------------------
def test_restore_takes_sysfs_root_or_twin_and_restores_that_board_only(r36_tree, fake_tools, isolated_env,
                                                                         capsys) -> None:
    tree, _lay = r36_tree
    fake_tools(tree)
    twin = isolated_env.state_dir / "twin" / "agx-orin-64gb"
    VirtualOrin("agx-orin-64gb", root=twin).close()
    before_tree, before_twin = _files(tree), _files(twin)
    assert main(["pin", "--sysfs-root", str(tree), "--gpu", STATIC_MHZ]) == 0
    assert main(["pin", "--twin", "--gpu", "816"]) == 0
    capsys.readouterr()
    assert main(["restore", "--sysfs-root", str(tree)]) == 0
    out = capsys.readouterr().out
    assert f"for {tree.resolve()}" in out and str(twin) not in out
    assert _files(tree) == before_tree and _gpu_max(twin) == "816000000"  # the twin's pin stands
    assert [j.kind for j in list_journals()] == [PINNED]
    assert main(["restore", "--sysfs-root", str(tree)]) == 0
    assert f"nothing to restore for {tree}" in capsys.readouterr().out
    assert main(["restore", "--twin"]) == 0
    assert _files(twin) == before_twin and list_journals() == []


# --- item 6: docs/security.md's recipe, as written ----------------------------------------------------
def _try_the_service_recipe() -> list[str]:
    text = (ROOT / "docs" / "security.md").read_text()
    block = text.split("To try the service without a board", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.strip() and not line.lstrip().startswith("#")]


@pytest.mark.slow
def test_the_try_the_service_recipe_runs_as_written(user: pwd.struct_passwd, base: Path, isolated_env,
                                                    tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import contextlib
    import grp
    import io
    import shlex
    import signal

    start, serve, look, clean = _try_the_service_recipe()
    bin_dir = tmp_path / "bin"  # `slm-dvfs` as installed; `sudo` as root has it; `id -gn` as the user sees it
    bin_dir.mkdir()
    (bin_dir / "slm-dvfs").write_text(f'#!/bin/sh\nPYTHONPATH={ROOT} exec {sys.executable} -m engine "$@"\n')
    (bin_dir / "slm-dvfs").chmod(0o755)
    group = grp.getgrgid(user.pw_gid).gr_name
    prelude = f'sudo() {{ env "$@"; }}\nid() {{ echo {shlex.quote(group)}; }}\nexport PATH={bin_dir}:$PATH\n'
    made = subprocess.run(["bash", "-c", prelude + start], capture_output=True, text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    folder = made.stdout.strip()
    env = {**os.environ, "D": folder}
    daemon = subprocess.Popen(["bash", "-c", prelude + serve], env=env, stderr=subprocess.PIPE, text=True,
                              start_new_session=True)
    try:
        assert daemon.stderr is not None
        for line in daemon.stderr:
            if line.startswith("slm-dvfs clockd: serving"):
                break
        else:
            pytest.fail(f"the service did not start (exit {daemon.wait()})")
        words = shlex.split(look.replace("$D", folder))
        assignments = dict(w.split("=", 1) for w in words[:words.index("slm-dvfs")])
        argv = words[words.index("slm-dvfs") + 1:]
        for name, value in assignments.items():
            monkeypatch.setenv(name, value)
        assert main(argv) == 0  # as root first: every module the command needs is imported before the fork
        home = _user_folder(base / "home", user)

        def look_as_user() -> str:
            os.environ.update(SLM_DVFS_STATE_DIR=str(home / "state"), HOME=str(home))
            out, err = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                rc = main(argv)
            return json.dumps([rc, out.getvalue(), err.getvalue()])

        rc, out, err = json.loads(as_user(user, look_as_user))
        assert rc == 0, err
        assert "digital twin (agx-orin-64gb)" in out and "GPU" in out
    finally:
        if daemon.poll() is None:
            os.killpg(daemon.pid, signal.SIGINT)  # Ctrl-C in its terminal
        assert daemon.wait(timeout=60) == 0
    cleaned = subprocess.run(["bash", "-c", prelude + clean], env=env, capture_output=True, text=True, timeout=60)
    assert cleaned.returncode == 0 and not Path(folder).exists()
