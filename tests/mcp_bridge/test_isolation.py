"""The bridge never loads the server side and never touches the network: proven, not assumed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from mcp_bridge.config import Config
from tests.mcp_bridge.stdio import INIT, ROOT, bridge_env, call, frame

FORBIDDEN = ("django", "psycopg", "psycopg2", "rest_framework", "django_q", "claims", "fleet",
             "ctxlake_site", "pgvector", "redis")

# Runs the real entry point under an audit hook; the report goes to a file because the
# bridge points fd 1 at stderr while it serves.
PROBE = """
import atexit, json, socket, sys, runpy
REPORT = sys.argv[1]
events, local = [], []
def hook(event, args):
    if event == "socket.__new__" and args[1] not in (socket.AF_UNIX,):
        events.append([event, str(args[1])])
    elif event in ("socket.bind", "socket.connect") and isinstance(args[1], (str, bytes)):
        local.append([event, str(args[1])])  # a unix socket's path: not the network
    elif event in ("socket.connect", "socket.bind", "socket.getaddrinfo", "socket.sendto",
                   "http.client.connect", "urllib.Request"):
        events.append([event, repr(args)[:200]])
sys.addaudithook(hook)
def report():
    with open(REPORT, "w") as f:
        json.dump({"modules": sorted(sys.modules), "network": events, "local": local}, f)
atexit.register(report)
sys.argv = ["mcp_bridge"]
runpy.run_module("mcp_bridge", run_name="__main__", alter_sys=True)
"""


def test_it_never_imports_the_server_side_nor_opens_a_network_socket(live: Config,
                                                                    tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    session = b"".join([
        INIT, frame(None, "notifications/initialized"), frame(2, "tools/list"),
        call(3, "memory_search", {"query": "stripe webhooks"}),  # hybrid: loads the embedder
        call(4, "memory_timeline", {"subject": "payments"}),
        call(5, "fleet_status", {}), call(6, "fleet_history", {}),
        call(7, "fleet_claim", {"paths": ["a"], "reason": "r"}),
        call(8, "memory_propose", {"claim": "c", "type": "fact", "subject": "s",
                                   "evidence": [{"session_id": "s", "message_id": "m"}]}),
        frame(9, "resources/list"),  # the SDK loads when a request needs it: this one does
    ])
    done = subprocess.run([sys.executable, "-c", PROBE, str(report)], input=session,
                          capture_output=True, env=bridge_env(live), timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr.decode()
    answers = [json.loads(line) for line in done.stdout.splitlines()]
    by_id = {a["id"]: a for a in answers}  # tool calls run beside the SDK's: any order
    assert len(answers) == 9 and all("result" in a for a in answers if a["id"] != 9)
    assert "result" in by_id[9] or "error" in by_id[9]  # answered, by the SDK
    assert by_id[3]["result"]["structuredContent"]["mode"] == "hybrid"
    seen = json.loads(report.read_text())
    loaded = {m.split(".")[0] for m in seen["modules"]}
    assert not loaded & set(FORBIDDEN)
    assert "onnxruntime" in loaded and "mcp" in loaded  # the probe really exercised it all
    assert seen["network"] == []
    # the one unix socket it binds is its hook door (mcp_bridge.hook_door), in its home
    assert [e for e, path in seen["local"] if e == "socket.bind"] == ["socket.bind"]
    assert all("/run/hooks/" in path or e == "socket.connect" for e, path in seen["local"])


def test_it_imports_neither_sdk_nor_numpy_before_the_first_frame() -> None:
    code = ("import sys, mcp_bridge.__main__, mcp_bridge.transport, mcp_bridge.tools; "
            "heavy = {'mcp', 'numpy', 'onnxruntime', 'tokenizers', 'sqlite3', 'pydantic'}; "
            "sys.exit(sorted(heavy & {m.split('.')[0] for m in sys.modules}) or 0)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, cwd=ROOT,
                          env={"PYTHONPATH": str(ROOT), "PATH": ""}, timeout=30)
    assert done.returncode == 0, done.stderr.decode()
