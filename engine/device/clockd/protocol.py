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
from typing import NoReturn

from engine.core.errors import ConfigError, SlmDvfsError
from engine.device.base import ClockDomain, ClockState
from engine.core.jsontypes import JsonObject, JsonValue, as_int, as_list, as_object

PROTOCOL_VERSION = 1
MAX_LINE = 4096  # bytes per request line, its newline included; longer is refused (and the connection closed)
MAX_DIGITS = 19  # an integer field fits in 64 bits (what the kernel's clock files hold)
_EXAMPLE = '{"v": 1, "op": "hello"}'

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
_TYPE_NAMES = {str: "string", int: "integer", bool: "boolean"}
_A_TYPE = {str: "a string", int: "an integer", bool: "a boolean (true or false)"}
# integer field -> (its smallest value, what a smaller one is, what to send instead)
_LOWEST = {"hz": (1, "a frequency of {} Hz is not positive", "send a frequency the board lists, in Hz"),
           "mode": (0, "mode id {} is negative", "send a mode id that `slm-dvfs device` lists")}


class ProtocolError(ConfigError):
    """A request line or a connection the service does not accept (malformed, unknown, with
    fields it does not take, too long or too slow, one connection too many); its reply is the
    protocol's error reply."""


@dataclass(frozen=True)
class Request:
    op: str
    domain: ClockDomain | None = None
    hz: int | None = None
    mode: int | None = None
    on: bool | None = None

    def to_line(self) -> bytes:
        data: JsonObject = {"v": PROTOCOL_VERSION, "op": self.op}
        if self.domain is not None:
            data["domain"] = self.domain.value
        for name, value in (("hz", self.hz), ("mode", self.mode), ("on", self.on)):
            if value is not None:
                data[name] = value
        return encode(data)


def encode(data: JsonObject) -> bytes:
    return json.dumps(data, separators=(",", ":")).encode() + b"\n"


def _usage(op: str) -> str:
    fields = ", ".join(f'"{k}": <{_TYPE_NAMES[t]}>' for k, t in _FIELDS[op].items())
    return '{"v": %d, "op": "%s"%s}' % (PROTOCOL_VERSION, op, f", {fields}" if fields else "")


def _shown(value: object) -> str:
    """A client's value in an error, as JSON spells it (`null`, `true`, `"612"`), cut short: a
    reply never echoes a request at length (nor walks a nested value again)."""
    if isinstance(value, (list, dict)):
        return "[...]" if isinstance(value, list) else "{...}"
    text = json.dumps(value)
    return text if len(text) <= 40 else f"{text[:32]}... ({len(text)} characters)"


def _not_json(what: str) -> ProtocolError:
    return ProtocolError(f"request is not a JSON object: {what}", f"send one JSON object per line, e.g. {_EXAMPLE}")


# The decoder's hooks refuse, while it reads, what no request holds: an integer too long to be
# a field (before Python converts thousands of digits), NaN and the infinities, a repeated key.
def _integer(digits: str) -> int:
    if len(digits.lstrip("-")) > MAX_DIGITS:
        raise ProtocolError(f"a number in the request has {len(digits.lstrip('-'))} digits, more than any field "
                            f"takes ({MAX_DIGITS})", "send frequencies in Hz and mode ids as plain integers")
    return int(digits)


def _constant(name: str) -> NoReturn:
    raise ProtocolError(f"request holds {name}, which is not a JSON number", "send finite numbers only")


def _object(pairs: list[tuple[str, object]]) -> dict[str, object]:
    data: dict[str, object] = {}
    for key, value in pairs:
        if key in data:
            raise ProtocolError(f"request gives field {_shown(key)} twice", "send each field once")
        data[key] = value
    return data


def _decode(line: bytes) -> object:
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProtocolError(f"request is not UTF-8 text (byte 0x{line[exc.start]:02x} at position {exc.start})",
                            f"send one JSON object per line, in UTF-8, e.g. {_EXAMPLE}") from None
    try:
        return json.loads(text, parse_int=_integer, parse_constant=_constant, object_pairs_hook=_object)
    except RecursionError:
        raise _not_json("it nests too deeply (a request is one flat object)") from None
    except ValueError as exc:  # json.JSONDecodeError
        raise _not_json(str(exc)) from None


