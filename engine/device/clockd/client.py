"""The clock service's client, and `ServiceDevice`: a Device whose writes go through the service.

Reads (clocks, rails, temperatures, identity) need no privilege and go straight to the kernel
files; pin, unpin, set_power_mode and jetson_clocks are requests on the socket. A `ClockGuard`
around a ServiceDevice asks the service to snapshot (`service_snapshot`) and restores through
it (`apply_settings` of that snapshot sends `restore`); the service holds the journal and the
board lock, and restores by itself if this process dies.

`attach_service(device)` is what `open_device` calls for a board: the service when one serves
this board, direct writes when this process may write (root, or a tree it owns), else a device
whose writes fail with how to set the service up.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import socket
import threading
from pathlib import Path
from typing import Mapping

from engine.core.errors import DeviceError
from engine.core.jsontypes import JsonObject, as_int, as_list, as_object
from engine.device.base import (ClockDomain, ClockState, Device, DeviceIdentity, DeviceSettings, PowerMode, RailReading,
                                TemperatureReading)
from engine.device.clockd.membership import NotInGroupError, refused_at_socket
from engine.device.clockd.protocol import PROTOCOL_VERSION, Request, clock_from_json

log = logging.getLogger(__name__)

DEFAULT_SOCKET = Path("/run/slm-dvfs/clockd.sock")
SOCKET_ENV = "SLM_DVFS_CLOCKD_SOCKET"
MODE_ENV = "SLM_DVFS_CLOCKD"
NOT_OURS_REMEDY = (f"point ${SOCKET_ENV} at the slm-dvfs clock service's socket (default {DEFAULT_SOCKET}), "
                   "or unset it; `systemctl status slm-dvfs-clockd` shows whether the service runs")
SETUP_REMEDY = ("start the clock service (`sudo systemctl start slm-dvfs-clockd`; set it up once with "
                "`sudo slm-dvfs clockd --install`), or run as root")


class ServiceUnavailableError(DeviceError):
    """No clock service answers at the socket."""


def socket_path() -> Path:
    """Where the service listens: $SLM_DVFS_CLOCKD_SOCKET, else /run/slm-dvfs/clockd.sock."""
    return Path(os.environ.get(SOCKET_ENV) or DEFAULT_SOCKET)


# A reply as read from the socket: a JSON object whose fields each caller narrows (the service is
# another process, perhaps another version: nothing in a reply is trusted to be of its type).
Reply = dict[str, object]


class ClockdClient:
    """One connection to the service; each call is one request and its reply (thread-safe)."""

    def __init__(self, path: Path | None = None, *, timeout_s: float = 120.0) -> None:
        self.path = Path(path) if path is not None else socket_path()
        self._lock = threading.Lock()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout_s)  # nvpmodel and jetson_clocks take seconds on a board
        try:
            sock.connect(os.fspath(self.path))
        except PermissionError:
            sock.close()
            raise refused_at_socket(self.path) from None  # names the socket's group and how to join it
        except OSError as exc:
            sock.close()
            if exc.errno in (errno.ENOENT, errno.ECONNREFUSED, errno.ENOTSOCK):
                raise ServiceUnavailableError(f"no clock service is running at {self.path}", SETUP_REMEDY) from None
            raise DeviceError(f"cannot connect to the clock service at {self.path}: {exc}", SETUP_REMEDY) from None
        self._sock = sock
        self._reader = sock.makefile("rb")
        self._dead: str | None = None  # why this connection can no longer be used

    def _kill(self, why: str) -> None:
        """Close a connection whose request/reply pairing is lost (a reply may still come)."""
        self._dead = why
        try:
            self.close()
        except OSError:
            pass

    def request(self, op: str, *, domain: str | None = None, hz: int | None = None, mode: int | None = None,
                on: bool | None = None) -> Reply:
        """Send one request; the reply's fields, or a DeviceError carrying the service's words."""
        line = Request(op, domain=None if domain is None else ClockDomain(domain), hz=hz, mode=mode, on=on).to_line()
        with self._lock:
            if self._dead is not None:
                raise DeviceError(f"the connection to the clock service at {self.path} is closed ({self._dead}); "
                                  f"`{op}` was not sent", "start the command again")
            try:
                self._sock.sendall(line)
            except TimeoutError as exc:
                self._kill(f"`{op}` timed out")
                raise DeviceError(f"the clock service at {self.path} did not take `{op}` in time: {exc}",
                                  "check it is running (`systemctl status slm-dvfs-clockd`)") from None
            except OSError as exc:  # it may have refused us and closed: its reply says why
                sent: OSError | None = exc
            else:
                sent = None
            try:
                raw = self._reader.readline(1 << 20)
            except TimeoutError as exc:  # a late reply would answer the next request: never reuse
                self._kill(f"`{op}` timed out")
                raise DeviceError(f"the clock service at {self.path} did not answer `{op}` in time: {exc}",
                                  "check it is running and not stuck (`systemctl status slm-dvfs-clockd`, "
                                  "`journalctl -u slm-dvfs-clockd`)") from None
            except OSError as exc:
                raw, sent = b"", sent or exc
            if not raw or not raw.endswith(b"\n"):
                self._kill(f"it ended on `{op}`")
        if not raw and sent is not None:
            raise DeviceError(f"the clock service at {self.path} did not answer `{op}`: {sent}",
                              "check it is running (`systemctl status slm-dvfs-clockd`)")
        if not raw:
            raise DeviceError(f"the clock service at {self.path} closed the connection on `{op}`",
                              "see its log (`journalctl -u slm-dvfs-clockd`)")
        try:
            reply = json.loads(raw)
        except ValueError:
            reply = None
        if not isinstance(reply, dict) or "ok" not in reply:
            with self._lock:
                self._kill(f"its answer to `{op}` was not the clock service's")
            raise DeviceError(f"{self.path} is not an slm-dvfs clock service (it answered `{op}` with "
                              f"{raw[:80]!r})", NOT_OURS_REMEDY)
        if not reply.get("ok"):
            kind = NotInGroupError if reply.get("kind") == NotInGroupError.__name__ else DeviceError
            raise kind(str(reply.get("error") or "the clock service refused the request"), str(reply.get("remedy") or ""))
        return reply

    def hello(self) -> Reply:
        return self.request("hello")

    def snapshot(self) -> DeviceSettings:
        return DeviceSettings.from_json(as_object(self.request("snapshot")["settings"]))

    def pin(self, domain: ClockDomain, hz: int) -> ClockState:
        return clock_from_json(self.request("pin", domain=ClockDomain(domain).value, hz=int(hz))["clock"])

    def unpin(self, domain: ClockDomain) -> ClockState:
        return clock_from_json(self.request("unpin", domain=ClockDomain(domain).value)["clock"])

    def set_mode(self, mode_id: int) -> None:
        self.request("set_mode", mode=int(mode_id))

    def jetson_clocks(self, on: bool) -> None:
        self.request("jetson_clocks", on=bool(on))

    def restore(self) -> bool:
        return bool(self.request("restore").get("restored"))

    def status(self) -> Reply:
        return self.request("status")

    def close(self) -> None:
        self._dead = self._dead or "it was closed"  # a later request says so, rather than failing on the file
        try:
            self._reader.close()
        finally:
            self._sock.close()


class ServiceDevice:
    """A board whose reads are direct and whose writes are the clock service's (`client`);
    with no client every write fails with `problem` (how to get the service)."""

    def __init__(self, device: Device, client: ClockdClient | None, problem: DeviceError | None = None) -> None:
        self.inner = device
        self.client = client
        self.problem = problem
        self._snapshot: DeviceSettings | None = None

    def __repr__(self) -> str:
        return f"ServiceDevice({self.inner!r}, socket={self.client.path if self.client else None})"

    def __getattr__(self, name: str) -> object:
        # reads the Device protocol does not name (root, tree, rail, ...): their callers narrow them
        return getattr(self.inner, name)

    def require_client(self) -> ClockdClient:
        """The connection writes go through; without one, why this process cannot write (not
        in the service's group, no service running)."""
        if self.client is None:
            raise self.problem or DeviceError("this process may not write the board's clocks (not root)", SETUP_REMEDY)
        return self.client

    def close(self) -> None:
        """Close the board's files and the connection (the service restores what it still held):
        a closed session holds none of its user's connections to the service."""
        try:
            close_inner = getattr(self.inner, "close", None)
            if callable(close_inner):
                close_inner()
        finally:
            if self.client is not None:
                self.client.close()

    # reads: straight from the kernel files
    def identity(self) -> DeviceIdentity:
        return self.inner.identity()

    def clock_table(self, domain: ClockDomain) -> tuple[int, ...]:
        try:
            return self.inner.clock_table(domain)
        except DeviceError as exc:
            return tuple(as_int(hz) for hz in as_list(self._served_clock(domain, exc)["table"]))

    def clock(self, domain: ClockDomain) -> ClockState:
        try:
            return self.inner.clock(domain)
        except DeviceError as exc:
            return clock_from_json(self._served_clock(domain, exc))

    def _served_clock(self, domain: ClockDomain, exc: DeviceError) -> Mapping[str, object]:
        """A domain this process cannot read (the EMC lives in root-only debugfs), as the service
        reads it; the first error stands where there is no service or it cannot read it either."""
        if self.client is None:
            raise exc
        clock = as_object(as_object(self.client.status()["clocks"]).get(ClockDomain(domain).value) or {})
        if "error" in clock or "table" not in clock:
            raise exc
        return clock

    def rails(self) -> tuple[RailReading, ...]:
        return self.inner.rails()

    def rail_update_interval_s(self) -> float:
        return self.inner.rail_update_interval_s()

    def temperatures(self) -> tuple[TemperatureReading, ...]:
        return self.inner.temperatures()

    def gpu_load(self) -> float:
        return self.inner.gpu_load()

    def power_modes(self) -> tuple[PowerMode, ...]:
        return self.inner.power_modes()

    def power_mode(self) -> PowerMode:
        try:
            return self.inner.power_mode()
        except DeviceError as exc:  # e.g. nvpmodel not runnable by this user: ask the service
            if self.client is None:
                raise
            mode_id = self.client.status().get("mode")
            if not isinstance(mode_id, int):
                raise exc from None
            return next((m for m in self.inner.power_modes() if m.id == mode_id), None) or PowerMode(
                mode_id, f"MODE_{mode_id}")

    def read_settings(self) -> DeviceSettings:
        return self.inner.read_settings()

    def describe(self) -> JsonObject:
        inner = self.inner.describe()
        return {"kind": "clockd", "root": inner.get("root"), "socket": str(self.client.path if self.client else None)}

    # writes: requests to the service
    def pin(self, domain: ClockDomain, hz: int) -> ClockState:
        return self.require_client().pin(domain, hz)

    def unpin(self, domain: ClockDomain) -> ClockState:
        return self.require_client().unpin(domain)

    def set_power_mode(self, mode_id: int) -> None:
        self.require_client().set_mode(mode_id)

    def jetson_clocks(self, store: Path | None = None) -> None:
        # The service keeps jetson_clocks' store in its own directory: a client names no files.
        self.require_client().jetson_clocks(True)

    def jetson_clocks_restore(self, store: Path) -> None:
        self.require_client().jetson_clocks(False)

    # the guard's side: the service snapshots, journals, locks and restores
    def service_snapshot(self) -> DeviceSettings:
        self._snapshot = self.require_client().snapshot()
        return self._snapshot

    def apply_settings(self, settings: DeviceSettings) -> None:
        if self._snapshot is None or settings != self._snapshot:
            raise DeviceError("through the clock service only the snapshot it took can be restored",
                              "restore inside the clock guard that took it (the service also restores when "
                              "this process exits)")
        self.require_client().restore()
        self._snapshot = None


def _may_write(device: Device) -> bool:
    """Whether this process can write the board's clock files itself (root, or a tree it owns)."""
    if os.geteuid() == 0:
        return True
    from engine.device.jetson import JetsonDevice

    if not isinstance(device, JetsonDevice):  # only the sysfs backend has clock files of its own
        return False
    try:
        gpu = device.nodes.require_gpu()
        return os.access(device.tree.path(f"{gpu}/max_freq"), os.W_OK)
    except (DeviceError, OSError):
        return False


def _same_root(a: object, b: object) -> bool:
    try:
        return isinstance(a, str) and isinstance(b, str) and Path(a).resolve() == Path(b).resolve()
    except OSError:
        return False


def attach_service(device: Device) -> Device:
    """The device `open_device` hands out for a board: see the module's docstring.
    SLM_DVFS_CLOCKD=off writes directly whatever happens (a board whose files udev opened to
    this user, or a test that wants the kernel's own refusal)."""
    if os.environ.get(MODE_ENV, "").strip().lower() in ("off", "0", "no", "direct"):
        return device
    path = socket_path()
    problem: DeviceError | None = None
    try:
        client = ClockdClient(path)
    except ServiceUnavailableError as exc:
        client, problem = None, exc
    except DeviceError as exc:  # there, but not ours to use
        client, problem = None, exc
    if client is not None:
        try:
            hello = client.hello()
        except DeviceError as exc:
            client.close()
            client, problem = None, exc
        else:
            if hello.get("protocol") == PROTOCOL_VERSION and _same_root(hello.get("root"), device.describe().get("root")):
                log.info("clock writes go through the clock service at %s", path)
                return ServiceDevice(device, client)
            client.close()
            client = None
            problem = DeviceError(f"the clock service at {path} serves {hello.get('root')}, not this board",
                                  SETUP_REMEDY)
    if _may_write(device):
        return device
    return ServiceDevice(device, None, problem)


__all__ = ["ClockdClient", "NotInGroupError", "ServiceDevice", "ServiceUnavailableError", "attach_service",
           "socket_path"]
