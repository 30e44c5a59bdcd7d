"""`sync`: keep a remote host's cache and spool in step with a ctxlake server, over REST.

The bridge itself never touches the network; this separate process does, on its behalf:

- **pull**: GET cache/manifest (If-None-Match), then each file whose ETag changed, each
  into a temp file in the cache directory (length checked, parsed, fsynced). Only when
  every download is whole are they renamed into place, manifest.json last, then the
  directory is fsynced. A failure anywhere discards the temps: the old cache stays whole.
- **push**: POST the spool's complete lines (NDJSON, ≤ 1000 per request) and remove from
  the local spool only the lines whose event id the server acknowledged, by rewriting each
  spool file (temp + fsync + rename) under the bridge's own flock, so no append is lost.
  Lines the server rejects move to `<spool>/rejected/<fleet>.ndjson` with the reason.
- **wait**: between syncs the loop long-polls GET changes (the server's change feed) and
  pulls as soon as it answers that the fleet's render changed, else every `interval`; an
  older server (404), a refusal or an error falls back to sleeping out the interval. The
  long-poll names the ETags this host holds (`have`), and the answer carries the render's
  listing and the small text files the host lacks: each body whose sha256 gives its listed
  ETag is written as a download would be, any other is fetched.

Server down, 5xx, 503: `ServerDown` (the loop backs off; the spool is kept). 401/403/404:
`AuthError` (a revoked token, a wrong fleet): a clear message and exit status 2. Lines the
server refused (a second agent's writes on a host whose token speaks for one agent, or an
agent a host token does not list) are not delivered: `--once` says so and exits with
status 3; the loop logs each time.
Stdlib only (urllib); no Django.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import sqlite3
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, BinaryIO, NamedTuple

from mcp_bridge import contract
from mcp_bridge.cache import SYNC_STATE_FILE
from mcp_bridge.contract import atomic, delta, places
from mcp_bridge.contract.spool import Flock

CACHE_FILES = contract.CACHE_FILES
STATE_FILE = SYNC_STATE_FILE
MAX_LINES, MAX_BODY = 1000, 2 << 20
TIMEOUT = 15.0
MAX_BACKOFF = 300.0
DEFAULT_INTERVAL = 15.0  # seconds between syncs when no change feed wakes the loop earlier
UNDELIVERED_EXIT = 3  # `--once`: some lines were refused by the server
SQLITE_MAGIC = b"SQLite format 3\x00"
#: A delta bigger than this is not read: the host downloads the snapshot whole instead.
MAX_DELTA_BYTES = 128 << 20


class AuthError(Exception):
    """The server will not serve this token (revoked, wrong fleet, missing scope): stop."""


class ServerDown(Exception):
    """Unreachable, timing out, or 5xx: try again later, keep everything local."""


@dataclass
class Remote:
    server: str
    fleet: str
    token: str
    timeout: float = TIMEOUT

    def url(self, tail: str) -> str:
        base = self.server.rstrip("/").removesuffix("/api/v1")
        return f"{base}/api/v1/fleets/{self.fleet}/{tail}"

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}", "Accept": "*/*",
                "User-Agent": "ctxlake-sync/1"}

    def open(self, tail: str, *, etag: str | None = None, body: bytes | None = None) -> Any:
        """The response (caller closes it), or None for 304; errors mapped to our two kinds."""
        headers = self.headers()
        if etag:
            headers["If-None-Match"] = etag
        if body is not None:
            headers["Content-Type"] = "application/x-ndjson"
        req = urllib.request.Request(self.url(tail), data=body, headers=headers,
                                     method="POST" if body is not None else "GET")
        try:
            return urllib.request.urlopen(req, timeout=self.timeout)
        except urllib.error.HTTPError as e:
            e.close()
            if e.code == 304:
                return None
            raise _http_error(e.code, self, tail) from None
        except (urllib.error.URLError, OSError) as e:
            raise ServerDown(f"{self.server} unreachable ({_reason(e)})") from None


def _reason(e: BaseException) -> str:
    return str(getattr(e, "reason", None) or e)


def _http_error(code: int, remote: Remote, tail: str) -> Exception:
    if code == 401:
        return AuthError(f"the server refused the token (401) for fleet {remote.fleet!r}: it "
                         "was revoked or is wrong. Issue a new one (manage.py issue_token) "
                         "and update the token file; sync stopped.")
    if code == 403:
        return AuthError(f"the token may not do this (403 on {tail}); it needs an agent, "
                         "host or operator role")
    if code == 404 and (not tail.startswith("cache/") or tail == "cache/manifest"):
        return AuthError(f"fleet {remote.fleet!r} is unknown to {remote.server} or not this "
                         "token's fleet (404)")
    if code == 404:
        return FileNotFoundError(tail)
    return ServerDown(f"{remote.server} answered {code} on {tail}")


# -- pull ------------------------------------------------------------------------------------

@dataclass
class PullReport:
    changed: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    unchanged: bool = False
    delta: bool = False  # snapshot.sqlite was brought up to date by a delta, in place
    fetched_bytes: int = 0  # bodies downloaded (files and delta), for benchmarks and logs
    notes: list[str] = field(default_factory=list)  # e.g. why a delta was refused


def _load_state(root: Path) -> dict[str, Any]:
    try:
        state = json.loads((root / STATE_FILE).read_text())
    except (OSError, ValueError):
        return {"manifest_etag": None, "files": {}}
    return state if isinstance(state, dict) else {"manifest_etag": None, "files": {}}


def _download(remote: Remote, name: str, root: Path, etag: str | None) -> Path | None:
    """The file fetched whole into a temp next to it; None when 304 (ours is current)."""
    response = remote.open(f"cache/{name}", etag=etag)
    if response is None:
        return None

    def copy(f: BinaryIO) -> None:
        expected = response.headers.get("Content-Length")
        size = 0
        while chunk := response.read(1 << 16):
            f.write(chunk)
            size += len(chunk)
        if expected is not None and size != int(expected):
            raise ServerDown(f"{name}: download cut short ({size} of {expected} bytes)")

    with response:
        return _into_temp(name, root, copy)


def _written(name: str, root: Path, body: bytes) -> Path:
    """A body the change feed sent, into a temp next to its file as a download would be."""
    return _into_temp(name, root, lambda f: f.write(body))


def _into_temp(name: str, root: Path, fill: Callable[[BinaryIO], object]) -> Path:
    """What `fill` writes, synced and checked whole, in a temp next to the file's place;
    the temp is removed if anything fails."""
    tmp = root / f".{name}.sync-{os.getpid()}.tmp"
    try:
        with open(tmp, "wb") as f:
            fill(f)
            f.flush()
            os.fsync(f.fileno())
        _check_whole(name, tmp)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp


def _check_whole(name: str, path: Path) -> None:
    """A body that is not what the file type must be is a torn or wrong download."""
    data = path.read_bytes() if name.endswith(".json") else path.open("rb").read(16)
    if name.endswith(".json"):
        try:
            ok = isinstance(json.loads(data), dict)
        except ValueError:
            ok = False
    else:
        ok = name != contract.SNAPSHOT or data == SQLITE_MAGIC
    if not ok:
        raise ServerDown(f"{name}: the download is not a whole {name} file")


class Listing(NamedTuple):
    """The server's listing of a render, and the bodies the change feed sent with it."""

    etag: str | None  # of GET cache/manifest
    files: dict[str, str]  # file name → ETag
    #: file name → the whole file, checked against its ETag; read-only, so the one empty
    #: default is shared safely
    bodies: Mapping[str, bytes] = MappingProxyType({})


