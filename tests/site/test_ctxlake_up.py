"""`./ctxlake up` as a good server: checks before it starts, stops everything, fast.

Each test runs the real script in a session of its own (start_new_session), against a
private CTXLAKE_HOME (its own embedded Postgres) and a borrowed venv, and after the script
exits lists every process still in that session: the web server, the workers and all
their children must be gone. (The embedded Postgres is not among them: pg_ctl starts it
in a session of its own, and it is meant to outlive `up`.)
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ctxlake_site import embedded_db
from tests.helpers import ctxlake_script
from tests.site.homes import (
    ROOT,
    borrowed_venv,
    private_env,
    private_home,
    processes_in_session,
    shell,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    """(CTXLAKE_HOME, CTXLAKE_VENV) shared by this module's tests."""
    venv = borrowed_venv(tmp_path_factory.mktemp("venv"))
    with private_home() as home:
        yield home, venv


def _env(home: tuple[Path, Path], **extra: str) -> dict[str, str]:
    return private_env(home[0], CTXLAKE_VENV=str(home[1]), **extra)


def _wait_for_heartbeat(home: Path, deadline_secs: float = 180) -> None:
    deadline = time.monotonic() + deadline_secs
    while shell(home, "from django_q.status import Stat; print(len(Stat.get_all()))") == "0":
        assert time.monotonic() < deadline, "the cluster never saved a heartbeat"
        time.sleep(0.5)


def _ctxlake(home: tuple[Path, Path], *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "ctxlake"), *args], cwd=ROOT, env=_env(home, **env),
        capture_output=True, text=True, timeout=120, start_new_session=True,
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Up:
    """A running `./ctxlake up`, its output collected line by line by a thread."""

    def __init__(self, home: tuple[Path, Path], port: int) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(ROOT / "ctxlake"), "up", "--port", str(port)], cwd=ROOT,
            env=_env(home), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            start_new_session=True,
        )
        self.pid = self.proc.pid
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_for(self, marker: str, timeout: float = 180) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = next((line for line in self.lines if marker in line), None)
            if found is not None:
                return found
            if self.proc.poll() is not None and not self.reader.is_alive():
                break
            time.sleep(0.1)
        raise AssertionError(f"no {marker!r} in the output of up: {self.lines}")

    def finish(self, timeout: float = 30) -> str:
        self.proc.wait(timeout=timeout)
        self.reader.join(timeout=5)
        return "\n".join(self.lines)

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.pid, signal.SIGKILL)


