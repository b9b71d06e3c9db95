"""The clock service end to end: a real root daemon on a Unix socket, real second users.

The daemon runs as a subprocess (root) serving the AGX Orin twin's tree, whose model keeps the
current-frequency files following what is written. Clients run as a second uid in the service's
group (and a third outside it): a child that imports what it needs as root and then drops to
that uid (the interpreter lives under /root, which the uid could not exec from).
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import pytest

from engine.core.errors import DeviceError
from engine.device.base import ClockDomain
from engine.device.jetson import JetsonDevice

REPO = Path(__file__).resolve().parents[1]
GPU_PIN = 612000000
TWIN = "agx-orin-64gb"

pytestmark = pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                                reason="the clock service tests start a root daemon and add users: run them as root")


@dataclass(frozen=True)
class Users:
    group: str
    gid: int
    member: pwd.struct_passwd  # in the group
    outsider: pwd.struct_passwd  # not in it


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def users() -> Iterator[Users]:
    """A group like `slm-dvfs` and two real users, one in it; removed afterwards."""
    tag = os.getpid() % 100000
    group, member, outsider = f"slm-dvfs-test{tag}", f"slmclk{tag}", f"slmout{tag}"
    made: list[tuple[str, ...]] = []
    try:
        for argv, undo in ((("groupadd", group), ("groupdel", group)),
                           (("useradd", "-M", "-N", "-G", group, member), ("userdel", member)),
                           (("useradd", "-M", "-N", outsider), ("userdel", outsider))):
            result = _run(*argv)
            if result.returncode != 0:
                pytest.skip(f"the OS refused `{' '.join(argv)}`: {result.stderr.strip()}")
            made.append(undo)
        import grp

        yield Users(group, grp.getgrnam(group).gr_gid, pwd.getpwnam(member), pwd.getpwnam(outsider))
    finally:
        for undo in reversed(made):
            _run(*undo)


@dataclass
class Daemon:
    proc: subprocess.Popen[str]
    socket: Path
    root: Path  # the twin's tree the daemon serves
    base: Path
    log: list[str]  # what it wrote to stderr (read all along: a full pipe would stall it)

    def gpu(self) -> tuple[int, int, str | None]:
        state = JetsonDevice(self.root).clock(ClockDomain.GPU)
        return state.min_hz, state.max_hz, state.governor

    def fds(self) -> int:
        """The descriptors the daemon has open."""
        return len(os.listdir(f"/proc/{self.proc.pid}/fd"))


def _start_daemon(users: Users, base: Path, *extra: str) -> Daemon:
    sock = base / "clockd.sock"
    env = {**os.environ, "PYTHONPATH": str(REPO), "SLM_DVFS_STATE_DIR": str(base / "root-home"),
           "SLM_DVFS_TWIN_DIR": str(base / "root-home" / "twin")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "engine", "clockd", "--twin", TWIN, "--socket", str(sock),
         "--state-dir", str(base / "clockd-state"), "--group", users.group, *extra],
        env=env, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    log: list[str] = []
    for line in proc.stderr:  # wait for it to say it serves (or die)
        log.append(line)
        if line.startswith("slm-dvfs clockd: serving"):
            break
    else:
        pytest.fail(f"the clock service did not start (exit {proc.wait()}): {''.join(log)}")
    threading.Thread(target=lambda: log.extend(proc.stderr or ()), daemon=True).start()
    return Daemon(proc, sock, base / "root-home" / "twin" / TWIN, base, log)


def _stop_daemon(daemon: Daemon) -> int:
    daemon.proc.send_signal(signal.SIGTERM)
    try:
        return daemon.proc.wait(timeout=30)
    finally:
        if daemon.proc.poll() is None:
            daemon.proc.kill()


@pytest.fixture(scope="module")
def base() -> Iterator[Path]:
    """A folder every test user can traverse (pytest's own tmp is root-only)."""
    path = Path(tempfile.mkdtemp(prefix="slm-clockd-"))
    path.chmod(0o755)
    yield path
    subprocess.run(["rm", "-rf", str(path)], check=False)


@pytest.fixture(scope="module")
def daemon(users: Users, base: Path) -> Iterator[Daemon]:
    d = _start_daemon(users, base / "main")
    yield d
    assert _stop_daemon(d) == 0


# A client as another uid: import everything as root, then drop to the uid given.
CHILD = textwrap.dedent('''
    import os, sys, json
    from engine.core.errors import DeviceError
    from engine.device.base import ClockDomain
    from engine.device.clockd.client import ClockdClient, ServiceDevice
    from engine.device.guard.guard import ClockGuard
    from engine.device.session import open_device
    import engine.device.jetson, engine.device.jetson.discovery, engine.device.jetson.settings
    import engine.device.jetson.writes, engine.device.jetson.identity
    import engine.device.nvpmodel, engine.device.setting, engine.device.power
    import engine.cli, engine.selector, engine.selector.persistence, engine.core.text
    engine.cli.build_parser()  # the command modules, imported before the uid drops (the stdlib may be root's)
    uid, gid, groups, sock, root, what = sys.argv[1:7]
    os.setgroups([int(g) for g in groups.split(",") if g])
    os.setgid(int(gid))
    os.setuid(int(uid))
    os.environ["SLM_DVFS_CLOCKD_SOCKET"] = sock
    def say(*words):
        print(*words, flush=True)
    def wait():
        return sys.stdin.readline().strip()
    try:
        if what == "pin-wait":
            client = ClockdClient()
            say("pinned", client.pin(ClockDomain.GPU, 612000000).cur_hz)
            if wait() == "restore":
                say("restored", client.restore())
        elif what == "guard":
            with open_device(sysfs_root=root) as session:
                device = session.device
                say("device", type(device).__name__)
                try:
                    open(device.tree.path(device.nodes.require_gpu() + "/max_freq"), "w").write("1")
                except PermissionError:
                    say("direct write refused")
                with ClockGuard(device):
                    say("pinned", device.pin(ClockDomain.GPU, 612000000).max_hz)
                    wait()
            say("guard done")
        elif what == "noservice":
            with open_device(sysfs_root=root) as session:
                say("clock", session.device.clock(ClockDomain.GPU).max_hz)  # reads need no service
                session.device.pin(ClockDomain.GPU, 612000000)
        elif what == "emc":
            with open_device(sysfs_root=root) as session:
                device = session.device
                say("emc", device.clock(ClockDomain.EMC).cur_hz, len(device.clock_table(ClockDomain.EMC)))
        elif what == "direct":
            os.environ["SLM_DVFS_CLOCKD"] = "off"
            with open_device(sysfs_root=root) as session:
                say("device", type(session.device).__name__)
                session.device.pin(ClockDomain.GPU, 612000000)
        elif what == "pin-cmd":
            say("rc", engine.cli.main(["pin", "--sysfs-root", root, "--gpu", "612"]))
        elif what == "hello":
            say("hello", ClockdClient().hello()["client"])
        elif what == "raw":  # connections of this uid, driven by commands on stdin (see `Conns`)
            import socket
            conns = {}
            for command in sys.stdin:
                c = json.loads(command)
                k, failed = c["conn"], None
                try:
                    if c.get("open"):
                        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                        s.settimeout(60)
                        s.connect(sock)
                        conns[k] = (s, s.makefile("rb"))
                    if c.get("send"):
                        try:
                            conns[k][0].sendall(bytes.fromhex(c["send"]))
                        except OSError as exc:  # it may have refused us and closed: its reply says why
                            failed = exc
                    if c.get("read"):
                        line = conns[k][1].readline()
                        say("reply", line.decode().strip()) if line else say("eof")
                    elif failed is not None:
                        raise failed
                    else:
                        say("ok")
                    if c.get("close"):
                        conns.pop(k)[0].close()
                except OSError as exc:
                    say("oserror", type(exc).__name__)
        elif what == "session-close":  # sessions opened and closed, still referenced (as a TUI keeps them)
            kept = []
            for _ in range(int(wait())):
                with open_device(sysfs_root=root) as session:
                    assert session.device.client is not None  # writes through the service: a connection
                kept.append(session)
            say("closed", len(kept))
            wait()
    except DeviceError as exc:
        say("ERROR", json.dumps({"what": exc.what, "remedy": exc.remedy}))
''')


@contextlib.contextmanager
def client(daemon: Daemon, user: pwd.struct_passwd, what: str, groups: list[int]) -> Iterator[subprocess.Popen[str]]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "SLM_DVFS_STATE_DIR": str(daemon.base / f"home-{user.pw_name}")}
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(user.pw_uid), str(user.pw_gid), ",".join(map(str, groups)),
         str(daemon.socket), str(daemon.root), what],
        env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)