def _listing(remote: Remote, state: dict[str, Any], root: Path) -> Listing:
    have_all = all((root / n).exists() for n in [*state.get("files", {}), contract.MANIFEST])
    response = remote.open("cache/manifest", etag=state.get("manifest_etag") if have_all else None)
    if response is None:
        return Listing(None, {})
    with response:
        body = json.loads(response.read())
        etag = response.headers.get("ETag")
    return Listing(etag, _files_of(body))


def held_etags(root: Path) -> list[str]:
    """The ETags of the cache files this host holds (as its last pull recorded them): what
    a long-poll names in `have`, so the answer carries only the files it lacks. Only the
    contract's files are named, at most one ETag each, as the server requires."""
    files = _load_state(root).get("files")
    return sorted({etag for name, etag in (files.items() if isinstance(files, dict) else ())
                   if name in (contract.MANIFEST, *CACHE_FILES) and isinstance(etag, str)
                   and contract.ETAG_RE.fullmatch(etag) and (root / name).is_file()})


def _bodies_of(sent: Any, files: dict[str, str]) -> dict[str, bytes]:
    """The inlined files of a change-feed answer that are whole: a name the contract lets
    the server inline, text whose sha256 gives the ETag the listing names for it."""
    if not isinstance(sent, dict):
        return {}
    bodies = {}
    for name, text in sent.items():
        if name not in contract.INLINE_FILES or not isinstance(text, str) or name not in files:
            continue
        try:
            body = text.encode()
        except UnicodeEncodeError:  # a lone surrogate: no file is that
            continue
        if contract.etag_of(hashlib.sha256(body).hexdigest()) == files[name]:
            bodies[name] = body
    return bodies


