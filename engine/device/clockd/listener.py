"""The clock service as a process: its socket, the accept loop that admits each client, and
the signals that stop it (restoring every clock first).

`serve` binds the group-owned socket, hands each admitted connection to a thread of its own
(`server.serve_connection`) and stops on any of `STOP_SIGNALS`: every signal a process can catch
whose default action would end it. `LEFT_ALONE` says why the others are not caught.
"""

from __future__ import annotations

import errno
import logging
import os
import selectors
import signal
import socket
import stat
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Callable

from engine.core.errors import ConfigError
from engine.core.jsontypes import JsonObject
from engine.device.clockd.protocol import encode, error_reply
from engine.device.clockd.server import ClockService, peer_credentials, serve_connection

log = logging.getLogger(__name__)


def bind_socket(path: Path, gid: int, mode: int = 0o660) -> socket.socket:
    """Listen at `path`, owned by root and `gid` with `mode`; a stale socket is replaced, a live
    one (another service) refused."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
    if path.exists() or path.is_symlink():
        if not stat.S_ISSOCK(path.lstat().st_mode):
            raise ConfigError(f"{path} exists and is not a socket", "pass another --socket path, or remove it")
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(os.fspath(path))
        except OSError:
            path.unlink()  # left by a service that died
        else:
            raise ConfigError(f"a clock service is already listening on {path}",
                              "stop it first (`sudo systemctl stop slm-dvfs-clockd`) or pass another --socket")
        finally:
            probe.close()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)  # never world-connectable, not even between bind and chmod
    try:
        sock.bind(os.fspath(path))
    finally:
        os.umask(old)
    os.chown(path, 0, gid)
    os.chmod(path, mode)
    sock.listen(16)
    return sock


def _send_now(conn: socket.socket, reply: JsonObject) -> None:
    """A refusal on a fresh connection, without waiting: its buffer is empty, the reply small."""
    try:
        conn.setblocking(False)
        conn.send(encode(reply))
    except OSError:
        pass  # the client is gone already


def _accept(service: ClockService, listener: socket.socket, conn_id: int) -> None:
    """Accept one client, admit it and start its thread; whatever fails (no descriptors left,
    no thread, no credentials) is logged, the connection closed, and the service carries on.
    A refused client (not in the group, over its user's cap) gets its error reply here, in
    the accepting thread, and costs no thread of its own."""
    try:
        conn, _ = listener.accept()
    except OSError as exc:
        log.error("accepting a connection failed: %s", exc)
        if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
            time.sleep(0.1)  # out of descriptors or memory: let connections end before the next try
        return
    try:
        peer = peer_credentials(conn, conn_id)
        refusal = service.admit(peer)
    except Exception as exc:  # noqa: BLE001 - OSError (credentials): one client
        log.error("admitting connection %d failed: %s: %s", conn_id, type(exc).__name__, exc)
        conn.close()
        return
    if refusal is not None:
        _send_now(conn, error_reply(refusal))
        conn.close()
        return
    try:
        threading.Thread(target=serve_connection, args=(service, conn, peer),
                         name=f"clockd-{conn_id}", daemon=True).start()
    except RuntimeError as exc:  # no thread left: this one client
        log.error("serving connection %d failed: %s", conn_id, exc)
        conn.close()
        service.left(peer)
        time.sleep(0.1)


# Every signal a process can catch whose default action ends it makes the service restore every
# clock and exit, as SIGTERM does: it never leaves a board changed when it can help it. The
# others, and why, are `LEFT_ALONE`; docs/security.md lists both.
_STOPPING = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGALRM", "SIGVTALRM", "SIGPROF",
             "SIGIO", "SIGPWR", "SIGSTKFLT", "SIGXCPU", "SIGABRT", "SIGTRAP", "SIGSYS")
STOP_SIGNALS: tuple[int, ...] = tuple(int(getattr(signal, n)) for n in _STOPPING if hasattr(signal, n)) + tuple(
    range(signal.SIGRTMIN, signal.SIGRTMAX + 1))  # the real-time signals, which end a process too
LEFT_ALONE = {
    "SIGKILL": "cannot be caught: the journal it leaves is restored when the service starts again",
    "SIGSTOP": "cannot be caught, and stops rather than ends it",
    "SIGSEGV": "a fault in the process itself, after which no Python code runs safely: the journal is "
               "restored at the next start",
    "SIGBUS": "as SIGSEGV",
    "SIGFPE": "as SIGSEGV",
    "SIGILL": "as SIGSEGV",
    "SIGPIPE": "ignored by Python: a client that vanishes shows as an error on its own connection",
    "SIGXFSZ": "ignored by Python: a file over its size limit shows as an error on that write",
    "SIGCHLD": "ignored by default (ends nothing)",
    "SIGCONT": "ignored by default (ends nothing)",
    "SIGURG": "ignored by default (ends nothing)",
    "SIGWINCH": "ignored by default (ends nothing)",
    "SIGTSTP": "stops rather than ends it",
    "SIGTTIN": "stops rather than ends it",
    "SIGTTOU": "stops rather than ends it",
}
CLEAN_STOP = (signal.SIGTERM, signal.SIGINT)  # a requested stop; any other signal is an exit status of 128+N


def signal_name(signum: int) -> str:
    if signal.SIGRTMIN <= signum <= signal.SIGRTMAX and signum not in (signal.SIGRTMIN, signal.SIGRTMAX):
        return f"SIGRTMIN+{signum - signal.SIGRTMIN}"
    return signal.Signals(signum).name


def serve(service: ClockService, path: Path, *, mode: int = 0o660, ready: Callable[[Path], object] | None = None) -> int:
    """Serve until one of `STOP_SIGNALS` comes, then restore everything and remove the socket.
    Returns the signal's number. The handlers stay in place until the restore is done, so a
    second signal cannot cut it short."""
    service.recover()
    listener = bind_socket(path, service.gid, mode)
    stop_r, stop_w = os.pipe()
    os.set_blocking(stop_w, False)

    def stop(signum: int, frame: FrameType | None) -> None:
        try:
            os.write(stop_w, bytes([signum]))
        except OSError:
            pass  # the pipe is full of earlier signals: the first one stops us

    old = {s: signal.signal(s, stop) for s in STOP_SIGNALS}
    log.info("clock service listening on %s (group %s)", path, service.group)
    if ready is not None:
        ready(path)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    selector.register(stop_r, selectors.EVENT_READ)
    conn_id = 0
    try:
        try:
            while True:
                events = selector.select()
                if any(key.fileobj == stop_r for key, _ in events):
                    signum = os.read(stop_r, 1)[0]
                    log.info("stopping on %s: restoring the clocks", signal_name(signum))
                    return signum
                conn_id += 1
                _accept(service, listener, conn_id)
        finally:
            selector.close()
            listener.close()
            path.unlink(missing_ok=True)
            service.close()
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
        os.close(stop_r)
        os.close(stop_w)
