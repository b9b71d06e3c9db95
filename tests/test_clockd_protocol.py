"""The clock service's wire protocol: a whitelist that takes no paths, no files and no commands."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from engine.device.base import ClockDomain
from engine.device.clockd.protocol import (
    MAX_LINE,
    OPS,
    ProtocolError,
    Request,
    encode,
    error_reply,
    parse_request,
)


def _line(**data: object) -> bytes:
    return json.dumps(data).encode() + b"\n"


def test_each_operation_round_trips() -> None:
    requests = [Request("hello"), Request("snapshot"), Request("pin", domain=ClockDomain.GPU, hz=612000000),
                Request("unpin", domain=ClockDomain.EMC), Request("set_mode", mode=2),
                Request("jetson_clocks", on=False), Request("restore"), Request("status")]
    assert {r.op for r in requests} == set(OPS)
    for request in requests:
        assert parse_request(request.to_line()) == request


BAD = [
    (b"garbage\n", "not a JSON object"),
    (b"[1, 2]\n", "JSON list, not an object"),
    (b"\xff\xfe\n", "not UTF-8 text (byte 0xff at position 0)"),
    (_line(op="hello"), "protocol version null"),
    (_line(v=2, op="hello"), "protocol version 2"),
    (_line(v=True, op="hello"), "protocol version true"),
    (_line(v=1.0, op="hello"), "protocol version 1.0"),
    (_line(v=1, op="exec", command="rm -rf /"), 'unknown operation "exec"'),
    (_line(v=1, op="pin", domain="gpu"), 'missing field(s) "hz"'),
    (_line(v=1, op="pin", domain="gpu", hz=612000000, path="/etc/shadow"), 'unexpected field(s) "path"'),
    (_line(v=1, op="jetson_clocks", on=True, store="/tmp/x"), 'unexpected field(s) "store"'),
    (_line(v=1, op="pin", domain="gpu", hz="612"), 'field "hz" is "612", not an integer'),
    (_line(v=1, op="pin", domain="gpu", hz=True), 'field "hz" is true, not an integer'),
    (_line(v=1, op="pin", domain="gpu", hz=6.12e8), "612000000.0, not an integer"),
    (_line(v=1, op="pin", domain="dla", hz=1), 'unknown clock domain "dla"'),
    (_line(v=1, op="pin", domain="gpu", hz=-5), "not positive"),
    (_line(v=1, op="set_mode", mode="0; reboot"), 'field "mode"'),
    (_line(v=1, op="set_mode", mode=-1), "mode id -1 is negative"),
    (_line(v=1, op="jetson_clocks", on=1), 'field "on" is 1, not a boolean'),
    # issue 20: values of the wrong kind, size or shape get the protocol's error, not a TypeError
    (_line(v=1, op=["pin"]), "unknown operation [...]"),
    (_line(v=1, op={"pin": 1}), "unknown operation {...}"),
    (_line(v=1, op="pin", domain="gpu", hz=10 ** 400), "has 401 digits"),
    (_line(v=1, op="set_mode", mode=-(10 ** 30)), "has 31 digits"),
    (b'{"v": 1, "op": "pin", "domain": "gpu", "hz": 1e400}\n', 'field "hz" is Infinity, not an integer'),
    (b'{"v": 1, "op": "pin", "domain": "gpu", "hz": NaN}\n', "holds NaN, which is not a JSON number"),
    (b'{"v": 1, "op": "set_mode", "mode": -Infinity}\n', "holds -Infinity"),
    (_line(v=1, op="pin", domain="gpu", hz=None), 'field "hz" is null, not an integer'),
    (_line(v=1, op="set_mode", mode=2.0), 'field "mode" is 2.0, not an integer'),
    (_line(v=1, op="set_mode", mode=False), 'field "mode" is false, not an integer'),
    (_line(v=1, op="pin", domain=["gpu"], hz=1), 'field "domain" is [...], not a string'),
    (_line(v=1, op="jetson_clocks", on=None), 'field "on" is null, not a boolean'),
    (b"[" * 2000 + b"]" * 2000 + b"\n", "nests too deeply"),
    (b'{"v": 1, "op": "hello", "x": ' + b"[" * 1500 + b"]" * 1500 + b"}\n", "nests too deeply"),
    (b'{"v": 1, "op": "hello", "op": "pin"}\n', 'gives field "op" twice'),
    (_line(v=1, op="hello", **{"x" * 500: 1}), "... (502 characters)"),
]


@pytest.mark.parametrize("line, said", BAD, ids=[said for _, said in BAD])
def test_bad_requests_say_what_was_wrong_and_what_to_send(line: bytes, said: str) -> None:
    with pytest.raises(ProtocolError) as err:
        parse_request(line)
    assert said in err.value.what
    assert err.value.remedy  # every refusal says what to do


def test_an_overlong_request_is_refused() -> None:
    with pytest.raises(ProtocolError, match="limit"):
        parse_request(b'{"v": 1, "op": "hello", "x": "' + b"a" * MAX_LINE + b'"}\n')
    with pytest.raises(ProtocolError, match="limit"):  # a 5000-digit number never reaches int()
        parse_request(b'{"v": 1, "op": "pin", "domain": "gpu", "hz": ' + b"9" * 5000 + b"}\n")


# --- fuzzing the parser: whatever the line, a Request or the protocol's own error ---------------
FUZZ = settings(max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
_FIELD_NAMES = st.sampled_from(["v", "op", "domain", "hz", "mode", "on", "path", "", "V"])
_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(10 ** 40), max_value=10 ** 40),
                     st.integers(min_value=-(2 ** 64), max_value=2 ** 64), st.floats(allow_nan=True),
                     st.text(max_size=12), st.sampled_from(OPS), st.sampled_from([d.value for d in ClockDomain]),
                     st.just(1))
_VALUES = st.recursive(_SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                         st.dictionaries(st.text(max_size=4), inner, max_size=3)),
                       max_leaves=8)
_OBJECTS = st.dictionaries(_FIELD_NAMES, _VALUES, max_size=6)
_JSON_TEXT = st.one_of(_OBJECTS, _VALUES).map(lambda value: json.dumps(value).encode())
# JSON's own spellings that json.dumps never writes: huge or deep numbers, escapes, lone surrogates
_TOKENS = st.sampled_from([b"{", b"}", b"[", b"]", b",", b":", b'"v"', b'"op"', b'"pin"', b'"hz"', b'"gpu"', b"1",
                           b"-", b"0", b"9" * 30, b"1e400", b"NaN", b"-Infinity", b"true", b"null", b'"\\ud800"',
                           b'"\\u0000"', b"\xff", b"\xc3", b"\x00", b" ", b"\n", b'"'])
_LINES = st.one_of(_JSON_TEXT, st.binary(max_size=64), st.lists(_TOKENS, max_size=40).map(b"".join),
                   st.integers(min_value=0, max_value=5000).map(lambda depth: b"[" * depth + b"]" * depth))


def _check(line: bytes) -> None:
    try:
        request = parse_request(line)
    except ProtocolError as exc:
        assert exc.what and exc.remedy
        assert len(encode(error_reply(exc))) <= MAX_LINE  # the reply never echoes the request at length
        return
    # accepted: a whitelisted op with exactly its fields, of the right kind and range, that round-trips
    assert request.op in OPS
    if request.hz is not None:
        assert type(request.hz) is int and 0 < request.hz < 2 ** 63
    if request.mode is not None:
        assert type(request.mode) is int and 0 <= request.mode < 2 ** 63
    assert request.on is None or type(request.on) is bool
    assert parse_request(request.to_line()) == request


@FUZZ
@given(_LINES, st.sampled_from([b"\n", b"", b"\r\n"]))
@example(b'{"v": 1, "op": ["pin"]}', b"\n")
@example(b'{"v": 1, "op": "pin", "domain": "gpu", "hz": 1' + b"0" * 400 + b"}", b"\n")
@example(b"[" * 2000, b"\n")
@example(b'{"v": 1, "op": "hello", "\xed\xa0\x80": 1}', b"\n")
def test_any_line_gives_a_request_or_the_protocols_error(line: bytes, end: bytes) -> None:
    _check(line + end)


@FUZZ
@given(st.fixed_dictionaries({"v": st.one_of(st.just(1), _VALUES), "op": st.one_of(st.sampled_from(OPS), _VALUES)},
                             optional={"domain": _VALUES, "hz": _VALUES, "mode": _VALUES, "on": _VALUES}))
def test_requests_with_any_values_give_a_request_or_the_protocols_error(data: dict[str, object]) -> None:
    """Near-valid requests: every field an operation names, with values of any kind and size."""
    _check(json.dumps(data).encode() + b"\n")


# --- the client against something that is not the clock service -----------------------------
@pytest.fixture
def fake_service(tmp_path):  # type: ignore[no-untyped-def]
    """A Unix socket whose server answers each request line with the bytes given (None: never)."""
    import socket
    import threading

    path = tmp_path / "other.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(4)
    answers: list[bytes | None] = []
    conns: list[socket.socket] = []

    def serve() -> None:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        conns.append(conn)
        reader = conn.makefile("rb")
        try:
            while reader.readline():
                answer = answers.pop(0) if answers else None
                if answer is not None:
                    conn.sendall(answer)
        except OSError:
            pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield path, answers
    listener.close()
    for conn in conns:
        conn.close()
    thread.join(timeout=5)


@pytest.mark.parametrize("answer", [b"garbage\n", b"[1, 2]\n", b'"ok"\n', b'{"jsonrpc": "2.0"}\n', b"\xff\n"])
def test_a_socket_that_is_not_the_clock_service_is_named_so(fake_service, answer: bytes) -> None:  # type: ignore[no-untyped-def]
    from engine.core.errors import DeviceError
    from engine.device.clockd.client import SOCKET_ENV, ClockdClient

    path, answers = fake_service
    answers.append(answer)
    client = ClockdClient(path, timeout_s=10)
    with pytest.raises(DeviceError) as err:
        client.hello()
    assert f"{path} is not an slm-dvfs clock service" in err.value.what
    assert SOCKET_ENV in err.value.remedy
    with pytest.raises(DeviceError, match="connection to the clock service .* is closed"):
        client.status()  # the connection is not reused


def test_a_request_that_times_out_closes_the_connection(fake_service) -> None:  # type: ignore[no-untyped-def]
    from engine.core.errors import DeviceError
    from engine.device.clockd.client import ClockdClient

    path, answers = fake_service
    answers.extend([None, b'{"v": 1, "ok": true, "late": true}\n'])  # no answer to the first request
    client = ClockdClient(path, timeout_s=0.3)
    with pytest.raises(DeviceError, match="did not answer `hello` in time"):
        client.hello()
    with pytest.raises(DeviceError, match="is closed .*`status` was not sent"):
        client.status()  # never pairs a late reply with a later request