def _no_orphans(sid: int) -> None:
    deadline = time.monotonic() + 60  # reaping by init is not instant (a hang's deadline)
    while processes_in_session(sid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_in_session(sid) == []


@pytest.mark.parametrize(
    ("args", "env", "line"),
    [
        ((), {"CTXLAKE_PORT": "abc"}, "CTXLAKE_PORT='abc' is not allowed: a TCP port number"),
        (("--port", "0"), {}, "--port='0' is not allowed: a TCP port number, 1-65535"),
        (("--port", "70000"), {}, "--port='70000' is not allowed"),
        (("--workers", "none"), {}, "--workers='none' is not allowed"),
        ((), {"CTXLAKE_BIND_HOST": "no-such-host.invalid"},
         "--host/CTXLAKE_BIND_HOST='no-such-host.invalid' is not allowed"),
        ((), {"DEBUG": "maybe"}, "DEBUG='maybe' is not allowed: a boolean"),
    ],
)
def test_a_bad_option_or_setting_is_one_line_and_status_2(
    home: tuple[Path, Path], args: tuple[str, ...], env: dict[str, str], line: str
) -> None:
    port = () if "CTXLAKE_PORT" in env or "--port" in args else ("--port", str(_free_port()))
    run = _ctxlake(home, "up", *port, *args, **env)
    assert run.returncode == 2, run.stdout + run.stderr
    (said,) = run.stderr.splitlines()
    assert said.startswith(f"ctxlake: bad setting: {line}"), said
    assert "Traceback" not in run.stdout + run.stderr and "admin at" not in run.stdout


def test_a_taken_port_is_refused_before_anything_starts(home: tuple[Path, Path]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.Popen(
            [sys.executable, str(ROOT / "ctxlake"), "up", "--port", str(port)], cwd=ROOT,
            env=_env(home), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            start_new_session=True,
        )
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 4, out
    assert f"port {port} on 127.0.0.1 is not free" in out
    assert "--port N or CTXLAKE_PORT=N" in out and "admin at" not in out
    # nothing started before the check: no install, no set-up step, no server
    for later in ("installing", "virtual environment", "setup_local", "collectstatic",
                  "failed with status", "gunicorn", "qcluster"):
        assert later not in out, out
    _no_orphans(proc.pid)


def test_up_serves_refuses_a_second_up_and_ctrl_c_stops_everything(
    home: tuple[Path, Path],
) -> None:
    port = _free_port()
    up = Up(home, port)
    try:
        url = up.wait_for("admin at").split("admin at ")[1].split()[0]
        assert url == f"http://127.0.0.1:{port}/admin/"
        with urllib.request.urlopen(url + "login/", timeout=10) as response:
            assert response.status == 200  # printed only once the server answers

        status = _ctxlake(home, "status")
        assert status.returncode == 0 and "running: pid" in status.stdout
        assert f"http://127.0.0.1:{port}/" in status.stdout

        second = subprocess.Popen(
            [sys.executable, str(ROOT / "ctxlake"), "up", "--port", str(_free_port())],
            cwd=ROOT, env=_env(home), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, start_new_session=True,
        )
        out, _ = second.communicate(timeout=60)
        assert second.returncode == 3, out
        assert "already running" in out and "./ctxlake stop" in out
        _no_orphans(second.pid)

        children = processes_in_session(up.pid)
        assert any("gunicorn" in cmd for _, cmd in children)
        assert any("qcluster" in cmd for _, cmd in children)
        # the cluster's task workers were the orphans: wait until they are all up (its
        # guard saves the cluster's first heartbeat once it has spawned them)
        _wait_for_heartbeat(home[0])
        os.kill(up.pid, signal.SIGINT)  # what Ctrl-C in its terminal sends
        up.proc.wait(timeout=60)  # a deadline for a hang; `up` prints how long it took
        rest = up.finish()
    finally:
        up.kill()
    assert up.proc.returncode == 0, rest
    assert "stopped (SIGINT)" in rest
    _no_orphans(up.pid)
    assert _ctxlake(home, "status").returncode == 3


def _has_open(pid: int, path: Path) -> bool:
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{pid}/fd/{fd}") == str(path):
                    return True
    return False


def test_up_waits_out_a_status_probe_holding_the_lock_for_an_instant(
    home: tuple[Path, Path],
) -> None:
    """`status` and `stop` take the instance lock for an instant to see whether an `up`
    holds it. An `up` that meets it then waits it out rather than calling itself already
    running: a `status` in a second terminal once made a starting `up` give up."""
    lock = home[0] / "run" / "up.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    probe = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(probe, fcntl.LOCK_EX)  # what running() does, held until `up` meets it
    up = Up(home, _free_port())
    try:
        deadline = time.monotonic() + 120
        while not _has_open(up.pid, lock) and up.proc.poll() is None:
            assert time.monotonic() < deadline, "up never opened its lock"
            time.sleep(0.01)
        time.sleep(0.1)  # `up` is in its try for the lock now (or gave up: the old code)
        os.close(probe)
        up.wait_for("admin at")
        stop = _ctxlake(home, "stop")
        assert stop.returncode == 0 and "stopped (pid" in stop.stdout, stop.stdout
        up.finish()
    finally:
        with contextlib.suppress(OSError):
            os.close(probe)
        up.kill()
    assert up.proc.returncode == 0, up.lines
    _no_orphans(up.pid)


def test_stop_from_a_second_terminal(home: tuple[Path, Path]) -> None:
    """Also: `up` lifts an operator's `embedded_db stop` (docs/deployment.md says so)."""
    embedded_db.stop(home[0] / "pg")
    assert embedded_db.stopped_on_purpose(home[0] / "pg")
    up = Up(home, _free_port())
    try:
        up.wait_for("admin at")
        assert embedded_db.stopped_on_purpose(home[0] / "pg") is None
        assert embedded_db.is_running(home[0] / "pg")
        stop = _ctxlake(home, "stop")
        assert stop.returncode == 0 and "stopped (pid" in stop.stdout, stop.stdout
        up.finish()
    finally:
        up.kill()
    assert up.proc.returncode == 0
    _no_orphans(up.pid)
    again = _ctxlake(home, "stop")
    assert again.returncode == 0 and "not running" in again.stdout


def test_a_dying_child_stops_the_rest_with_status_1(home: tuple[Path, Path]) -> None:
    up = Up(home, _free_port())
    try:
        up.wait_for("admin at")
        (master,) = [pid for pid, cmd in processes_in_session(up.pid)
                     if "gunicorn" in cmd and _parent(pid) == up.pid]
        os.kill(master, signal.SIGKILL)
        rest = up.finish()
    finally:
        up.kill()
    assert up.proc.returncode == 1, rest
    assert "the web server (gunicorn) exited with status -9; stopping everything" in rest
    _no_orphans(up.pid)


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def test_stop_cleans_up_after_an_up_that_was_killed(home: tuple[Path, Path]) -> None:
    """SIGKILL leaves the supervisor no chance; the next `stop` (or `up`) stops what it left."""
    up = Up(home, _free_port())
    try:
        up.wait_for("admin at")
        os.kill(up.pid, signal.SIGKILL)
        up.finish()
        assert any("gunicorn" in cmd for _, cmd in processes_in_session(up.pid))
        status = _ctxlake(home, "status")
        assert status.returncode == 3  # the lock died with it
        stop = _ctxlake(home, "stop")
        assert stop.returncode == 0
        assert "stopped 2 process group(s) left by an earlier `up`" in stop.stdout, stop.stdout
    finally:
        up.kill()
        for pid, _ in processes_in_session(up.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    _no_orphans(up.pid)


def test_test_runs_two_workers_unless_the_caller_chose_or_there_is_one_core() -> None:
    """`./ctxlake test` adds pytest-xdist's two workers, each taking whole files; a caller's
    own choice of workers (or of none) is left alone, and so is a one-core machine."""
    args = ctxlake_script().pytest_args
    assert args(["tests/fleet", "-x"], cores=2) == [
        "-n", "2", "--dist", "loadfile", "tests/fleet", "-x"]
    assert args(["-q"], cores=64)[:2] == ["-n", "2"]
    assert args(["-q"], cores=1) == ["-q"]
    for chosen in (["-n", "0"], ["-n0"], ["-nauto"], ["--numprocesses=4"], ["--dist", "load"],
                   ["-p", "no:xdist"], ["-pno:xdist"]):
        assert args(["-x", *chosen], cores=2) == ["-x", *chosen]
    assert args(["--no-header"], cores=2)[:2] == ["-n", "2"]  # not "-n" with a value


def test_a_run_with_two_tests_of_one_id_is_refused() -> None:
    """pytest-xdist hands out tests by id, so of two tests with one id it runs one: the
    suite's root conftest refuses such a run instead of passing it short."""
    from types import SimpleNamespace

    from tests import conftest

    items: list[Any] = [SimpleNamespace(nodeid=f"tests/t.py::{name}") for name in "aba"]
    with pytest.raises(pytest.UsageError, match="1 test id.*tests/t.py::a"):
        conftest.pytest_collection_modifyitems(items)
    conftest.pytest_collection_modifyitems(items[:2])  # distinct: nothing to say


def test_stop_knows_the_workers_by_the_title_setproctitle_gives_them() -> None:
    """With setproctitle installed (django-q2 and gunicorn use it when it is there), a
    worker's command line reads "qcluster MainProcess <name>": `stop` must still count
    its group as ours, or an `up` killed with SIGKILL leaves the workers running."""
    script = ctxlake_script()
    titled = subprocess.Popen(["bash", "-c", 'exec -a "qcluster MainProcess tango-x" sleep 60'],
                              start_new_session=True)
    stranger = subprocess.Popen(["bash", "-c", "exec -a qclusterish sleep 60"],
                                start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while not Path(f"/proc/{titled.pid}/cmdline").read_bytes().startswith(b"qcluster"):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert script._ours(titled.pid)
        assert not script._ours(stranger.pid)
    finally:
        for proc in (titled, stranger):
            proc.kill()
            proc.wait()
