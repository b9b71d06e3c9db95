"""The clock service daemon: the only process that writes the board's clocks.

It listens on a Unix socket owned by root and a group (mode 0660), checks each client's
credentials (SO_PEERCRED) and serves the whitelisted requests of `protocol.py`. One client
holds the board at a time: its first changing request takes a `ClockGuard` snapshot (journalled
in the service's own state directory, holding the board lock), and the snapshot is restored
when the client sends `restore`, disconnects, dies, or is dropped (a connection that sends
nothing, or stops mid-line, for the idle timeout: `framing`). Each user may hold a bounded number
of connections. `listener` runs all this as a process: the socket, the accept loop, and the
signals that stop it. Nothing is ever executed but the device layer's fixed nvpmodel and
jetson_clocks.
"""

from __future__ import annotations

import grp
import logging
import socket
import struct
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from engine import __version__
from engine.core.jsontypes import JsonObject
from engine.core.errors import ConfigError, DeviceError, SlmDvfsError
from engine.device.base import ClockDomain, Device
from engine.device.clockd.framing import DEFAULT_IDLE_TIMEOUT_S, LineReader
from engine.device.clockd.membership import not_in_group, process_groups, user_name
from engine.device.clockd.protocol import (
    CHANGING_OPS,
    PROTOCOL_VERSION,
    ProtocolError,
    Request,
    clock_to_json,
    encode,
    error_reply,
    ok_reply,
    parse_request,
)
from engine.device.guard.guard import ClockGuard, recover_stale
from engine.device.guard.journal import device_key, device_root, list_journals
from engine.device.guard.lock import device_locked
from engine.device.guard.restore import _lock_dir, restore_journal
from engine.device.setting import DvfsSetting, check_setting

log = logging.getLogger(__name__)

DEFAULT_SOCKET = Path("/run/slm-dvfs/clockd.sock")
DEFAULT_GROUP = "slm-dvfs"
DEFAULT_STATE_DIR = Path("/var/lib/slm-dvfs/clockd")
DEFAULT_MAX_CONNECTIONS = 16  # per user: a TUI, a run and a few `slm-dvfs device` at once fit well within
_RECOVERY_REMEDY = ("fix the cause (see `journalctl -u slm-dvfs-clockd`); the service retries before the "
                    "next client takes the board, and restores at start (`sudo systemctl restart slm-dvfs-clockd`); "
                    "`sudo nvpmodel -m <id>` resets a mode's clocks, a reboot resets everything")


@dataclass(frozen=True)
class Peer:
    """A connected client, as the kernel vouches for it (SO_PEERCRED)."""

    conn_id: int
    pid: int
    uid: int
    gid: int

    @property
    def user(self) -> str:
        return user_name(self.uid)

    def describe(self) -> str:
        return f"{self.user} (uid {self.uid}, pid {self.pid})"


def peer_credentials(conn: socket.socket, conn_id: int) -> Peer:
    raw = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, gid = struct.unpack("3i", raw)
    return Peer(conn_id, pid, uid, gid)


