"""The clock service's wire protocol: a whitelist that takes no paths, no files and no commands."""

from __future__ import annotations

import json

import pytest

from engine.device.base import ClockDomain
from engine.device.clockd.protocol import MAX_LINE, OPS, ProtocolError, Request, parse_request


def _line(**data: object) -> bytes:
    return json.dumps(data).encode() + b"\n"


def test_each_operation_round_trips() -> None:
    requests = [Request("hello"), Request("snapshot"), Request("pin", domain=ClockDomain.GPU, hz=612000000),
                Request("unpin", domain=ClockDomain.EMC), Request("set_mode", mode=2),
                Request("jetson_clocks", on=False), Request("restore"), Request("status")]
    assert {r.op for r in requests} == set(OPS)
    for request in requests:
        assert parse_request(request.to_line()) == request


@pytest.mark.parametrize("line, said", [
    (b"garbage\n", "not a JSON object"),
    (b"[1, 2]\n", "JSON list, not an object"),
    (b"\xff\xfe\n", "not a JSON object"),
    (_line(op="hello"), "protocol version None"),
    (_line(v=2, op="hello"), "protocol version 2"),
    (_line(v=True, op="hello"), "protocol version True"),
    (_line(v=1, op="exec", command="rm -rf /"), "unknown operation 'exec'"),
    (_line(v=1, op="pin", domain="gpu"), "missing field(s) ['hz']"),
    (_line(v=1, op="pin", domain="gpu", hz=612000000, path="/etc/shadow"), "unexpected field(s) ['path']"),
    (_line(v=1, op="jetson_clocks", on=True, store="/tmp/x"), "unexpected field(s) ['store']"),
    (_line(v=1, op="pin", domain="gpu", hz="612"), "field 'hz' is '612', not a int"),
    (_line(v=1, op="pin", domain="gpu", hz=True), "field 'hz' is True"),
    (_line(v=1, op="pin", domain="gpu", hz=6.12e8), "not a int"),
    (_line(v=1, op="pin", domain="dla", hz=1), "unknown clock domain 'dla'"),
    (_line(v=1, op="pin", domain="gpu", hz=-5), "not positive"),
    (_line(v=1, op="set_mode", mode="0; reboot"), "field 'mode'"),
    (_line(v=1, op="jetson_clocks", on=1), "field 'on' is 1, not a bool"),
])
def test_bad_requests_say_what_was_wrong_and_what_to_send(line: bytes, said: str) -> None:
    with pytest.raises(ProtocolError) as err:
        parse_request(line)
    assert said in err.value.what
    assert err.value.remedy  # every refusal says what to do


def test_an_overlong_request_is_refused() -> None:
    with pytest.raises(ProtocolError, match="limit"):
        parse_request(b'{"v": 1, "op": "hello", "x": "' + b"a" * MAX_LINE + b'"}\n')


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