def _line(proc: subprocess.Popen[str]) -> str:
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if not line:
        pytest.fail(f"client said nothing; stderr: {proc.stderr.read() if proc.stderr else ''}")
    return line


def _error(line: str) -> dict[str, str]:
    assert line.startswith("ERROR "), line
    return json.loads(line[len("ERROR "):])


def _settled(read: Callable[[], int], quiet_s: float = 0.3, timeout_s: float = 20.0) -> int:
    """A count once it has not changed for `quiet_s` (a closed connection's descriptor goes a moment later)."""
    value, since, deadline = read(), time.monotonic(), time.monotonic() + timeout_s
    while time.monotonic() - since < quiet_s and time.monotonic() < deadline:
        time.sleep(0.05)
        if (now := read()) != value:
            value, since = now, time.monotonic()
    return value


def _until(check, what: str, timeout_s: float = 20.0) -> None:  # type: ignore[no-untyped-def]
    """Poll `check` (a read racing the service's write of a plain file may see it empty: not yet)."""
    def ready() -> bool:
        try:
            return bool(check())
        except DeviceError:
            return False

    deadline = time.monotonic() + timeout_s
    while not ready():
        if time.monotonic() > deadline:
            pytest.fail(f"never happened: {what}")
        time.sleep(0.05)


class Raw:
    """A root client speaking raw lines, to send what no well-behaved client would."""

    def __init__(self, path: Path) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(30)
        self.sock.connect(str(path))
        self.reader = self.sock.makefile("rb")

    def ask(self, raw: bytes) -> dict[str, object]:
        self.sock.sendall(raw)
        line = self.reader.readline()
        return json.loads(line) if line else {}

    def close(self) -> None:
        self.reader.close()
        self.sock.close()