class ClockService:
    """The board, who holds it, and the holder's guard; every request goes through `handle`."""

    def __init__(self, device: Device, *, group: str = DEFAULT_GROUP, state_dir: Path = DEFAULT_STATE_DIR,
                 idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S,
                 max_connections: int = DEFAULT_MAX_CONNECTIONS) -> None:
        self.device = device
        self.idle_timeout_s = idle_timeout_s
        self.max_connections = max_connections
        self.group = group
        try:
            self.gid = grp.getgrnam(group).gr_gid
        except KeyError:
            raise ConfigError(f"group {group!r} does not exist",
                              "run `sudo slm-dvfs clockd --install` (it creates the group), or "
                              f"`sudo groupadd --system {group}`") from None
        self.state_dir = Path(state_dir)
        self.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._lock = threading.RLock()
        self._holder: Peer | None = None
        self._guard: ClockGuard | None = None
        self._jc_store: Path | None = None
        self._closed = False
        # Connections per uid, under a lock of their own: admission must not wait for a request
        # that holds `_lock` for seconds (nvpmodel).
        self._conn_lock = threading.Lock()
        self._connections: dict[int, int] = {}
        self._capped: set[int] = set()  # uids refused for the cap, logged once until one of theirs ends

    @property
    def journal_dir(self) -> Path:
        return self.state_dir / "journals"

    def jetson_clocks_store(self, conn_id: int) -> Path:
        """Where jetson_clocks stores the state for connection `conn_id`: directly in the state
        dir, which the guard's restore trusts only when it is `paths.state_dir()` (the command
        sets SLM_DVFS_STATE_DIR to it)."""
        return self.state_dir / f"jetson_clocks-{conn_id}.store"

    def recover(self) -> None:
        """Restore what a killed service left changed (its journals outlive it)."""
        self.journal_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        for journal in recover_stale(self.journal_dir):
            log.warning("restored the clocks a previous service left changed (%s)", journal.path.name)

    # --- admission -------------------------------------------------------------------
    def refusal(self, peer: Peer) -> SlmDvfsError | None:
        """Why `peer` may not use the service (None: it may): root and the group only."""
        if peer.uid == 0 or peer.gid == self.gid or self.gid in process_groups(peer.pid):
            return None
        return not_in_group(peer.describe(), peer.user, self.group)

    def admit(self, peer: Peer) -> SlmDvfsError | None:
        """Count `peer`'s connection in, or say why not: not in the group, or its user already
        has `max_connections` open (so a member cannot exhaust the service's descriptors and
        threads). An admitted connection is counted out with `left`."""
        refusal = self.refusal(peer)
        if refusal is not None:
            log.warning("refused %s: %s", peer.describe(), refusal.what)
            return refusal
        with self._conn_lock:
            held = self._connections.get(peer.uid, 0)
            if held >= self.max_connections:
                if peer.uid not in self._capped:
                    self._capped.add(peer.uid)
                    log.warning("refusing further connections of %s: %d open, the most one user may have",
                                peer.user, held)
                return ProtocolError(f"{peer.user} already has {held} connections open to the clock service, "
                                     "the most one user may have",
                                     "close the ones you no longer use (each slm-dvfs process with a board open "
                                     "holds one; `ss -xp` lists them), or ask an administrator to raise the "
                                     "service's --max-connections")
            self._connections[peer.uid] = held + 1
        return None

    def left(self, peer: Peer) -> None:
        """An admitted connection has ended (and its descriptor is closed)."""
        with self._conn_lock:
            held = self._connections.get(peer.uid, 0) - 1
            if held > 0:
                self._connections[peer.uid] = held
            else:
                self._connections.pop(peer.uid, None)
            self._capped.discard(peer.uid)

    # --- requests --------------------------------------------------------------------
    def handle(self, peer: Peer, req: Request) -> JsonObject:
        with self._lock:
            if self._closed:
                raise DeviceError("the clock service is stopping", "retry once it is back "
                                  "(`systemctl status slm-dvfs-clockd`)")
            if req.op in CHANGING_OPS:
                self._take(peer)
            op: Callable[[Peer, Request], JsonObject] = getattr(self, f"_op_{req.op}")  # OPS: each has one
            return op(peer, req)

    def _op_hello(self, peer: Peer, req: Request) -> JsonObject:
        ident = self.device.identity()
        return ok_reply(server="slm-dvfs clockd", version=__version__, protocol=PROTOCOL_VERSION,
                        root=self.device.describe().get("root"), board=ident.board, module=ident.module,
                        l4t=ident.l4t, client=peer.describe())

    def _op_snapshot(self, peer: Peer, req: Request) -> JsonObject:
        assert self._guard is not None and self._guard.snapshot is not None
        return ok_reply(settings=self._guard.snapshot.to_json())

    def _op_pin(self, peer: Peer, req: Request) -> JsonObject:
        assert req.domain is not None and req.hz is not None
        check_setting(self.device, DvfsSetting.pinning(req.domain, req.hz))  # listed, under the mode's cap
        log.info("%s pins %s to %d Hz", peer.describe(), req.domain.value, req.hz)
        return ok_reply(clock=clock_to_json(self.device.pin(req.domain, req.hz)))

    def _op_unpin(self, peer: Peer, req: Request) -> JsonObject:
        assert req.domain is not None
        log.info("%s unpins %s", peer.describe(), req.domain.value)
        return ok_reply(clock=clock_to_json(self.device.unpin(req.domain)))

    def _op_set_mode(self, peer: Peer, req: Request) -> JsonObject:
        assert req.mode is not None
        check_setting(self.device, DvfsSetting(nvpmodel=req.mode))  # a defined mode id only
        log.info("%s sets nvpmodel mode %d", peer.describe(), req.mode)
        self.device.set_power_mode(req.mode)
        return ok_reply(mode=req.mode)

    def _op_jetson_clocks(self, peer: Peer, req: Request) -> JsonObject:
        assert self._guard is not None
        if req.on:
            if self._jc_store is None:  # the first store holds the state from before any of them
                self._jc_store = self.jetson_clocks_store(peer.conn_id)
                self._guard.note_jetson_clocks_store(self._jc_store)
                self.device.jetson_clocks(store=self._jc_store)
            else:
                self.device.jetson_clocks()
        elif self._jc_store is not None and self._jc_store.is_file():
            self.device.jetson_clocks_restore(self._jc_store)  # the file stays for the final restore
        log.info("%s turns jetson_clocks %s", peer.describe(), "on" if req.on else "off")
        return ok_reply(on=req.on)

    def _op_restore(self, peer: Peer, req: Request) -> JsonObject:
        if self._holder is not None and self._holder.conn_id != peer.conn_id:
            return ok_reply(restored=False, holder=self._holder.describe())
        restored = self._holder is not None
        self._release()
        return ok_reply(restored=restored)

    def _op_status(self, peer: Peer, req: Request) -> JsonObject:
        clocks: JsonObject = {}
        for domain in ClockDomain:
            try:  # with the table: a client may not read debugfs (the EMC) itself
                clocks[domain.value] = {**clock_to_json(self.device.clock(domain)),
                                        "table": list(self.device.clock_table(domain))}
            except DeviceError as exc:
                clocks[domain.value] = {"error": exc.what}
        try:
            mode: int | None = self.device.power_mode().id
        except DeviceError:
            mode = None
        holder = None if self._holder is None else self._holder.describe()
        return ok_reply(clocks=clocks, mode=mode, holder=holder)

    # --- holding the board -------------------------------------------------------------
    def _take(self, peer: Peer) -> None:
        if self._holder is not None:
            if self._holder.conn_id == peer.conn_id:
                return
            raise DeviceError(f"the board is held by {self._holder.describe()} through the clock service",
                              "wait for it to finish (its clocks are restored when it disconnects), or stop it")
        self._recover_own()  # a restore that failed before: the board is not as found
        guard = ClockGuard(self.device, directory=self.journal_dir, handle_signals=False, recover=False)
        guard.start()  # the board lock, the snapshot and its journal, before any change
        self._guard, self._holder, self._jc_store = guard, peer, None
        log.info("%s holds the board", peer.describe())

    def _recover_own(self) -> None:
        """Restore the journals this board left in the service's own directory (a client whose
        restore failed); while that fails, refuse to take the board: a new snapshot would hold
        the changed clocks as the state to go back to."""
        key = device_key(self.device.describe())
        journals = [j for j in list_journals(self.journal_dir) if device_key(j.device) == key]
        if not journals:
            return
        oldest, *newer = journals  # oldest first: the state from before any client
        root = device_root(oldest.device)
        try:
            with device_locked(_lock_dir(self.journal_dir, root), key, root):
                restore_journal(oldest, self.device)  # its jetson_clocks store too; deleted once it worked
        except (SlmDvfsError, OSError) as exc:
            what = getattr(exc, "what", str(exc))
            log.error("the board is still not restored (%s): %s", oldest.path.name, what)
            raise DeviceError("the clock service could not restore the board after an earlier client "
                              f"(journal {oldest.path}): {what}", _RECOVERY_REMEDY) from None
        for j in newer:
            j.path.unlink(missing_ok=True)
        log.warning("restored the clocks an earlier client left changed (%s)", oldest.path.name)

    def _release(self) -> None:
        guard, holder = self._guard, self._holder
        self._guard = self._holder = self._jc_store = None
        if guard is None:
            return
        # The guard restores through jetson_clocks' store (deleted once the restore worked) and its
        # snapshot; a failed restore keeps both, and the journal, for `_recover_own` and the next start.
        guard.close()
        log.info("restored the clocks of %s", holder.describe() if holder else "a client")

    def disconnected(self, peer: Peer) -> None:
        """A client went away (EOF: closed, exited or killed): restore what it held."""
        with self._lock:
            if self._holder is not None and self._holder.conn_id == peer.conn_id:
                log.info("%s disconnected holding the board: restoring", peer.describe())
                try:
                    self._release()
                except SlmDvfsError as exc:
                    log.error("restoring after %s failed: %s", peer.describe(), exc)

    def close(self) -> None:
        """Stop serving and restore whatever a client still holds."""
        with self._lock:
            self._closed = True
            self._release()