def _files_of(body: Any) -> dict[str, str]:
    """{name: ETag} of a listing's `files`; entries that are not a name and a printable
    ETag are left out (an ETag goes back into a header)."""
    files = body.get("files") if isinstance(body, dict) else None
    return {
        f["name"]: f["etag"]
        for f in (files if isinstance(files, list) else [])
        if isinstance(f, dict) and isinstance(f.get("name"), str)
        and isinstance(f.get("etag"), str) and f["etag"].isprintable() and f["etag"].isascii()
    }


def pull(remote: Remote, cache_dir: Path, *, by_delta: bool = True,
         listed: Listing | None = None) -> PullReport:
    """Bring `<cache_dir>/<fleet>/` up to the server's render; never a torn cache.

    `by_delta=False` downloads a changed snapshot whole, as before delta sync: what
    bench/fleet_scale.py compares with, and a way to rule the delta out when debugging.
    `listed`: the render's listing as the change feed sent it (Push.take_listing), instead
    of asking GET cache/manifest for it.
    """
    root = Path(cache_dir) / remote.fleet
    root.mkdir(parents=True, exist_ok=True)
    state = _load_state(root)
    manifest_etag, listing, bodies = listed if listed else _listing(remote, state, root)
    if manifest_etag is None and not listing:
        return PullReport(unchanged=True)
    if contract.MANIFEST not in listing:
        return PullReport(unchanged=True)  # nothing rendered on the server yet: keep ours
    known, fetched, report = state.get("files", {}), {}, PullReport()
    held = {name: known.get(name) if (root / name).exists() else None for name in listing}
    changed = [name for name in [*CACHE_FILES, contract.MANIFEST]  # manifest last, below too
               if name in listing and held[name] != listing[name]]
    try:
        # The changed files at once, each on its own connection: a pull costs the slowest
        # response, not their sum (a host is told of a render and fetches 2-4 files).
        with ThreadPoolExecutor(max_workers=max(1, len(changed))) as pool:
            tasks = {name: pool.submit(_written, name, root, bodies[name]) if name in bodies
                     else pool.submit(_fetch, remote, name, root, held[name], by_delta, report)
                     for name in changed}
        failed = []
        for name, task in tasks.items():
            try:
                tmp = task.result()
            except Exception as e:  # noqa: BLE001 - raised below, once every temp is known
                failed.append(e)
                continue
            if tmp is not None:
                fetched[name] = tmp
                report.fetched_bytes += tmp.stat().st_size
        if failed:
            raise failed[0]
        for name in CACHE_FILES:
            if name in fetched:
                if name == contract.SNAPSHOT:
                    _settle_journal(root / name)
                os.replace(fetched.pop(name), root / name)
                report.changed.append(name)
            elif name not in listing and (root / name).exists():
                (root / name).unlink()
                report.removed.append(name)
        if contract.MANIFEST in fetched:
            os.replace(fetched.pop(contract.MANIFEST), root / contract.MANIFEST)
            report.changed.append(contract.MANIFEST)
    finally:
        for tmp in fetched.values():
            tmp.unlink(missing_ok=True)
    atomic.fsync_dir(root)
    atomic.write_atomic(root / STATE_FILE, json.dumps(
        {"manifest_etag": manifest_etag, "files": listing}).encode())
    return report