class Conns:
    """Connections of a real client uid sending raw lines (the CHILD's `raw` mode): what a
    misbehaving member could send, through the kernel's own credentials check."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc

    def _do(self, **command: object) -> str:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()
        return _line(self.proc)

    @staticmethod
    def _reply(said: str) -> dict[str, object] | None:
        """A reply, or None where the service closed the connection (a reset: it closed with
        some of our bytes unread)."""
        if said in ("eof", "oserror ConnectionResetError"):
            return None
        assert said.startswith("reply "), said
        return json.loads(said[len("reply "):])

    def open(self, k: int, first: bytes | None = None) -> dict[str, object] | None | str:
        """Connect; with `first`, send it at once and give the reply."""
        if first is None:
            return self._do(conn=k, open=True)
        return self._reply(self._do(conn=k, open=True, send=first.hex(), read=True))

    def ask(self, k: int, raw: bytes) -> dict[str, object] | None:
        return self._reply(self._do(conn=k, send=raw.hex(), read=True))

    def send(self, k: int, raw: bytes) -> str:
        return self._do(conn=k, send=raw.hex())

    def read(self, k: int) -> dict[str, object] | None:
        return self._reply(self._do(conn=k, read=True))

    def close(self, k: int) -> str:
        return self._do(conn=k, close=True)


@contextlib.contextmanager
def conns(daemon: Daemon, users: Users) -> Iterator[Conns]:
    with client(daemon, users.member, "raw", [users.gid]) as proc:
        yield Conns(proc)


@pytest.fixture
def make_daemon(users: Users, base: Path) -> Iterator[object]:
    """Start daemons with options of their own (stopped, SIGTERM, at the end if still running)."""
    started: list[Daemon] = []

    def start(name: str, *extra: str) -> Daemon:
        d = _start_daemon(users, base / f"{name}-{len(started)}-{time.monotonic_ns()}", *extra)
        started.append(d)
        return d

    yield start
    for d in started:
        if d.proc.poll() is None:
            _stop_daemon(d)


# ------------------------------------------------------------------------------------------------
def test_a_member_pins_through_the_socket_and_restores(daemon: Daemon, users: Users) -> None:
    original = daemon.gpu()
    assert original[0] != original[1]  # the twin starts unpinned
    with client(daemon, users.member, "pin-wait", [users.gid]) as proc:
        assert _line(proc) == f"pinned {GPU_PIN}"
        assert daemon.gpu() == (GPU_PIN, GPU_PIN, "userspace")  # the tree shows the pin
        proc.stdin.write("restore\n")  # type: ignore[union-attr]
        proc.stdin.flush()  # type: ignore[union-attr]
        assert _line(proc) == "restored True"
        assert daemon.gpu() == original


def test_pin_through_the_service_is_refused_before_any_change(daemon: Daemon, users: Users) -> None:
    # The service restores a client's clocks when it disconnects, so `slm-dvfs pin` could not
    # leave a pin through it: the command says so and changes nothing.
    original = daemon.gpu()
    with client(daemon, users.member, "pin-cmd", [users.gid]) as proc:
        assert _line(proc) == "rc 2"
        proc.wait(timeout=30)
        assert "cannot leave one" in (proc.stderr.read() if proc.stderr else "")
    assert daemon.gpu() == original


def test_killing_the_client_restores_its_clocks(daemon: Daemon, users: Users) -> None:
    original = daemon.gpu()
    with client(daemon, users.member, "pin-wait", [users.gid]) as proc:
        assert _line(proc) == f"pinned {GPU_PIN}"
        assert daemon.gpu()[:2] == (GPU_PIN, GPU_PIN)
        proc.send_signal(signal.SIGKILL)
        _until(lambda: daemon.gpu() == original, "the service restores the killed client's clocks")
    status = Raw(daemon.socket)
    try:
        assert status.ask(b'{"v": 1, "op": "status"}\n')["holder"] is None
    finally:
        status.close()


def test_the_open_device_path_guards_through_the_service(daemon: Daemon, users: Users) -> None:
    """What a run does: open_device hands a non-root user a ServiceDevice; the ClockGuard's
    snapshot and restore go through the service; the user cannot write a clock file itself."""
    original = daemon.gpu()
    with client(daemon, users.member, "guard", [users.gid]) as proc:
        assert _line(proc) == "device ServiceDevice"
        assert _line(proc) == "direct write refused"
        assert _line(proc) == f"pinned {GPU_PIN}"
        # a second writer is refused, naming who holds the board; reads still work
        other = Raw(daemon.socket)
        try:
            reply = other.ask(b'{"v": 1, "op": "pin", "domain": "gpu", "hz": 918000000}\n')
            assert reply["ok"] is False and users.member.pw_name in str(reply["error"])
            assert other.ask(b'{"v": 1, "op": "status"}\n')["ok"] is True
        finally:
            other.close()
        assert daemon.gpu()[:2] == (GPU_PIN, GPU_PIN)
        proc.stdin.write("\n")  # type: ignore[union-attr]
        proc.stdin.flush()  # type: ignore[union-attr]
        assert _line(proc) == "guard done"
        assert daemon.gpu() == original


def test_a_user_outside_the_group_is_refused(daemon: Daemon, users: Users) -> None:
    with client(daemon, users.outsider, "hello", []) as proc:
        err = _error(_line(proc))
    assert f"user {users.outsider.pw_name} (uid {users.outsider.pw_uid}) is not in group {users.group}" in err["what"]
    assert f"sudo usermod -aG {users.group} {users.outsider.pw_name}" in err["remedy"]


def test_a_non_members_pin_says_which_group_to_join(daemon: Daemon, users: Users) -> None:
    """Issue 20: `slm-dvfs pin` by a user outside the service's group said the service could not
    leave a pin (and to use a policy, which fails the same way); it names the group and how to
    join it. A user added to the group whose login predates it is told to log in again."""
    original = daemon.gpu()
    with client(daemon, users.outsider, "pin-cmd", []) as proc:
        assert _line(proc) == "rc 2"
        proc.wait(timeout=30)
        err = proc.stderr.read() if proc.stderr else ""
    assert f"is not in group {users.group}, which may use the clock service at {daemon.socket}" in err
    assert f"sudo usermod -aG {users.group} {users.outsider.pw_name}" in err and "cannot leave one" not in err
    with client(daemon, users.member, "pin-cmd", []) as proc:  # listed in the group, not in this login
        assert _line(proc) == "rc 2"
        proc.wait(timeout=30)
        err = proc.stderr.read() if proc.stderr else ""
    assert f"was added to group {users.group}" in err and f"newgrp {users.group}" in err
    assert daemon.gpu() == original


def test_bad_requests_get_error_replies_and_the_service_keeps_serving(daemon: Daemon) -> None:
    original = daemon.gpu()
    raw = Raw(daemon.socket)
    try:
        assert raw.ask(b"this is not json\n")["ok"] is False
        reply = raw.ask(b'{"v": 1, "op": "run", "command": "/bin/sh -c id"}\n')
        assert reply["ok"] is False and 'unknown operation "run"' in str(reply["error"])
        reply = raw.ask(b'{"v": 1, "op": "pin", "domain": "gpu", "hz": 613000000}\n')
        assert reply["ok"] is False and reply["kind"] == "UnsupportedFrequencyError"
        assert "nearest" in str(reply["remedy"])
        reply = raw.ask(b'{"v": 1, "op": "set_mode", "mode": 99}\n')
        assert reply["ok"] is False and "mode 99 is not defined" in str(reply["error"])
        assert raw.ask(b'{"v": 1, "op": "restore"}\n')["ok"] is True  # it took the board for those: give it back
        assert raw.ask(b'{"v": 1, "op": "hello"}\n')["ok"] is True  # same connection, still served
        assert raw.ask(b'{"v": 1, "op": "hello", "x": "' + b"a" * 5000 + b'"}\n')["ok"] is False
    finally:
        raw.close()
    again = Raw(daemon.socket)
    try:
        assert again.ask(b'{"v": 1, "op": "hello"}\n')["ok"] is True
    finally:
        again.close()
    assert daemon.gpu() == original


HELLO = b'{"v": 1, "op": "hello"}\n'
# Issue 20: values of the wrong kind, size or shape, each with what its error says.
MALFORMED = [
    (b'{"v": 1, "op": ["pin"]}\n', "unknown operation [...]"),
    (b'{"v": 1, "op": {"pin": 1}}\n', "unknown operation {...}"),
    (b'{"v": 1, "op": "pin", "domain": "gpu", "hz": 1' + b"0" * 400 + b"}\n", "has 401 digits"),
    (b'{"v": 1, "op": "pin", "domain": "gpu", "hz": 1e400}\n', 'field "hz" is Infinity, not an integer'),
    (b'{"v": 1, "op": "pin", "domain": "gpu", "hz": 612000000.0}\n', 'field "hz" is 612000000.0, not an integer'),
    (b'{"v": 1, "op": "pin", "domain": "gpu", "hz": true}\n', 'field "hz" is true, not an integer'),
    (b'{"v": 1, "op": "pin", "domain": "gpu", "hz": null}\n', 'field "hz" is null, not an integer'),
    (b'{"v": 1, "op": "set_mode", "mode": NaN}\n', "NaN, which is not a JSON number"),
    (b'{"v": 1, "op": "jetson_clocks", "on": null}\n', 'field "on" is null, not a boolean'),
    (b'{"v": 1.0, "op": "hello"}\n', "protocol version 1.0"),
    (b'{"v": 1, "op": "hello", "x": ' + b"[" * 2000 + b"]" * 2000 + b"}\n", "nests too deeply"),
    (b'{"v": 1, "op": "\xff\xfe"}\n', "not UTF-8 text (byte 0xff at position 16)"),
]


def test_malformed_values_get_the_protocols_error_and_the_connection_stays_usable(daemon: Daemon,
                                                                                users: Users) -> None:
    """Each malformed request of a member gets the protocol's error reply (not a TypeError with a
    traceback in the log) and the connection serves the next request; a line past the length
    cap, with or without its newline, gets the error and ends the connection."""
    original, logged = daemon.gpu(), len(daemon.log)
    with conns(daemon, users) as c:
        assert c.open(1, HELLO)["ok"] is True  # type: ignore[index]
        for raw, said in MALFORMED:
            reply = c.ask(1, raw)
            assert reply is not None and reply["ok"] is False, (raw[:60], reply)
            assert reply["kind"] == "ProtocolError" and said in str(reply["error"]) and reply["remedy"], reply
            assert c.ask(1, HELLO)["ok"] is True  # type: ignore[index]  # still served
        reply = c.ask(1, b'{"v": 1, "op": "pin", "domain": "gpu", "hz": ' + b"9" * 5000 + b"}\n")
        assert reply is not None and "over the 4096-byte limit" in str(reply["error"]) and reply["remedy"]
        assert c.read(1) is None  # the rest of that line cannot be told from a request: closed
        assert c.open(2, HELLO)["ok"] is True  # type: ignore[index]
        reply = c.ask(2, b'{"v": 1, "op": "hello", "x": "' + b"a" * 5000)  # and no newline at all
        assert reply is not None and "over the 4096-byte limit" in str(reply["error"])
        assert c.read(2) is None
    assert not [line for line in daemon.log[logged:] if "Traceback" in line or "TypeError" in line]
    assert daemon.gpu() == original


def test_a_client_that_sends_nothing_or_stops_mid_line_is_dropped_and_restored(make_daemon, users: Users) -> None:
    """Issue 20: the idle timeout. A connection that sends nothing after connecting, and a holder
    that stops in the middle of a line, get the protocol's error and are dropped (the holder's
    clocks restored as when it leaves); one idle between whole requests keeps its connection."""
    d = make_daemon("idle", "--idle-timeout", "0.5")
    original = d.gpu()
    with conns(d, users) as c:
        assert c.open(4, HELLO)["ok"] is True  # type: ignore[index]
        assert c.open(1) == "ok"  # connects, sends nothing
        pin = b'{"v": 1, "op": "pin", "domain": "gpu", "hz": 612000000}\n'
        assert c.open(2, pin)["ok"] is True  # type: ignore[index]
        assert d.gpu()[:2] == (GPU_PIN, GPU_PIN)
        assert c.send(2, b'{"v": 1, "op": "sta') == "ok"  # ... and stops mid-line
        reply = c.read(1)
        assert reply is not None and reply["kind"] == "ProtocolError", reply
        assert "no request within 0.5 s of connecting" in str(reply["error"]) and reply["remedy"]
        assert c.read(1) is None
        reply = c.read(2)
        assert reply is not None and "did not end (no newline) within 0.5 s" in str(reply["error"]), reply
        assert c.read(2) is None  # restored before the connection closed
        assert d.gpu() == original
        status = c.ask(4, b'{"v": 1, "op": "status"}\n')  # idle between whole requests longer than that: served
        assert status is not None and status["ok"] is True and status["holder"] is None


@pytest.mark.slow
def test_a_client_that_never_reads_its_replies_is_dropped(make_daemon, users: Users) -> None:
    """A connection that asks and never reads: once its replies fill the socket and stay unread
    for the idle timeout, the service drops it rather than block its thread for ever."""
    d = make_daemon("unread", "--idle-timeout", "1")
    with conns(d, users) as c:
        assert c.open(1, b'{"v": 1, "op": "status"}\n')["ok"] is True  # type: ignore[index]
        assert c.send(1, b'{"v": 1, "op": "status"}\n' * 300) == "ok"
        _until(lambda: any("its replies went unread for 1 s" in line for line in d.log),
               "the service drops a client that reads none of its replies")


def test_a_users_connections_are_capped_and_the_daemons_descriptors_stay_bounded(make_daemon, users: Users) -> None:
    """Issue 20: a member opening many connections gets the protocol's error on those over the
    cap, each closed at once; the daemon's descriptors grow by the cap at most, other users still
    get in, and a connection that ends makes room for another."""
    d = make_daemon("cap", "--max-connections", "3")
    warm = Raw(d.socket)  # the daemon's first connection opens what it keeps open (logs, journal)
    try:
        assert warm.ask(HELLO)["ok"] is True
    finally:
        warm.close()
    baseline = _settled(d.fds)
    with conns(d, users) as c:
        for k in range(3):
            assert c.open(k, HELLO)["ok"] is True  # type: ignore[index]
        for k in range(3, 10):
            reply = c.open(k, HELLO)
            assert isinstance(reply, dict) and reply["ok"] is False and reply["kind"] == "ProtocolError", reply
            assert f"{users.member.pw_name} already has 3 connections open" in str(reply["error"])
            assert "--max-connections" in str(reply["remedy"])
            assert c.read(k) is None  # closed, not kept
        # refused connections are closed as they are answered; the count may lag a moment under load
        _until(lambda: d.fds() <= baseline + 3, "the daemon holds no more descriptors than the cap's")
        other = Raw(d.socket)  # root is another user: not counted against the member
        try:
            assert other.ask(HELLO)["ok"] is True
        finally:
            other.close()
        assert c.close(0) == "ok"
        _until(lambda: (c.open(10, HELLO) or {}).get("ok") is True,  # type: ignore[union-attr]
               "a connection that ended makes room for another")
    assert sum("refusing further connections" in line for line in d.log) == 1  # logged once, not per refusal


def test_a_closed_session_holds_no_connection_to_the_service(daemon: Daemon, users: Users) -> None:
    """A session the caller closed (and still refers to, as a long-lived TUI may) gives its
    connection back, so the cap counts only live sessions."""
    before = daemon.fds()
    with client(daemon, users.member, "session-close", [users.gid]) as proc:
        proc.stdin.write("5\n")  # type: ignore[union-attr]
        proc.stdin.flush()  # type: ignore[union-attr]
        assert _line(proc) == "closed 5"
        _until(lambda: daemon.fds() <= before, "the service closed the closed sessions' connections")


def _stopped_by(d: Daemon, users: Users, sig: int) -> None:
    """`sig` to a daemon whose client holds a pin: the pin is restored, the socket removed, and
    the exit status says how it stopped."""
    from engine.device.clockd.listener import CLEAN_STOP, signal_name

    original = d.gpu()
    with client(d, users.member, "pin-wait", [users.gid]) as proc:
        assert _line(proc) == f"pinned {GPU_PIN}"
        d.proc.send_signal(sig)
        assert d.proc.wait(timeout=30) == (0 if sig in CLEAN_STOP else 128 + sig)
    assert d.gpu() == original
    assert not d.socket.exists()
    _until(lambda: any(f"stopping on {signal_name(sig)}: restoring the clocks" in line for line in d.log),
           "the daemon logged why it stopped")


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1], ids=lambda s: signal.Signals(s).name)
def test_hup_quit_and_usr1_restore_the_clocks_and_end_the_daemon(make_daemon, users: Users, sig: int) -> None:
    """Issue 20: these ended the daemon without restoring what a client held."""
    _stopped_by(make_daemon("sig"), users, sig)


def _signame(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:  # a real-time signal between SIGRTMIN and SIGRTMAX
        return f"SIGRTMIN+{sig - signal.SIGRTMIN}"


@pytest.mark.slow
@pytest.mark.parametrize("sig", sorted(set(signal.valid_signals()) - {signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1,
                                                                       signal.SIGTERM}), ids=_signame)
def test_every_other_stopping_signal_restores_the_clocks(make_daemon, users: Users, sig: int) -> None:
    from engine.device.clockd.listener import LEFT_ALONE, STOP_SIGNALS

    if sig not in STOP_SIGNALS:
        pytest.skip(f"left alone: {LEFT_ALONE[_signame(sig)]}")
    _stopped_by(make_daemon("sig"), users, sig)


def test_every_signal_that_would_end_the_daemon_is_handled_or_documented_as_not() -> None:
    """Each signal this OS has either makes the daemon restore and exit, or is left alone for a
    reason the code states; docs/security.md names each."""
    from engine.device.clockd.listener import LEFT_ALONE, STOP_SIGNALS, signal_name

    handled = {signal_name(s) for s in STOP_SIGNALS}
    assert handled | set(LEFT_ALONE) == {signal_name(s) for s in signal.valid_signals()}
    assert not handled & set(LEFT_ALONE)
    docs = (REPO / "docs" / "security.md").read_text()
    section = docs[docs.index("## The clock service"):]
    for name in sorted((handled - {"SIGRTMAX"} - {n for n in handled if n.startswith("SIGRTMIN")}) | set(LEFT_ALONE)):
        assert name in section, f"docs/security.md's clock service section does not name {name}"
    assert "SIGRTMIN" in section and "SIGRTMAX" in section


@pytest.mark.slow
def test_the_service_itself_refuses_a_client_outside_the_group(users: Users, base: Path) -> None:
    """Even with a socket anyone may connect to, the credentials check refuses, saying why."""
    d = _start_daemon(users, base / "open", "--socket-mode", "0666")
    try:
        with client(d, users.outsider, "hello", []) as proc:
            err = _error(_line(proc))
        assert f"is not in group {users.group}" in err["what"] and users.outsider.pw_name in err["what"]
        with client(d, users.member, "hello", [users.gid]) as proc:  # a member still gets in
            assert _line(proc).startswith(f"hello {users.member.pw_name}")
    finally:
        assert _stop_daemon(d) == 0


@pytest.mark.slow
def test_sigterm_restores_what_a_client_holds(users: Users, base: Path) -> None:
    d = _start_daemon(users, base / "term")
    stopped = False
    try:
        original = d.gpu()
        with client(d, users.member, "pin-wait", [users.gid]) as proc:
            assert _line(proc) == f"pinned {GPU_PIN}"
            assert _stop_daemon(d) == 0
            stopped = True
            assert d.gpu() == original
            assert not d.socket.exists()
    finally:
        if not stopped:
            _stop_daemon(d)


def test_without_the_service_a_user_reads_but_is_told_how_to_write(daemon: Daemon, users: Users) -> None:
    gone = Daemon(daemon.proc, daemon.base / "no-such.sock", daemon.root, daemon.base, [])
    with client(gone, users.member, "noservice", [users.gid]) as proc:
        assert _line(proc) == f"clock {daemon.gpu()[1]}"
        err = _error(_line(proc))
    assert "no clock service is running" in err["what"]
    assert "sudo systemctl start slm-dvfs-clockd" in err["remedy"] and "slm-dvfs clockd --install" in err["remedy"]
    with client(daemon, users.member, "direct", [users.gid]) as proc:  # SLM_DVFS_CLOCKD=off: the kernel's refusal
        assert _line(proc) == "device JetsonDevice"
        err = _error(_line(proc))
    assert "max_freq" in err["what"] or "min_freq" in err["what"] or "governor" in err["what"]


@pytest.fixture
def system_wide(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A stand-in for slm-dvfs installed system-wide: interpreter, console script and engine
    package in a root-owned folder right under / that only root may write (the checkout's venv
    may live under /root, which the unit's ProtectHome hides, or in a group-writable folder)."""
    from engine.device.clockd import install

    top = Path(tempfile.mkdtemp(prefix="slm-dvfs-standin-", dir="/"))
    try:
        top.chmod(0o755)
        (top / "bin").mkdir(mode=0o755)
        (top / "engine").mkdir(mode=0o755)
        for name in ("python", "slm-dvfs"):
            (top / "bin" / name).write_text("#!/bin/sh\n")
            (top / "bin" / name).chmod(0o755)
        monkeypatch.setattr(sys, "executable", str(top / "bin/python"))
        monkeypatch.setattr(install, "package_dir", lambda: top / "engine")
        yield top
    finally:
        subprocess.run(["rm", "-rf", str(top)], check=False)