def serve_connection(service: ClockService, conn: socket.socket, peer: Peer) -> None:
    """One admitted client's requests, each answered; a bad one gets an error reply, never a
    crash. A client that sends nothing, stops mid-line or sends an overlong line gets the
    protocol's error and is dropped; whatever ends the connection restores what it held."""
    reader = LineReader(conn, service.idle_timeout_s)

    def send(reply: JsonObject) -> None:
        conn.settimeout(service.idle_timeout_s)  # a client that never reads its replies is dropped too
        conn.sendall(encode(reply))

    try:
        while True:
            try:
                line = reader.readline()
            except ProtocolError as exc:  # too slow, or too long: the connection is done
                log.warning("dropped %s: %s", peer.describe(), exc.what)
                send(error_reply(exc))
                return
            if not line:
                return
            try:
                send(service.handle(peer, parse_request(line)))
            except SlmDvfsError as exc:
                send(error_reply(exc))
            except Exception as exc:  # noqa: BLE001 - one bad request must not stop the service
                log.exception("request %r from %s failed", line[:200], peer.describe())
                send(error_reply(DeviceError(f"the service failed on this request: {type(exc).__name__}: {exc}",
                                             "see the service's log (`journalctl -u slm-dvfs-clockd`)")))
    except TimeoutError:  # reading has its own errors above: this is a reply that could not go out
        log.warning("dropped %s: its replies went unread for %g s", peer.describe(), service.idle_timeout_s)
    except OSError as exc:
        log.info("connection of %s ended: %s", peer.describe(), exc)
    finally:
        try:
            service.disconnected(peer)
        except Exception:  # noqa: BLE001 - the connection is closed whatever happened
            log.exception("restoring after %s failed", peer.describe())
        finally:
            conn.close()
            service.left(peer)
