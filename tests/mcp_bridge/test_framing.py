from __future__ import annotations

import pytest

from mcp_bridge import framing

INIT = b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}'


@pytest.mark.parametrize(("line", "code", "id_"), [
    (b"not json", -32700, None),
    (b'{"jsonrpc":"2.0","id":1,"method":"ping"', -32700, None),
    (b'\xff\xfe{"jsonrpc":"2.0"}', -32700, None),
    (b'{"a": NaN}', -32700, None),
    (b"[" * 100_000, -32700, None),
    (b"[]", -32600, None),
    (b'[{"jsonrpc":"2.0","id":1,"method":"ping"}]', -32600, None),
    (b"42", -32600, None),
    (b'"ping"', -32600, None),
    (b"null", -32600, None),
    (b'{"jsonrpc":"2.0","id":7}', -32600, 7),
    (b'{"jsonrpc":"2.0","id":"x","params":{}}', -32600, "x"),
    (b'{"jsonrpc":"2.0","id":null,"method":"ping"}', -32600, None),
    (b'{"jsonrpc":"2.0","id":1.5,"method":"ping"}', -32600, None),
    (b'{"jsonrpc":"2.0","id":true,"method":"ping"}', -32600, None),
    (b'{"jsonrpc":"1.0","id":3,"method":"ping"}', -32600, 3),
    (b'{"jsonrpc":"2.0","id":3,"method":5}', -32600, 3),
    (b'{"jsonrpc":"2.0","id":3,"method":"tools/list","params":[1]}', -32602, 3),
])
def test_it_answers_each_malformed_frame_with_its_error(line: bytes, code: int,
                                                         id_: object) -> None:
    verdict = framing.classify(line)
    assert verdict.action == "reply"
    assert verdict.frame["error"]["code"] == code and verdict.frame["id"] == id_


@pytest.mark.parametrize("line", [
    b"", b"   \r\n",
    b'{"jsonrpc":"2.0","id":9,"result":{}}',
    b'{"jsonrpc":"2.0","id":9,"error":{"code":1,"message":"x"}}',
    b'{"jsonrpc":"2.0"}',
    b'{"jsonrpc":"2.0","method":5}',
    b'{"jsonrpc":"1.0","method":"notifications/initialized"}',
    b'{"jsonrpc":"2.0","method":"x","params":[1]}',
])
def test_it_never_answers_stray_responses_or_notifications(line: bytes) -> None:
    assert framing.classify(line).action == "drop"


def test_it_forwards_notifications_even_unknown_ones() -> None:
    verdict = framing.classify(b'{"jsonrpc":"2.0","method":"notifications/whatever"}')
    assert verdict.action == "forward"


def test_it_forwards_string_and_integer_ids() -> None:
    assert framing.classify(INIT).frame["id"] == 1
    assert framing.classify(INIT.replace(b'"id":1', b'"id":"abc"')).frame["id"] == "abc"


def test_it_replaces_lone_surrogates_everywhere() -> None:
    line = b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"\\udc00k":["\\ud800x"]}}'
    frame = framing.classify(line).frame
    assert frame["params"] == {"\ufffdk": ["\ufffdx"]}
    assert b"\\ud800" not in framing.encode(frame)


def test_it_treats_null_params_as_none() -> None:
    frame = framing.classify(b'{"jsonrpc":"2.0","id":1,"method":"ping","params":null}').frame
    assert "params" not in frame


def test_it_encodes_one_frame_per_line() -> None:
    data = framing.encode({"jsonrpc": "2.0", "id": 1, "result": {"t": "a\nb\u2028c\ud800"}})
    assert data.count(b"\n") == 1 and data.endswith(b"\n")