def test_install_and_uninstall_into_a_prefix(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                             system_wide: Path) -> None:
    import grp

    from engine.cli import main

    group = f"slm-dvfs-inst{os.getpid() % 100000}"
    try:
        assert main(["clockd", "--install", "--prefix", str(tmp_path), "--group", group]) == 0
        unit = tmp_path / "etc/systemd/system/slm-dvfs-clockd.service"
        text = unit.read_text()
        assert f"ExecStart={system_wide}/bin/slm-dvfs clockd --group {group}" in text
        assert "Environment=SLM_DVFS_STATE_DIR=/var/lib/slm-dvfs/clockd" in text
        assert grp.getgrnam(group).gr_name == group
        out = capsys.readouterr().out
        assert "systemctl enable --now slm-dvfs-clockd" in out and f"usermod -aG {group}" in out
        assert main(["clockd", "--uninstall", "--prefix", str(tmp_path), "--group", group]) == 0
        assert not unit.exists()
        with pytest.raises(KeyError):
            grp.getgrnam(group)
    finally:
        _run("groupdel", group)


def test_a_missing_group_is_a_clear_error(daemon: Daemon, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from engine.cli import main

    assert main(["clockd", "--sysfs-root", str(daemon.root), "--group", "no-such-group-x", "--socket",
                 str(tmp_path / "s.sock"), "--state-dir", str(tmp_path / "st")]) == 2
    err = capsys.readouterr().err
    assert "group 'no-such-group-x' does not exist" in err and "slm-dvfs clockd --install" in err
    assert not (tmp_path / "s.sock").exists()


def test_a_domain_the_user_cannot_read_is_read_through_the_service(daemon: Daemon, users: Users) -> None:
    """The EMC lives in debugfs, root-only on a board: the client reads it from the service."""
    debugfs = daemon.root / "sys/kernel/debug"
    mode = debugfs.stat().st_mode
    debugfs.chmod(0o700)
    try:
        root_view = JetsonDevice(daemon.root)
        want = f"emc {root_view.clock(ClockDomain.EMC).cur_hz} {len(root_view.clock_table(ClockDomain.EMC))}"
        with client(daemon, users.member, "emc", [users.gid]) as proc:
            assert _line(proc) == want
    finally:
        debugfs.chmod(mode)


def test_jetson_clocks_and_a_mode_through_the_service_are_restored(daemon: Daemon) -> None:
    """The service runs the device's jetson_clocks and nvpmodel itself, with a store file of its
    own naming; `restore` puts the clocks and the mode back."""
    original, mode = daemon.gpu(), JetsonDevice(daemon.root).power_mode().id
    raw = Raw(daemon.socket)
    try:
        assert raw.ask(b'{"v": 1, "op": "set_mode", "mode": 2}\n')["ok"] is True
        assert JetsonDevice(daemon.root).power_mode().id == 2
        assert raw.ask(b'{"v": 1, "op": "jetson_clocks", "on": true}\n')["ok"] is True
        gpu = JetsonDevice(daemon.root).clock(ClockDomain.GPU)
        assert gpu.min_hz == gpu.max_hz  # jetson_clocks pinned the GPU at the mode's maximum
        assert list((daemon.base / "clockd-state").glob("jetson_clocks-*.store"))
        assert raw.ask(b'{"v": 1, "op": "restore"}\n') == {"v": 1, "ok": True, "restored": True}
    finally:
        raw.close()
    assert daemon.gpu() == original and JetsonDevice(daemon.root).power_mode().id == mode
    assert not list((daemon.base / "clockd-state").glob("jetson_clocks-*.store"))


@pytest.mark.parametrize("weak", ["group-writable bin", "others' engine", "world-writable top"])
def test_install_refuses_a_slm_dvfs_others_can_change(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     system_wide: Path, weak: str) -> None:
    """A root unit must not run a program another user can change (they would become root)."""
    from engine.cli import main

    group = f"slm-dvfs-weak{os.getpid() % 100000}"
    target = {"group-writable bin": system_wide / "bin", "others' engine": system_wide / "engine",
              "world-writable top": system_wide}[weak]
    if weak == "others' engine":
        os.chown(target, 4242, 4242)
    else:
        target.chmod(0o775 if weak == "group-writable bin" else 0o757)
    try:
        assert main(["clockd", "--install", "--prefix", str(tmp_path), "--group", group]) == 2
    finally:
        _run("groupdel", group)
    err = capsys.readouterr().err
    assert "would become root" in err and f"{target} is" in err
    assert "/opt/slm-dvfs" in err  # the remedy: a system-wide, root-owned install
    assert not (tmp_path / "etc").exists()


def test_install_refuses_a_venv_in_a_temp_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from engine.core.errors import ConfigError
    from engine.device.clockd import install

    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin/python").write_text("")
    monkeypatch.setattr(sys, "executable", str(venv / "bin/python"))
    with pytest.raises(ConfigError, match="others than root"):
        install.check_program()  # /tmp is world-writable: anyone could swap the venv


# --- the service in this process: failures that must not stop it ------------------------------
def test_the_accept_loop_survives_a_failed_accept_and_a_failed_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    from engine.device.clockd import listener

    class Listener:
        def accept(self):  # type: ignore[no-untyped-def]
            raise OSError(errno.EMFILE, "Too many open files")

    listener._accept(None, Listener(), 1)  # type: ignore[arg-type]  # logged, backed off, no raise

    class Service:
        counted = 0

        def admit(self, peer):  # type: ignore[no-untyped-def]
            self.counted += 1

        def left(self, peer):  # type: ignore[no-untyped-def]
            self.counted -= 1

    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)

    class Paired:
        def accept(self):  # type: ignore[no-untyped-def]
            return a, None

    class NoThread:
        def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
            pass

        def start(self) -> None:
            raise RuntimeError("can't start new thread")

    monkeypatch.setattr(listener.threading, "Thread", NoThread)
    service = Service()
    listener._accept(service, Paired(), 2)  # type: ignore[arg-type]
    assert a.fileno() == -1  # the connection was closed
    assert service.counted == 0  # and counted out of its user's connections
    b.close()