def _fetch(remote: Remote, name: str, root: Path, held: str | None, by_delta: bool,
           report: PullReport) -> Path | None:
    """One changed file: its download's temp path, or None when there is nothing to move
    into place (the snapshot brought up to date by a delta; ours current; replaced on the
    server between the listing and the fetch, for the next pass)."""
    if name == contract.SNAPSHOT and by_delta and _pull_delta(remote, root / name, report):
        return None
    try:
        return _download(remote, name, root, held)
    except FileNotFoundError:
        return None


def _pull_delta(remote: Remote, path: Path, report: PullReport) -> bool:
    """Bring the local snapshot to the latest render by a delta, in place; False when it
    must be downloaded whole (none yet, unsealed, a version gap, a refused delta).

    The delta is applied in one SQLite transaction and checked against the server's
    digest before COMMIT (mcp_bridge.contract.delta.apply): a refused or torn one leaves
    the snapshot as it was, and the full download that follows replaces it.
    """
    _settle_journal(path)  # a delta killed mid-way: roll it back first
    version = delta.version_of(path) if path.exists() else None
    if version is None:
        return False
    try:
        response = remote.open(f"cache/delta?since={version}")
    except FileNotFoundError:
        return False  # not all deltas since our version are kept
    if response is None:
        return True  # ours is the latest render
    with response:
        body = response.read(MAX_DELTA_BYTES + 1)
        expected = response.headers.get("Content-Length")
    report.fetched_bytes += len(body)
    if len(body) > MAX_DELTA_BYTES or (expected or str(len(body))) != str(len(body)):
        report.notes.append(f"delta of {len(body)} bytes cut short or too big; downloading whole")
        return False
    try:
        delta.apply(path, delta.decode(body), fleet=remote.fleet)
    except delta.Refused as e:
        report.notes.append(f"delta refused ({e}); downloading {contract.SNAPSHOT} whole")
        return False
    os.utime(path)  # readers notice by mtime too (Cache.snapshot)
    report.changed.append(contract.SNAPSHOT)
    report.delta = True
    return True


def _settle_journal(path: Path) -> None:
    """Roll back the hot journal a delta killed mid-way left beside `path`: before the next
    delta, and before a new snapshot is renamed over it (so the journal can never be
    replayed onto the new file). Until then the bridge's read-only connection cannot open
    the snapshot and says so; it never reads the half-written rows."""
    journal = path.with_name(path.name + "-journal")
    if not journal.exists():
        return
    try:
        db = sqlite3.connect(path, timeout=30)
        try:
            db.execute("SELECT count(*) FROM sqlite_master").fetchone()  # rolls it back
        finally:
            db.close()
    except sqlite3.Error:
        pass  # unreadable: it is being replaced anyway
    journal.unlink(missing_ok=True)


# -- push ------------------------------------------------------------------------------------

@dataclass
class PushReport:
    sent: int = 0
    acknowledged: int = 0
    rejected: list[dict[str, Any]] = field(default_factory=list)


def _spool_files(spool_dir: Path, fleet: str) -> list[Path]:
    root = Path(spool_dir) / contract.SPOOL_SUBDIR
    active = root / f"{fleet}{contract.SPOOL_SUFFIX}"
    rotated = sorted(p for p in root.glob(f"{fleet}.*{contract.SPOOL_SUFFIX}") if p != active)
    return [p for p in [*rotated, active] if p.exists()]


def _complete_lines(path: Path) -> list[bytes]:
    data = path.read_bytes()
    return [line for line in data[: data.rfind(b"\n") + 1].split(b"\n") if line.strip()]


