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


def _nested_call(levels: int) -> bytes:
    """A tools/call whose argument nests `levels` deep counting the frame's own objects."""
    inner = "[" * (levels - 2) + "1" + "]" * (levels - 2)
    return (b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":'
            + inner.encode() + b"}}")


def test_it_takes_json_exactly_as_deep_as_the_one_limit() -> None:
    from mcp_bridge.contract.events import MAX_JSON_DEPTH, json_depth_problem

    assert json_depth_problem(_nested_call(MAX_JSON_DEPTH)) is None
    assert framing.classify(_nested_call(MAX_JSON_DEPTH)).action == "forward"
    too_deep = framing.classify(_nested_call(MAX_JSON_DEPTH + 1))
    assert too_deep.frame == {"jsonrpc": "2.0", "id": None, "error": {
        "code": -32700, "message": "Parse error: JSON nested deeper than 100 levels is not parsed"}}


@pytest.mark.parametrize("line", [
    b'{"a":' * 5000 + b"1" + b"}" * 5000,  # valid JSON, 5,000 deep
    b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":' + b"[" * 50_000 + b"]" * 50_000
    + b"}}",
])
def test_it_refuses_hostile_nesting_without_recursing(line: bytes) -> None:
    import sys

    limit = sys.getrecursionlimit()
    try:
        sys.setrecursionlimit(200)  # a recursive parse or clean of the line would blow this
        verdict = framing.classify(line)
    finally:
        sys.setrecursionlimit(limit)
    assert verdict.frame is not None and verdict.frame["error"]["code"] == -32700


def test_brackets_inside_strings_do_not_count() -> None:
    line = b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"s":"' + b"[{" * 500 + b'"}}'
    assert framing.classify(line).action == "forward"
