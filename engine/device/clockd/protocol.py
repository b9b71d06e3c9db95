"""The clock service's wire protocol: one JSON object per line, both ways, versioned.

A request is `{"v": 1, "op": OP, ...}` with only the fields its operation names; a reply is
`{"v": 1, "ok": true, ...}` or `{"v": 1, "ok": false, "error": WHAT, "remedy": WHAT_TO_DO}`.
The operations are a whitelist and carry only a domain, a frequency in Hz, a mode id or a
flag: never a path, a file name or a command, so a client can ask for nothing the service
would not do on its own.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping

from engine.core.errors import ConfigError, SlmDvfsError
from engine.device.base import ClockDomain, ClockState

PROTOCOL_VERSION = 1
MAX_LINE = 4096  # bytes per request line; longer is refused (and the connection closed)

# op -> {field: type}: the whole whitelist.
_FIELDS: dict[str, dict[str, type]] = {
    "hello": {},
    "snapshot": {},
    "pin": {"domain": str, "hz": int},
    "unpin": {"domain": str},
    "set_mode": {"mode": int},
    "jetson_clocks": {"on": bool},
    "restore": {},
    "status": {},
}
OPS = tuple(_FIELDS)
CHANGING_OPS = frozenset({"snapshot", "pin", "unpin", "set_mode", "jetson_clocks"})


class ProtocolError(ConfigError):
    """A request the service does not accept (malformed, unknown, or with fields it does not take)."""


@dataclass(frozen=True)
class Request:
    op: str
    domain: ClockDomain | None = None
    hz: int | None = None
    mode: int | None = None
    on: bool | None = None

    def to_line(self) -> bytes:
        data: dict[str, Any] = {"v": PROTOCOL_VERSION, "op": self.op}
        if self.domain is not None:
            data["domain"] = self.domain.value
        for name in ("hz", "mode", "on"):
            value = getattr(self, name)
            if value is not None:
                data[name] = value
        return encode(data)


def encode(data: Mapping[str, Any]) -> bytes:
    return json.dumps(data, separators=(",", ":")).encode() + b"\n"


def _usage(op: str) -> str:
    fields = ", ".join(f'"{k}": <{t.__name__}>' for k, t in _FIELDS[op].items())
    return '{"v": %d, "op": "%s"%s}' % (PROTOCOL_VERSION, op, f", {fields}" if fields else "")


def parse_request(line: bytes) -> Request:
    """One request line, checked field by field; a ProtocolError says what was wrong."""
    if len(line) > MAX_LINE:
        raise ProtocolError(f"request of {len(line)} bytes is over the {MAX_LINE}-byte limit",
                            "send one short JSON object per line")
    try:
        data = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ProtocolError(f"request is not a JSON object: {exc}",
                            'send one JSON object per line, e.g. {"v": 1, "op": "hello"}') from None
    if not isinstance(data, dict):
        raise ProtocolError(f"request is a JSON {type(data).__name__}, not an object",
                            'send one JSON object per line, e.g. {"v": 1, "op": "hello"}')
    version = data.pop("v", None)
    if version != PROTOCOL_VERSION or isinstance(version, bool):
        raise ProtocolError(f"protocol version {version!r} is not spoken here (this service speaks {PROTOCOL_VERSION})",
                            "use the slm-dvfs that matches the service (`slm-dvfs --version` on both sides)")
    op = data.pop("op", None)
    if op not in _FIELDS:
        raise ProtocolError(f"unknown operation {op!r}", f"use one of {', '.join(OPS)}")
    wanted = _FIELDS[op]
    extra = sorted(set(data) - set(wanted))
    missing = sorted(set(wanted) - set(data))
    if extra or missing:
        what = "; ".join(p for p in (f"unexpected field(s) {extra}" if extra else "",
                                     f"missing field(s) {missing}" if missing else "") if p)
        raise ProtocolError(f"`{op}`: {what}", f"send {_usage(op)}")
    for name, kind in wanted.items():
        value = data[name]
        # bool is an int in Python: keep `true` out of hz/mode and numbers out of `on`.
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise ProtocolError(f"`{op}`: field {name!r} is {value!r}, not a {kind.__name__}", f"send {_usage(op)}")
    domain = None
    if "domain" in data:
        try:
            domain = ClockDomain(data["domain"])
        except ValueError:
            raise ProtocolError(f"`{op}`: unknown clock domain {data['domain']!r}",
                                f"use one of {', '.join(d.value for d in ClockDomain)}") from None
    if op == "pin" and data["hz"] <= 0:
        raise ProtocolError(f"`pin`: frequency {data['hz']} Hz is not positive", "send a frequency the board lists, in Hz")
    return Request(op, domain=domain, hz=data.get("hz"), mode=data.get("mode"), on=data.get("on"))


def ok_reply(**fields: Any) -> dict[str, Any]:
    return {"v": PROTOCOL_VERSION, "ok": True, **fields}


def error_reply(exc: SlmDvfsError) -> dict[str, Any]:
    return {"v": PROTOCOL_VERSION, "ok": False, "error": exc.what, "remedy": exc.remedy,
            "kind": type(exc).__name__}


def clock_to_json(state: ClockState) -> dict[str, Any]:
    return {"domain": state.domain.value, "cur_hz": state.cur_hz, "min_hz": state.min_hz, "max_hz": state.max_hz,
            "governor": state.governor, "available_governors": list(state.available_governors),
            "locked": state.locked}


def clock_from_json(data: Mapping[str, Any]) -> ClockState:
    return ClockState(domain=ClockDomain(data["domain"]), cur_hz=int(data["cur_hz"]), min_hz=int(data["min_hz"]),
                      max_hz=int(data["max_hz"]), governor=data.get("governor"),
                      available_governors=tuple(data.get("available_governors", ())),
                      locked=bool(data.get("locked", False)))