def _event_id(raw: bytes) -> str | None:
    try:
        value = json.loads(raw).get("id")
    except (ValueError, AttributeError, UnicodeDecodeError):
        return None
    return value if isinstance(value, str) else None


def _batches(lines: list[bytes]) -> Iterator[list[bytes]]:
    batch: list[bytes] = []
    size = 0
    for line in lines:
        if batch and (len(batch) >= MAX_LINES or size + len(line) + 1 > MAX_BODY):
            yield batch
            batch, size = [], 0
        batch.append(line)
        size += len(line) + 1
    if batch:
        yield batch


def push(remote: Remote, spool_dir: Path) -> PushReport:
    """Ship every complete spool line; drop locally only what the server acknowledged."""
    root = Path(spool_dir) / contract.SPOOL_SUBDIR
    if not root.is_dir():
        return PushReport()
    lock = root / f"{remote.fleet}{contract.SPOOL_LOCK_SUFFIX}"
    with Flock(lock):
        lines = [line for p in _spool_files(spool_dir, remote.fleet) for line in _complete_lines(p)]
    report = PushReport()
    done: dict[str, str | None] = {}  # event id → None (accepted) or the rejection reason
    junk = {line: "not a spool line (no event id)" for line in lines if _event_id(line) is None}
    for batch in _batches([line for line in lines if line not in junk]):
        response = remote.open("spool", body=b"\n".join(batch) + b"\n")
        with response:
            answer = json.loads(response.read())
        report.sent += len(batch)
        for event_id in answer.get("accepted", []):
            done[event_id] = None
        for item in answer.get("rejected", []):
            _mark_rejected(item, batch, done, junk)
        report.rejected += answer.get("rejected", [])
        # Forget what the server has now, batch by batch: a failure later keeps only the rest.
        report.acknowledged += _forget(remote.fleet, spool_dir, done, junk)
    if junk and not report.sent:  # nothing to send, but the junk still leaves the spool
        _forget(remote.fleet, spool_dir, done, junk)
    return report


def _mark_rejected(item: dict[str, Any], batch: list[bytes], done: dict[str, str | None],
                   junk: dict[bytes, str]) -> None:
    reason = str(item.get("reason") or "rejected")
    if isinstance(item.get("id"), str) and item["id"] not in done:
        done[item["id"]] = reason
    elif isinstance(item.get("line"), int) and 1 <= item["line"] <= len(batch):
        junk[batch[item["line"] - 1]] = reason


def _forget(fleet: str, spool_dir: Path, done: dict[str, str | None],
            junk: dict[bytes, str]) -> int:
    """Rewrite each spool file without the settled lines, under the bridge's lock.

    Appends happen only under the same lock, so a file cannot grow while it is rewritten;
    a torn tail of the active file (a writer died mid-line) is kept for the drain rules.
    """
    root = Path(spool_dir) / contract.SPOOL_SUBDIR
    settled = dead = 0
    dead_lines: list[bytes] = []
    with Flock(root / f"{fleet}{contract.SPOOL_LOCK_SUFFIX}"):
        for path in _spool_files(spool_dir, fleet):
            data = path.read_bytes()
            cut = data.rfind(b"\n") + 1
            keep: list[bytes] = []
            for line in data[:cut].split(b"\n")[:-1]:
                event_id = _event_id(line)
                if line in junk or (event_id in done and done[event_id] is not None):
                    dead_lines.append(_dead_record(line, junk.get(line) or done[event_id or ""]))
                    dead += 1
                elif event_id in done:
                    settled += 1
                elif line.strip():
                    keep.append(line)
            tail = data[cut:] if path.name == f"{fleet}{contract.SPOOL_SUFFIX}" else b""
            _rewrite(path, b"".join(line + b"\n" for line in keep) + tail, data)
        if dead_lines:
            _append_dead(Path(spool_dir) / "rejected" / f"{fleet}{contract.SPOOL_SUFFIX}",
                         dead_lines)
        atomic.fsync_dir(root)
    return settled


def _rewrite(path: Path, new: bytes, old: bytes) -> None:
    if new == old:
        return
    if not new:
        path.unlink()
        return
    atomic.write_atomic(path, new)