def parse_request(line: bytes) -> Request:
    """One request line, checked field by field. Whatever the bytes, the result is a Request
    or a ProtocolError saying what was wrong and what to send, never another exception."""
    if len(line) > MAX_LINE:
        raise ProtocolError(f"request of {len(line)} bytes is over the {MAX_LINE}-byte limit",
                            "send one short JSON object per line")
    data = _decode(line)
    if not isinstance(data, dict):
        raise ProtocolError(f"request is a JSON {type(data).__name__}, not an object",
                            f"send one JSON object per line, e.g. {_EXAMPLE}")
    version = data.pop("v", None)
    if type(version) is not int or version != PROTOCOL_VERSION:  # not `true`, not `1.0`
        raise ProtocolError(f"protocol version {_shown(version)} is not spoken here (this service speaks "
                            f"{PROTOCOL_VERSION})",
                            "use the slm-dvfs that matches the service (`slm-dvfs --version` on both sides)")
    op = data.pop("op", None)
    if not isinstance(op, str) or op not in _FIELDS:
        raise ProtocolError(f"unknown operation {_shown(op)}", f"use one of {', '.join(OPS)}")
    wanted = _FIELDS[op]
    extra = sorted(set(data) - set(wanted))
    missing = sorted(set(wanted) - set(data))
    if extra or missing:
        shown = ", ".join([_shown(k) for k in extra[:5]] + (["..."] if len(extra) > 5 else []))
        what = "; ".join(p for p in (f"unexpected field(s) {shown}" if extra else "",
                                     f"missing field(s) {', '.join(map(_shown, missing))}" if missing else "") if p)
        raise ProtocolError(f"`{op}`: {what}", f"send {_usage(op)}")
    for name, kind in wanted.items():
        value = data[name]
        # bool is an int in Python: keep `true` out of hz/mode and numbers out of `on`.
        if type(value) is not kind:
            raise ProtocolError(f'`{op}`: field "{name}" is {_shown(value)}, not {_A_TYPE[kind]}',
                                f"send {_usage(op)}")
        if kind is int and isinstance(value, int) and value < _LOWEST[name][0]:
            _, what, remedy = _LOWEST[name]
            raise ProtocolError(f"`{op}`: {what.format(value)}", remedy)
    domain = None
    if "domain" in data:
        try:
            domain = ClockDomain(data["domain"])
        except ValueError:
            raise ProtocolError(f"`{op}`: unknown clock domain {_shown(data['domain'])}",
                                f"use one of {', '.join(d.value for d in ClockDomain)}") from None
    return Request(op, domain=domain, hz=data.get("hz"), mode=data.get("mode"), on=data.get("on"))


def ok_reply(**fields: JsonValue) -> JsonObject:
    return {"v": PROTOCOL_VERSION, "ok": True, **fields}


def error_reply(exc: SlmDvfsError) -> JsonObject:
    return {"v": PROTOCOL_VERSION, "ok": False, "error": exc.what, "remedy": exc.remedy,
            "kind": type(exc).__name__}


def clock_to_json(state: ClockState) -> JsonObject:
    return {"domain": state.domain.value, "cur_hz": state.cur_hz, "min_hz": state.min_hz, "max_hz": state.max_hz,
            "governor": state.governor, "available_governors": list(state.available_governors),
            "locked": state.locked}


def clock_from_json(data: object) -> ClockState:
    """A clock as a reply carries it (read back from the socket: narrowed here)."""
    data = as_object(data)
    governor = data.get("governor")
    return ClockState(domain=ClockDomain(data["domain"]), cur_hz=as_int(data["cur_hz"]), min_hz=as_int(data["min_hz"]),
                      max_hz=as_int(data["max_hz"]), governor=None if governor is None else str(governor),
                      available_governors=tuple(str(g) for g in as_list(data.get("available_governors", ()))),
                      locked=bool(data.get("locked", False)))
