"""Reading a client's request lines off its socket: each line whole, at most `MAX_LINE` bytes,
and in time. A connection's first line must come within the idle timeout of connecting, and
each later line within it of the line's first byte; between whole requests a client may wait
as long as it likes (a run holds the board for hours between its pin and its restore)."""

from __future__ import annotations

import socket
import time

from engine.device.clockd.protocol import MAX_LINE, ProtocolError

DEFAULT_IDLE_TIMEOUT_S = 30.0


class LineReader:
    """The request lines of one connection."""

    def __init__(self, conn: socket.socket, idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S) -> None:
        self._conn = conn
        self.idle_timeout_s = idle_timeout_s
        self._buffer = bytearray()
        self._lines = 0

    def readline(self) -> bytes:
        """The next line, newline included; b"" once the client has closed (a partial line is
        dropped). A ProtocolError for a line over the cap (where the next one starts cannot be
        told) or one too slow to come: either way the connection is done."""
        deadline: float | None = None
        while True:
            end = self._buffer.find(b"\n", 0, MAX_LINE)
            if end >= 0:
                line = bytes(self._buffer[:end + 1])
                del self._buffer[:end + 1]
                self._lines += 1
                return line
            if len(self._buffer) >= MAX_LINE:
                raise ProtocolError(f"request line over the {MAX_LINE}-byte limit (no newline in its first "
                                       f"{MAX_LINE} bytes): closing the connection",
                                       "send one short JSON object per line, each ending in a newline")
            if deadline is None and (self._buffer or not self._lines):
                deadline = time.monotonic() + self.idle_timeout_s
            if deadline is None:
                self._conn.settimeout(None)
            else:
                self._conn.settimeout(max(deadline - time.monotonic(), 0.0) or 1e-6)
            try:
                chunk = self._conn.recv(MAX_LINE)
            except TimeoutError:
                raise self._too_slow() from None
            if not chunk:
                return b""
            self._buffer += chunk

    def _too_slow(self) -> ProtocolError:
        limit = f"{self.idle_timeout_s:g} s"
        if self._buffer:
            return ProtocolError(f"a request line did not end (no newline) within {limit}: closing the connection",
                                    "send each request as one whole line, ending in a newline")
        return ProtocolError(f"no request within {limit} of connecting: closing the connection",
                                "send the first request as soon as you connect (e.g. "
                                '{"v": 1, "op": "hello"}); the service drops connections that send nothing')