def _dead_record(line: bytes, reason: str | None) -> bytes:
    record = {"reason": reason or "rejected", "line": line.decode("utf-8", "replace")}
    return json.dumps(record, ensure_ascii=True).encode() + b"\n"


def _append_dead(path: Path, records: list[bytes]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, b"".join(records))
        os.fsync(fd)
    finally:
        os.close(fd)


# -- push: wait on the server's change feed instead of sleeping ------------------------------

FEED_MAX_WAIT = 30  # seconds; the server refuses longer waits (fleet/change_feed.py)


class NoFeed(Exception):
    """The server has no change feed (an older server: 404, or it refused our query)."""


class Busy(Exception):
    """The server has too many long-polls waiting (429); poll until Retry-After."""

    def __init__(self, retry_after: float) -> None:
        super().__init__(f"busy; retry after {retry_after:.0f}s")
        self.retry_after = retry_after


def changed_version(remote: Remote, after: str | None, wait: int) -> str | None:
    """GET changes: the fleet's version if it is not `after` (now, or within `wait` s), else None.

    Errors map to NoFeed (poll instead), Busy (429), AuthError (401/403) and ServerDown.
    """
    change = changed(remote, after, wait)
    return None if change is None else change[0]


def changed(remote: Remote, after: str | None, wait: int, *,
            have: list[str] | None = None) -> tuple[str, Listing | None] | None:
    """changed_version, with the render's listing when the server sends one (older ones
    do not: the pull then asks GET cache/manifest), and with `have` (the ETags this host
    holds) the bodies of the small files it lacks that came whole."""
    query = urllib.parse.urlencode({"wait": wait, **({"after": after} if after else {}),
                                    **({"have": ",".join(have)} if have is not None else {})})
    req = urllib.request.Request(remote.url(f"changes?{query}"), headers=remote.headers())
    try:
        with urllib.request.urlopen(req, timeout=wait + remote.timeout) as response:
            if response.status == 204:
                return None
            body = json.loads(response.read())
            version = body.get("version")
    except urllib.error.HTTPError as e:
        retry_after = e.headers.get("Retry-After", "")
        e.close()
        if e.code == 429:
            raise Busy(float(retry_after) if retry_after.isdigit() else FEED_MAX_WAIT) from None
        if e.code in (400, 404, 405):
            raise NoFeed(f"{remote.server} answered {e.code} on changes") from None
        raise _http_error(e.code, remote, "changes") from None
    except (urllib.error.URLError, OSError, ValueError, AttributeError) as e:
        raise ServerDown(f"{remote.server}: change feed failed ({_reason(e)})") from None
    if not isinstance(version, str) or not version:
        raise NoFeed(f"{remote.server} sent no version on changes")
    sent = body.get("listing")
    files = _files_of(sent)
    etag = sent.get("etag") if files else None
    if not isinstance(etag, str) or not etag.isprintable() or not etag.isascii():
        return version, None
    return version, Listing(etag, files, _bodies_of(body.get("files"), files))


