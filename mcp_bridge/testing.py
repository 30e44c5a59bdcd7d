"""A cache writer that follows docs/cache-format.md, for tests and the benchmark.

Not used by the bridge itself. It writes the way the Django renderer must (temp file,
fsync, rename, fsync the directory), so tests exercise the same file lifecycle.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import sqlite3
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from mcp_bridge import contract
from mcp_bridge.contract import atomic, delta, embed

EMBEDDER: dict[str, Any] = {"name": embed.NAME, "dims": embed.DIMS}  # what the bridge expects


def iso(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


NOW = dt.datetime.now(dt.UTC)


def claim(id_: str, text: str, **fields: Any) -> dict[str, Any]:
    """One promoted claim row with sensible defaults; override any column by keyword."""
    row = {"id": id_, "text": text, "type": "fact", "subject": "general", "scope": "fleet",
           "status": "promoted", "confidence": 0.8, "contested": False,
           "independent_sessions": 2, "created_at": iso(NOW - dt.timedelta(days=3)),
           "promoted_at": iso(NOW - dt.timedelta(days=2)), "valid_until": None,
           "superseded_by": None, "stale": False, "staleness": 0.0, "evidence_paths": []}
    row.update(fields)
    return row


write_atomic = atomic.write_atomic


def write_json(path: Path, value: Any) -> None:
    write_atomic(path, json.dumps(value, ensure_ascii=False, indent=1).encode())


def build_cache(cache_dir: Path, fleet: str, *, memory_mode: str = "live",
                claims: Sequence[dict[str, Any]] = (), vectors: Any = "model",
                agents: Sequence[dict[str, Any]] = (), contention: Sequence[dict[str, Any]] = (),
                sessions: Sequence[dict[str, Any]] = (), handoffs: Sequence[dict[str, Any]] = (),
                timeline: Sequence[dict[str, Any]] = (), briefing: str | None = None,
                embedder: dict[str, Any] | None = None, snapshot: bool = True,
                closed_handoffs: Sequence[dict[str, Any]] = ()) -> Path:
    """Write every cache file of one fleet; returns the fleet directory.

    vectors: "model" embeds claim texts with mcp_bridge.contract.embed, "random" writes seeded
    random unit vectors (latency benchmarks), None writes no embeddings, or an array.
    """
    root = Path(cache_dir) / fleet
    root.mkdir(parents=True, exist_ok=True)
    stamp = iso(dt.datetime.now(dt.UTC))
    embedder = dict(EMBEDDER if embedder is None else embedder)
    head = {"format_version": contract.FORMAT_VERSION, "fleet": fleet, "generated_at": stamp}
    write_json(root / contract.ROSTER, {**head, "agents": list(agents),
                                        "contention": list(contention)})
    write_json(root / contract.HISTORY, {**head, "sessions": list(sessions)})
    write_json(root / contract.HANDOFFS, {**head, "handoffs": list(handoffs),
                                          "closed": list(closed_handoffs)})
    if snapshot and memory_mode != "off":
        write_snapshot(root / contract.SNAPSHOT, fleet, claims, vectors=vectors,
                       timeline=timeline, embedder=embedder, memory_mode=memory_mode)
    if briefing is not None:
        write_atomic(root / contract.BRIEFING, briefing.encode())
    write_json(root / contract.MANIFEST, {**head, "memory_mode": memory_mode,
                                          "embedder": embedder})
    return root


def write_snapshot(path: Path, fleet: str, claims: Sequence[dict[str, Any]], *,
                   vectors: Any = "model", timeline: Iterable[dict[str, Any]] = (),
                   embedder: dict[str, Any] | None = None, memory_mode: str = "live") -> None:
    embedder = embedder or EMBEDDER
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.unlink(missing_ok=True)
    db = sqlite3.connect(tmp)
    for ddl in contract.SNAPSHOT_DDL:
        db.execute(ddl)
    meta = {"format_version": contract.FORMAT_VERSION, "fleet": fleet,
            "generated_at": iso(dt.datetime.now(dt.UTC)), "memory_mode": memory_mode,
            "embedder_name": embedder["name"], "embedder_dims": embedder["dims"],
            "claim_count": len(claims)}
    db.executemany("INSERT INTO meta VALUES (?, ?)", [(k, str(v)) for k, v in meta.items()])
    columns = list(claim("x", "x"))
    db.executemany(
        f"INSERT INTO claims (rowid, {', '.join(columns)}) VALUES "
        f"({', '.join('?' * (len(columns) + 1))})",
        ([i + 1, *(_sql(c.get(col)) for col in columns)] for i, c in enumerate(claims)))
    db.execute(contract.SNAPSHOT_FTS_REBUILD)
    matrix = _vectors(vectors, claims, int(embedder["dims"]))
    if matrix is not None:
        db.executemany("INSERT INTO embeddings VALUES (?, ?)",
                       ((i + 1, matrix[i].astype("<f4").tobytes()) for i in range(len(claims))))
    db.executemany(
        "INSERT INTO timeline (subject, at, kind, claim_id, session_id, actor, summary) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        ((t["subject"], t["at"], t["kind"], t.get("claim_id"), t.get("session_id"),
          t.get("actor"), t["summary"]) for t in timeline))
    db.commit()
    db.execute("VACUUM")
    db.close()
    with open(tmp, "rb+") as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)


def snapshot_rows(path: Path) -> dict[str, list[Any]]:
    """Every row of the tables a delta carries, and of meta, in order: two snapshot files
    hold the same data exactly when these are equal (whatever their bytes)."""
    db = sqlite3.connect(path)
    try:
        return {t: db.execute(f"SELECT * FROM {t} ORDER BY 1").fetchall()
                for t in (*delta.TABLES, "meta")}
    finally:
        db.close()


def _sql(value: Any) -> Any:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, list | dict):
        return json.dumps(value)
    return value


def _vectors(vectors: Any, claims: Sequence[dict[str, Any]], dims: int) -> Any:
    if vectors is None or not claims:
        return None
    import numpy as np

    if isinstance(vectors, str) and vectors == "model":
        from mcp_bridge.contract import embed

        return embed.embed([c["text"] for c in claims])
    if isinstance(vectors, str) and vectors == "random":
        rng = np.random.default_rng(7)
        m = rng.standard_normal((len(claims), dims), dtype=np.float32)
        return m / np.linalg.norm(m, axis=1, keepdims=True)
    return np.asarray(vectors, dtype=np.float32)


_DOMAIN = ("cache build deploy migration test flaky lint clippy cargo pytest docker compose "
          "postgres index vacuum lease queue worker retry timeout token auth session payment "
          "invoice webhook stripe refund ledger schema fixture seed snapshot render spool "
          "drain embed vector search ranking fusion bm25 cosine recall latency memory leak "
          "thread lock fsync rename atomic rollback deadlock replica backup restore cron "
          "scheduler celery django admin serializer viewset router middleware cors csrf "
          "nginx gunicorn uvicorn asgi wsgi static media upload s3 bucket cdn dns tls cert "
          "rust python node typescript react vite webpack eslint prettier ruff mypy black "
          "branch rebase merge conflict hook ci pipeline artifact release tag changelog")
_SUBJECTS = ("payments", "ci", "database", "search", "auth", "frontend", "deploy", "tests",
             "workers", "api")


def _vocabulary() -> tuple[list[str], list[str]]:
    """Domain words, plus English words in rough frequency order (BERT's vocab)."""
    vocab = (Path(contract.__file__).with_name("data") / "vocab.txt").read_text().split("\n")
    english = [w for w in vocab[1996:] if w.isalpha() and len(w) > 2]
    return _DOMAIN.split(), english


def synthetic_claims(n: int, seed: int = 1) -> list[dict[str, Any]]:
    """n promoted claims with a Zipf-like word distribution (benchmarks).

    30% of words come from a 110-word engineering vocabulary, the rest from ~20k English
    words drawn with a Zipf(1.1) rank, so term frequencies look like real prose.
    """
    rng = random.Random(seed)
    domain, english = _vocabulary()
    out = []
    for i in range(n):
        words = " ".join(
            rng.choice(domain) if rng.random() < 0.3
            else english[min(len(english) - 1, int(rng.paretovariate(1.1)) - 1)]
            for _ in range(rng.randint(8, 20)))
        out.append(claim(
            f"cc-{i + 1:02d}", f"The {words}.", type=rng.choice(contract.CLAIM_TYPES),
            subject=rng.choice(_SUBJECTS), confidence=round(rng.uniform(0.3, 0.99), 2),
            independent_sessions=rng.randint(1, 6), contested=rng.random() < 0.05,
            stale=rng.random() < 0.05,
            promoted_at=iso(NOW - dt.timedelta(days=rng.uniform(0, 400)))))
    return out
