"""What the three scripted stand-ins share (local_server.py), on a real local server: the
script must end its turn, a request finds its step by counting the calls it answers, and
the handler records every request, JSON or not."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import pytest

from tests.realclients.local_server import Say, step_index
from tests.realclients.messages_standin import Standin, ToolUse, tool_id


def call(n: int) -> str:
    return f"c{n}"


def test_a_request_is_answered_by_the_first_tool_step_past_those_it_answers() -> None:
    script = [ToolUse("a", {}), Say("mid"), ToolUse("b", {}), Say("end")]
    assert step_index(script, set(), call) == 0
    assert step_index(script, {"c0"}, call) == 2
    assert step_index(script, {"c0", "c2"}, call) == 3  # all answered: the closing Say
    assert step_index(script, {"c0", "elsewhere"}, call) == 2  # other ids do not count


def test_a_script_that_does_not_end_its_turn_is_refused() -> None:
    with pytest.raises(ValueError, match="ends with a Say"):
        Standin([ToolUse("a", {})])
    with pytest.raises(ValueError, match="ends with a Say"):
        Standin([])


def post(url: str, data: bytes) -> tuple[int, dict[str, str], Any]:
    request = urllib.request.Request(url, data=data, method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return r.status, dict(r.headers), json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), json.loads(e.read())


def test_the_handler_records_every_request_and_answers_bad_json_with_a_400() -> None:
    tools = [{"name": "memory_search"}]
    with Standin([ToolUse("memory_search", {"query": "x"}), Say("done")]) as standin:
        status, headers, body = post(standin.url + "/v1/messages", b"{not json")
        assert status == 400
        assert body["error"]["type"] == "invalid_request_error"
        assert headers["request-id"] == "req_standin"  # the API's header, on errors too
        first = {"model": "m", "tools": tools, "messages": [{"role": "user", "content": "hi"}]}
        status, _, body = post(standin.url + "/v1/messages", json.dumps(first).encode())
        assert status == 200 and body["content"][0]["id"] == tool_id(0)
        answered = {**first, "messages": [*first["messages"], {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": tool_id(0), "content": "ok"}]}]}
        status, _, body = post(standin.url + "/v1/messages", json.dumps(answered).encode())
        assert body["content"] == [{"type": "text", "text": "done"}]
        assert [r.body for r in standin.requests] == [None, first, answered]
        assert standin.agent_requests()[-1].route == "/v1/messages"