@dataclass
class Push:
    """The host's side of the change feed: learn the version, then wait for the next one.

    The version is asked for *before* each pull, so a render published during the pull
    still differs from it and wakes the next wait: a change is never slept through.
    """

    remote: Remote
    log: Callable[[str], object]
    sleep: Callable[[float], None]
    version: str | None = None
    available: bool = True
    busy: int = 0  # waits the server refused with 429 (for logs and bench/fleet_scale.py)
    listed: Listing | None = None  # the listing that came with `version`, until pulled
    #: The ETags this host's cache holds (held_etags), named to the server in each ask.
    held: Callable[[], list[str]] | None = None

    def before_pull(self) -> None:
        if self.available and self.version is None:
            try:
                self._take(changed(self.remote, None, 0, have=self._have()))
            except (NoFeed, Busy) as e:
                self._give_up(e)

    def take_listing(self) -> Listing | None:
        """The listing the feed sent with the latest version, once: for this pull only."""
        listed, self.listed = self.listed, None
        return listed

    def _take(self, change: tuple[str, Listing | None] | None) -> bool:
        if change is None:
            return False
        self.version, self.listed = change
        return True

    def wait(self, seconds: float) -> None:
        """Return as soon as the fleet changes (pull now), or after `seconds` (pull anyway)."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            if not self.available or self.version is None or left < 1:
                self.sleep(left)
                return
            try:
                change = changed(self.remote, self.version, int(min(left, FEED_MAX_WAIT)),
                                 have=self._have())
            except Busy as e:  # the server is full: poll this round, try again the next
                self.busy += 1
                self.sleep(min(left, e.retry_after))
                return
            except (NoFeed, ServerDown) as e:
                if isinstance(e, NoFeed):
                    self._give_up(e)
                self.sleep(max(0.0, deadline - time.monotonic()))
                return
            if self._take(change):
                return

    def _have(self) -> list[str] | None:
        return None if self.held is None else self.held()

    def _give_up(self, why: Exception) -> None:
        self.available = False
        self.log(f"ctxlake sync: no change feed ({why}); polling instead")


# -- the loop and the command line -----------------------------------------------------------

def sync_once(remote: Remote, cache_dir: Path, spool_dir: Path, *, by_delta: bool = True,
              listed: Listing | None = None) -> tuple[PushReport, PullReport]:
    """Push first, so the server's next render can already include what this host queued."""
    pushed = push(remote, spool_dir)
    return pushed, pull(remote, cache_dir, by_delta=by_delta, listed=listed)


def run_loop(remote: Remote, cache_dir: Path, spool_dir: Path, *, interval: float,
             log: Callable[[str], object], sleep: Callable[[float], None] = time.sleep,
             cycles: int | None = None, push: bool = True, by_delta: bool = True) -> int:
    """Sync every `interval` seconds, and at once when the server's change feed says so;
    back off (jittered, ≤ 5 min) while the server is down. `cycles`: stop after that many."""
    failures = 0
    root = Path(cache_dir) / remote.fleet
    feed = Push(remote, log, sleep, available=push, held=lambda: held_etags(root))
    while cycles is None or cycles > 0:
        cycles = None if cycles is None else cycles - 1
        try:
            feed.before_pull()
            pushed, pulled = sync_once(remote, cache_dir, spool_dir, by_delta=by_delta,
                                       listed=feed.take_listing())
            failures = 0
            if pushed.sent or pulled.changed:
                log(_summary(pushed, pulled))
            refused = undelivered(pushed, spool_dir, remote.fleet)
            if refused:
                log(refused)
            wait = interval
        except ServerDown as e:
            failures += 1
            wait = min(MAX_BACKOFF, interval * 2 ** min(failures, 10)) * random.uniform(0.8, 1.2)
            log(f"ctxlake sync: {e}; spool kept; retrying in {wait:.0f}s")
        except AuthError as e:
            log(f"ctxlake sync: {e}")
            return 2
        if cycles == 0:
            break
        if failures:
            sleep(wait)
        else:
            feed.wait(wait)
    return 0


def undelivered(pushed: PushReport, spool_dir: Path, fleet: str) -> str | None:
    """One line on what the server refused this time, or None."""
    if not pushed.rejected:
        return None
    reasons = sorted({str(item.get("reason") or "rejected") for item in pushed.rejected})
    where = Path(spool_dir) / "rejected" / f"{fleet}{contract.SPOOL_SUFFIX}"
    return (f"ctxlake sync: {len(pushed.rejected)} line(s) NOT delivered: the server refused "
            f"them ({'; '.join(reasons)[:500]}); kept in {where}. An agent token speaks "
            "for one agent and a host token for the agents listed for it: give each agent "
            "its own token, or list this host's agents on its host token (docs/agents.md).")