def test_a_connection_is_closed_even_when_its_restore_crashes() -> None:
    from engine.device.clockd import server

    class Broken:
        group, idle_timeout_s, counted = "x", 30.0, 1

        def disconnected(self, peer):  # type: ignore[no-untyped-def]
            raise RuntimeError("boom")

        def left(self, peer):  # type: ignore[no-untyped-def]
            self.counted -= 1

    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    b.close()  # the client went away at once
    service = Broken()
    server.serve_connection(service, a, server.Peer(1, os.getpid(), 0, 0))  # type: ignore[arg-type]
    assert a.fileno() == -1 and service.counted == 0


class Flaky:
    """A device whose restore (`apply_settings`) fails while `fail` is set."""

    def __init__(self, inner: JetsonDevice) -> None:
        self.inner, self.fail = inner, False

    def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
        return getattr(self.inner, name)

    def apply_settings(self, settings):  # type: ignore[no-untyped-def]
        if self.fail:
            raise DeviceError("a clock file refused the write", "test")
        self.inner.apply_settings(settings)


def test_a_failed_restore_keeps_the_board_until_it_is_restored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """After a client's restore failed, the next client is refused (not snapshotted over the
    changed board) until the service restores the kept journal; jetson_clocks' store lies in
    the service's state dir, which the guard trusts, and goes only once the restore worked."""
    import grp

    from engine.cli.clockd_cmd import service_state_dir
    from engine.device.clockd.protocol import parse_request
    from engine.device.clockd.server import ClockService, Peer
    from engine.device.guard.trust import trusted_store
    from engine.device.session import open_device

    monkeypatch.setenv("SLM_DVFS_STATE_DIR", str(tmp_path / "home"))
    monkeypatch.setenv("SLM_DVFS_TWIN_DIR", str(tmp_path / "home" / "twin"))
    state = tmp_path / "clockd"
    with open_device(twin=TWIN) as session, service_state_dir(state):
        device = Flaky(session.device)
        service = ClockService(device, group=grp.getgrgid(0).gr_name, state_dir=state)  # type: ignore[arg-type]
        original = device.clock(ClockDomain.GPU)
        first, second = Peer(1, os.getpid(), 0, 0), Peer(2, os.getpid(), 0, 0)

        def ask(peer: Peer, line: str):  # type: ignore[no-untyped-def]
            return service.handle(peer, parse_request(line.encode() + b"\n"))

        ask(first, '{"v": 1, "op": "jetson_clocks", "on": true}')
        store = service.jetson_clocks_store(first.conn_id)
        assert store.is_file() and trusted_store(store) == store  # the guard will restore from it
        ask(first, '{"v": 1, "op": "pin", "domain": "gpu", "hz": 612000000}')
        device.fail = True
        service.disconnected(first)  # its restore fails: logged, journal and store kept
        assert store.is_file() and list((state / "journals").glob("*.json"))
        with pytest.raises(DeviceError) as err:
            ask(second, '{"v": 1, "op": "pin", "domain": "gpu", "hz": 918000000}')
        assert "could not restore the board" in err.value.what and "systemctl restart" in err.value.remedy
        assert store.is_file() and list((state / "journals").glob("*.json"))  # still kept for the next try
        assert ask(second, '{"v": 1, "op": "status"}')["holder"] is None
        device.fail = False
        ask(second, '{"v": 1, "op": "pin", "domain": "gpu", "hz": 918000000}')  # restores first, then takes
        assert not store.exists()  # restored through jetson_clocks' store, then deleted
        snap = ask(second, '{"v": 1, "op": "snapshot"}')["settings"]
        gpu = next(d for d in snap["domains"] if d["domain"] == "gpu")
        assert (gpu["min_hz"], gpu["max_hz"]) == (original.min_hz, original.max_hz)  # the board's own state
        assert ask(second, '{"v": 1, "op": "restore"}')["restored"] is True
        now = device.clock(ClockDomain.GPU)
        assert (now.min_hz, now.max_hz) == (original.min_hz, original.max_hz)
        assert not list((state / "journals").glob("*.json"))
        service.close()