def _summary(pushed: PushReport, pulled: PullReport) -> str:
    return (f"ctxlake sync: pushed {pushed.acknowledged}/{pushed.sent} event(s)"
            f"{f', {len(pushed.rejected)} rejected' if pushed.rejected else ''}; pulled "
            f"{', '.join(pulled.changed) or 'nothing new'}"
            f"{' (the snapshot by a delta)' if pulled.delta else ''}"
            f"{f' ({pulled.fetched_bytes} bytes fetched)' if pulled.fetched_bytes else ''}"
            f"{'; removed ' + ', '.join(pulled.removed) if pulled.removed else ''}"
            f"{''.join('; ' + note for note in pulled.notes)}")


def remotes_dir() -> Path:
    return places.home() / "remotes"


def remember(fleet: str, server: str, token_file: Path | None, *, dry_run: bool = False) -> Path:
    """Record a fleet's server and token file, so `sync --fleet F` needs nothing else."""
    path = remotes_dir() / f"{fleet}.json"
    if not dry_run:
        path.parent.mkdir(parents=True, exist_ok=True)
        token = str(Path(token_file).expanduser().resolve()) if token_file else None
        body = json.dumps({"server": server, "token_file": token}, indent=2)
        atomic.write_atomic(path, body.encode())
    return path


def read_token(path: Path) -> str:
    try:
        st = path.stat()
        token = path.read_text(encoding="utf-8").strip()
    except OSError as e:
        raise AuthError(f"cannot read the token file {path}: {e.strerror}") from None
    if not token:
        raise AuthError(f"the token file {path} is empty")
    if st.st_mode & 0o077:
        sys.stderr.write(f"ctxlake sync: warning: {path} is readable by others; chmod 600 it\n")
    return token


def main(argv: list[str], *, command: str = "sync") -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m mcp_bridge sync",
                                description="Pull the fleet's cache from a ctxlake server and "
                                "push this host's spool (REST; never a torn cache).")
    p.add_argument("--fleet", default=os.environ.get("CTXLAKE_FLEET_ID", ""),
                   help="fleet slug (default: $CTXLAKE_FLEET_ID)")
    p.add_argument("--server", default=None, help="server URL, e.g. https://ctxlake.example")
    p.add_argument("--token-file", type=Path, default=None, help="file holding the API token")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--once", action="store_true", help="one push + pull, then exit")
    mode.add_argument("--interval", type=float, default=DEFAULT_INTERVAL,
                      help="seconds between syncs")
    p.add_argument("--no-delta", action="store_true",
                   help="download a changed claims snapshot whole, never by a delta "
                   "(benchmarks, or to rule the delta out)")
    a = p.parse_args(argv)
    if not contract.FLEET_ID_RE.fullmatch(a.fleet):
        p.error("--fleet (or CTXLAKE_FLEET_ID) is required: [A-Za-z0-9_-]{1,64}")
    saved = _saved(a.fleet)
    server = a.server or saved.get("server")
    token_file = a.token_file or (Path(saved["token_file"]) if saved.get("token_file") else None)
    if not server or not token_file:
        p.error("--server and --token-file are required (or run install --server … first)")
    cache, spool = places.cache_dir(), places.spool_dir()
    try:
        remote = Remote(server, a.fleet, read_token(token_file.expanduser()))
    except AuthError as e:
        sys.stderr.write(f"ctxlake sync: {e}\n")
        return 2
    if not a.once:
        try:
            return run_loop(remote, cache, spool, interval=max(a.interval, 1.0),
                            log=lambda m: sys.stderr.write(m + "\n"), by_delta=not a.no_delta)
        except KeyboardInterrupt:
            return 0
    try:
        pushed, pulled = sync_once(remote, cache, spool, by_delta=not a.no_delta)
    except AuthError as e:
        sys.stderr.write(f"ctxlake sync: {e}\n")
        return 2
    except ServerDown as e:
        sys.stderr.write(f"ctxlake sync: {e}; the local spool is kept, nothing lost\n")
        return 1
    sys.stdout.write(_summary(pushed, pulled) + "\n")
    refused = undelivered(pushed, spool, a.fleet)
    if refused:
        sys.stderr.write(refused + "\n")
        return UNDELIVERED_EXIT
    return 0


def _saved(fleet: str) -> dict[str, Any]:
    try:
        value = json.loads((remotes_dir() / f"{fleet}.json").read_text())
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}
