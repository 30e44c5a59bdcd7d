"""Snapshot: read-only search over snapshot.sqlite (FTS5 BM25 + cosine, fused).

Opened read-only but not immutable: the renderer (and a full sync) replaces the file by
rename, and an open connection keeps reading the inode it opened; a delta sync writes the
live file in one transaction (mcp_bridge.contract.delta), so each search runs in one read
transaction and sees the old rows or the new ones, never a mix, and state cached in
memory (the vector matrix, the path index) is dropped when another connection committed.
numpy and the embedding matrix load on the first hybrid search, the embedder on the
first query that needs a vector.
"""

from __future__ import annotations

import datetime as dt
import heapq
import json
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast
from urllib.parse import quote

from mcp_bridge import contract
from mcp_bridge.contract import bm25, globs, parse_time, ranking
from mcp_bridge.contract.sanitize import clean_value

_CLAIM_COLUMNS = ("rowid, id, text, type, subject, scope, confidence, contested, "
                  "independent_sessions, created_at, promoted_at, stale, staleness, "
                  "evidence_paths")
#: Columns later renders added, and what an older snapshot without them reads as: no
#: repositories named, no usefulness reason, no contradiction.
_LATER_COLUMNS = {"repos": "'[]'", "why": "''", "stale_since": "''", "conflicts": "'[]'"}


class SnapshotError(Exception):
    """The snapshot cannot be used; the message is the note the agent sees."""


@dataclass
class Hits:
    results: list[dict[str, Any]]
    truncated: bool
    mode: str
    notes: list[str] = field(default_factory=list)


@dataclass
class _Vectors:
    """The embedding matrix plus per-row filter columns, as numpy arrays (row i = claim i).

    Filters and validity become boolean masks over the cosine scores, so a narrow filter
    costs the same as none, and no per-row Python objects are kept (100k claims: ~150 MiB
    of float32 and ~2 MiB of columns).
    """

    rowids: Any  # int64 (n,)
    matrix: Any  # float32 (n, dims), L2-normalised
    types: Any  # int32 codes into `codes`
    scopes: Any
    subjects: Any
    superseded: Any  # bool (n,)
    valid_until: Any  # float64 epoch seconds, +inf when unbounded
    codes: dict[str, int]

    def mask(self, now: dt.datetime, wanted: dict[str, str | None]) -> Any:
        import numpy as np

        keep = ~self.superseded & (self.valid_until > now.timestamp())
        for column, value in (("types", wanted["type"]), ("scopes", wanted["scope"]),
                              ("subjects", wanted["subject"])):
            if value is not None:
                code = self.codes.get(value, -1)
                keep &= getattr(self, column) == code
        return np.asarray(keep)


class Snapshot:
    def __init__(self, path: Path, *, fleet: str, max_chars: int = 2000) -> None:
        self.path = path
        self.max_chars = max_chars
        uri = f"file:{quote(str(path))}?mode=ro"
        try:
            self.db = sqlite3.connect(uri, uri=True, check_same_thread=False,
                                      isolation_level=None)  # BEGIN is ours (_consistent)
            self.meta = dict(self.db.execute("SELECT key, value FROM meta").fetchall())
            self.count = self.db.execute("SELECT count(*) FROM claims").fetchone()[0]
        except sqlite3.Error as e:
            raise SnapshotError(f"{contract.SNAPSHOT} is unreadable ({e}); ignored until the "
                                "next render") from e
        version = self.meta.get("format_version")
        if version != str(contract.FORMAT_VERSION):
            self.db.close()
            raise SnapshotError(f"{contract.SNAPSHOT} has format_version {version!r}; this "
                                f"bridge reads {contract.FORMAT_VERSION}")
        if self.meta.get("fleet") != fleet:
            self.db.close()
            raise SnapshotError(f"{contract.SNAPSHOT} is for another fleet; not reading it")
        columns = {row[1] for row in self.db.execute("PRAGMA table_info(claims)")}
        self._columns = _CLAIM_COLUMNS + "".join(
            f", {name}" if name in columns else f", {old} AS {name}"
            for name, old in _LATER_COLUMNS.items())
        timeline = {row[1] for row in self.db.execute("PRAGMA table_info(timeline)")}
        self._outcome = "outcome" if "outcome" in timeline else "NULL AS outcome"
        self._vectors: _Vectors | None = None
        self._paths_index: tuple[dict[str, list[int]], list[int]] | None = None
        self._lock = threading.Lock()
        self._reading = threading.RLock()
        self._data_version = self.db.execute("PRAGMA data_version").fetchone()[0]

    @contextmanager
    def _consistent(self) -> Iterator[None]:
        """One read transaction over several statements: a delta committed meanwhile is
        seen by the next search, whole. A commit since the last one drops what was built
        from the old rows (PRAGMA data_version changes when another connection commits)."""
        with self._reading:
            self.db.execute("BEGIN")
            try:
                self.db.execute("SELECT 1 FROM meta LIMIT 1").fetchone()  # the read lock
                version = self.db.execute("PRAGMA data_version").fetchone()[0]
                if version != self._data_version:
                    with self._lock:
                        self._vectors, self._paths_index = None, None
                    self.count = self.db.execute("SELECT count(*) FROM claims").fetchone()[0]
                    self._data_version = version
                yield
            finally:
                self.db.execute("COMMIT")

    def close(self) -> None:
        self.db.close()

    def known(self) -> dict[str, tuple[str, list[str]]]:
        """Every claim's id → its text and cited paths (what capture's `used` matches)."""
        return {row[0]: (row[1], _json_list(row[2])) for row in
                self.db.execute("SELECT id, text, evidence_paths FROM claims")}

    def has_claim(self, claim_id: str) -> bool:
        return self.db.execute("SELECT 1 FROM claims WHERE id = ?", (claim_id,)).fetchone() \
            is not None

    def embedder(self) -> tuple[str, int]:
        return self.meta.get("embedder_name", ""), int(self.meta.get("embedder_dims") or 0)

    # -- search ---------------------------------------------------------------------------

    def search(self, query: str, *, k: int, scope: str | None = None,
               subject: str | None = None, claim_type: str | None = None,
               query_vector: Any = None, now: dt.datetime | None = None) -> Hits:
        """Top-k claims by the shared ranking (mcp_bridge.contract.ranking), attributed later.

        `query_vector` is the query's vector, None (lexical), or a function returning
        either, called once the lexical list is taken: the bridge's host embedder computes
        the vector in another process meanwhile."""
        now = now or dt.datetime.now(dt.UTC)
        try:
            with self._consistent():
                lexical, cover = self._lexical(query, k, now, scope, subject, claim_type)
                # the lexical candidates' factors are read while the vector is computed
                ids, factors = self._factors_of(lexical, now)
                if callable(query_vector):
                    query_vector = query_vector()
                matrix = None if query_vector is None else self.vectors()
                ran_vector = matrix is not None and len(matrix.rowids) > 0
                vector = (self._vector(query_vector, k, now, scope, subject, claim_type)
                          if ran_vector else [])
                more_ids, more_factors = self._factors_of(
                    [r for r in vector if r not in ids], now)
                ids.update(more_ids)
                factors.update(more_factors)
                fused = ranking.fuse([ids[r] for r in lexical if r in ids],
                                     [ids[r] for r in vector if r in ids], factors,
                                     coverage={ids[r]: c for r, c in cover.items() if r in ids})
                rowid_of = {cid: rowid for rowid, cid in ids.items()}
                rows = self._rows([rowid_of[cid] for cid, _ in fused[:k]])
        except sqlite3.Error as e:
            return Hits([], False, "lexical", [f"{contract.SNAPSHOT} query failed ({e})"])
        ran_lexical = bool(ranking.query_terms(query))
        # what actually ran: a vector list only when there is a query vector and the
        # snapshot holds vectors to compare it with
        mode = ("hybrid" if ran_vector and ran_lexical else "vector" if ran_vector
                else "lexical")
        results = [self._public(rows[rowid_of[cid]], s) for cid, s in fused[:k]]
        return Hits(results, len(fused) > k, mode)

    def _filters(self, now: dt.datetime, scope: str | None, subject: str | None,
                 claim_type: str | None) -> tuple[str, list[Any]]:
        sql = (" AND c.superseded_by IS NULL AND (c.valid_until IS NULL OR "
               "julianday(c.valid_until) > julianday(?))")
        args: list[Any] = [now.strftime("%Y-%m-%dT%H:%M:%SZ")]
        for column, value in (("c.scope", scope), ("c.type", claim_type)):
            if value is not None:
                sql += f" AND {column} = ?"
                args.append(value)
        if subject is not None:
            sql += " AND lower(c.subject) = lower(?)"
            args.append(subject)
        return sql, args

    def _lexical(self, query: str, k: int, now: dt.datetime, scope: str | None,
                 subject: str | None, claim_type: str | None
                 ) -> tuple[list[int], dict[int, float]]:
        """BM25 over claims matching all terms, then any term if that found fewer than k;
        returns the rowids and, for the any-term tail, each one's query coverage
        (conjunctive hits cover the whole query)."""
        terms = ranking.query_terms(query)
        if not terms:
            return [], {}
        quoted = ['"' + t.replace('"', '""') + '"' for t in terms]
        filtered = scope is not None or subject is not None or claim_type is not None
        n = ranking.depth(k)
        found = self._bm25(" AND ".join(quoted), n, now, scope, subject, claim_type, filtered)
        if len(found) >= k or len(terms) == 1:
            return found, {}
        seen = set(found)
        more = self._bm25(" OR ".join(quoted), n, now, scope, subject, claim_type, filtered)
        tail = [r for r in more if r not in seen][: n - len(found)]
        return found + tail, self._coverage(terms, quoted, tail)

    def _coverage(self, terms: list[str], quoted: list[str], rowids: list[int]
                  ) -> dict[int, float]:
        """ranking.coverage of each rowid: which terms it matches, and each term's document
        frequency over the whole snapshot (the server counts over the same claims)."""
        if not rowids:
            return {}
        # One pass over each term's doclist gives both (FTS5 answers `rowid IN (...)` with
        # MATCH by re-reading the doclist once per rowid, ~4x slower at 100k).
        marks = ",".join("?" * len(rowids))
        sql = (f"SELECT count(*), group_concat(rowid) FILTER (WHERE rowid IN ({marks})) "
               "FROM claims_fts WHERE claims_fts MATCH ?")
        df: dict[str, int] = {}
        matched: dict[int, set[str]] = {r: set() for r in rowids}
        for term, phrase in zip(terms, quoted, strict=True):
            df[term], hits = self.db.execute(sql, [*rowids, phrase]).fetchone()
            for rowid in hits.split(",") if hits else ():
                matched[int(rowid)].add(term)
        cover = ranking.coverage_of(terms, df, self.count)
        return {r: cover(m) for r, m in matched.items()}

    def _bm25(self, match: str, n: int, now: dt.datetime, scope: str | None, subject: str | None,
              claim_type: str | None, filtered: bool) -> list[int]:
        """Top n rowids by BM25 (mcp_bridge.contract.bm25: text weighs twice the subject),
        equal scores in rowid order (the claim number's, as the server breaks them).

        Unfiltered, FTS5 ranks alone and superseded/expired rows are dropped afterwards:
        joining every match to claims first costs ~40% more at 100k claims. Filters are
        narrow, so they join.
        """
        order = f"{bm25.SQL_BM25}, rowid"
        if not filtered:
            sql = f"SELECT rowid FROM claims_fts WHERE claims_fts MATCH ? ORDER BY {order} LIMIT ?"
            ranked = [r[0] for r in self.db.execute(sql, [match, n])]
            return self._live(ranked, now)
        where, args = self._filters(now, scope, subject, claim_type)
        sql = ("SELECT c.rowid FROM claims_fts JOIN claims c ON c.rowid = claims_fts.rowid "
               f"WHERE claims_fts MATCH ?{where} ORDER BY {bm25.SQL_BM25}, c.rowid LIMIT ?")
        return [r[0] for r in self.db.execute(sql, [match, *args, n])]

    def _vector(self, query_vector: Any, k: int, now: dt.datetime, scope: str | None,
                subject: str | None, claim_type: str | None) -> list[int]:
        import numpy as np

        vec = self.vectors()
        if vec is None:
            return []
        sims = vec.matrix @ np.asarray(query_vector, dtype=np.float32)
        wanted = {"type": claim_type, "scope": scope,
                  "subject": subject.lower() if subject else None}
        sims = np.where(vec.mask(now, wanted), sims, -np.inf)
        order = _top(sims, ranking.depth(k))
        if not len(order):
            return []
        floor = ranking.cosine_floor(float(sims[order[0]]))
        return [int(vec.rowids[i]) for i in order if sims[i] >= floor]

    def _live(self, rowids: list[int], now: dt.datetime) -> list[int]:
        """Drop superseded and expired claims, keeping the order."""
        if not rowids:
            return []
        marks = ",".join("?" * len(rowids))
        sql = (f"SELECT rowid FROM claims c WHERE rowid IN ({marks}) AND c.superseded_by IS "
               "NULL AND (c.valid_until IS NULL OR julianday(c.valid_until) > julianday(?))")
        live = {r[0] for r in self.db.execute(sql, [*rowids, now.strftime("%Y-%m-%dT%H:%M:%SZ")])}
        return [r for r in rowids if r in live]

    def has_vectors(self) -> bool:
        """Whether the snapshot holds any embedding: a search of one that holds none has
        nothing to compare a query vector with, so the query is not embedded at all."""
        with self._lock:
            if self._vectors is not None:
                return bool(len(self._vectors.rowids))
        try:
            row = self.db.execute("SELECT EXISTS (SELECT 1 FROM embeddings)").fetchone()
        except sqlite3.Error:
            return False  # the search itself meets the error and says so
        return bool(row[0])

    def vectors(self) -> _Vectors | None:
        """The embedding matrix, loaded once (the one-time cost of the first hybrid search)."""
        with self._lock:
            if self._vectors is None:
                self._vectors = self._load_vectors()
            return self._vectors

    def _load_vectors(self) -> _Vectors | None:
        """Copy the blobs straight into one preallocated matrix (no intermediate lists)."""
        import numpy as np

        dims = self.embedder()[1]
        n = self.db.execute("SELECT count(*) FROM embeddings").fetchone()[0]
        if not n or dims <= 0:
            return None
        matrix = np.empty((n, dims), dtype=np.float32)
        rowids = np.empty(n, dtype=np.int64)
        columns = np.empty((3, n), dtype=np.int32)
        superseded = np.empty(n, dtype=bool)
        valid_until = np.empty(n, dtype=np.float64)
        codes: dict[str, int] = {}
        cur = self.db.execute(
            "SELECT e.rowid, e.vector, c.type, c.scope, lower(c.subject), "
            "c.superseded_by IS NOT NULL, c.valid_until FROM embeddings e "
            "JOIN claims c ON c.rowid = e.rowid")
        i = 0
        for rowid, blob, ctype, scope, subject, gone, until in cur:
            if len(blob) != dims * 4:
                continue  # a wrong-sized vector: this claim is found lexically only
            matrix[i] = np.frombuffer(blob, dtype="<f4")
            rowids[i] = rowid
            for j, value in enumerate((ctype, scope, subject)):
                columns[j, i] = codes.setdefault(value, len(codes))
            superseded[i] = bool(gone)
            moment = parse_time(until)
            valid_until[i] = moment.timestamp() if moment else np.inf
            i += 1
        return _Vectors(rowids=rowids[:i], matrix=matrix[:i], types=columns[0, :i],
                        scopes=columns[1, :i], subjects=columns[2, :i],
                        superseded=superseded[:i], valid_until=valid_until[:i], codes=codes)

    def _factors_of(self, rowids: Sequence[int], now: dt.datetime
                    ) -> tuple[dict[int, str], dict[str, ranking.Factors]]:
        """rowid → claim id, and claim id → its ranking factors, of every candidate: only
        the columns the fusion reads (the results' whole rows are read for the top k alone;
        a hybrid search has up to 2 × CANDIDATES candidates)."""
        unique = list(dict.fromkeys(rowids))
        if not unique:
            return {}, {}
        marks = ",".join("?" * len(unique))
        cur = self.db.execute(f"SELECT rowid, {_FACTOR_COLUMNS} FROM claims "
                              f"WHERE rowid IN ({marks})", unique)
        ids, factors = {}, {}
        for rowid, cid, confidence, created_at, promoted_at, stale, staleness in cur:
            ids[rowid] = cid
            factors[cid] = _factors_from(confidence, created_at, promoted_at, stale, staleness,
                                         now)
        return ids, factors

    def _rows(self, rowids: Sequence[int]) -> dict[int, dict[str, Any]]:
        unique = list(dict.fromkeys(rowids))
        if not unique:
            return {}
        marks = ",".join("?" * len(unique))
        cur = self.db.execute(f"SELECT {self._columns} FROM claims WHERE rowid IN ({marks})",
                              unique)
        names = [d[0] for d in cur.description]
        return {row[0]: dict(zip(names, row, strict=True)) for row in cur}

    def _public(self, row: dict[str, Any], score: float) -> dict[str, Any]:
        paths = _paths(row)
        public = {
            "id": row["id"], "text": row["text"], "type": row["type"],
            "subject": row["subject"], "scope": row["scope"],
            "date": str(row["promoted_at"] or row["created_at"] or "")[:10],
            "independent_sessions": int(row["independent_sessions"] or 0),
            "confidence": round(float(row["confidence"] or 0.0), 2),
            "contested": bool(row["contested"]), "stale": bool(row["stale"]),
            "evidence_paths": paths, "repos": _json_list(row.get("repos")),
            "why": row.get("why") or "", "stale_since": row.get("stale_since") or "",
            "conflicts": _json_list(row.get("conflicts")),
            "score": round(score, 6),
        }
        return cast("dict[str, Any]", clean_value(public, self.max_chars))

    # -- path-scoped recall -----------------------------------------------------------------

    def for_paths(self, patterns: Sequence[str], *, k: int = ranking.PATH_RECALL_K,
                  now: dt.datetime | None = None) -> list[dict[str, Any]]:
        """Live claims whose cited paths or subject relate to `patterns`, best first.

        This runs on every fleet_claim, a write the agent waits for, so its cost must not
        grow with the snapshot: an in-memory index (built once per snapshot file) maps a
        first path segment or a subject word to claim rows, most confident first; at most
        PATH_CANDIDATES of them are read back, and the exact glob test
        (mcp_bridge.contract.ranking.path_match) runs on those in Python.
        """
        now = now or dt.datetime.now(dt.UTC)
        try:
            with self._consistent():
                candidates = self._path_candidates(patterns)
                if not candidates:
                    return []
                where, args = self._filters(now, None, None, None)
                marks = ",".join("?" * len(candidates))
                sql = f"SELECT {self._columns} FROM claims c WHERE c.rowid IN ({marks}){where}"
                cur = self.db.execute(sql, [*candidates, *args])
                names = [d[0] for d in cur.description]
                raws = cur.fetchall()
        except sqlite3.Error:
            return []
        scored = []
        match = ranking.PathMatcher(patterns)
        for raw in raws:
            row = dict(zip(names, raw, strict=True))
            weight = match(row["subject"], _paths(row))
            if weight:
                scored.append((ranking.path_score(weight, _factors(row, now)), row))
        scored.sort(key=lambda pair: (-pair[0], pair[1]["id"]))
        return [self._public(row, score) for score, row in scored[:k]]

    def promoted(self, *, limit: int = 500, now: dt.datetime | None = None,
                 ) -> list[dict[str, Any]]:
        """Live promoted claims, best first by their prior alone (confidence, recency,
        freshness; then independent sessions): what `write-rules` offers the files a
        runtime reads at start, where there is no query to rank against."""
        now = now or dt.datetime.now(dt.UTC)
        where, args = self._filters(now, None, None, None)
        sql = f"SELECT {self._columns} FROM claims c WHERE c.status = 'promoted'{where}"
        try:
            cur = self.db.execute(sql, args)
        except sqlite3.Error:
            return []
        names = [d[0] for d in cur.description]
        rows = [dict(zip(names, raw, strict=True)) for raw in cur]
        scored = sorted(((ranking.score(1, None, _factors(r, now)), r) for r in rows),
                        key=lambda p: (-p[0], -int(p[1]["independent_sessions"] or 0),
                                       p[1]["id"]))
        return [self._public(row, score) for score, row in scored[:limit]]

    def _path_candidates(self, patterns: Sequence[str]) -> list[int]:
        """Up to PATH_CANDIDATES rowids that may relate to `patterns` (a superset of the
        exact test's matches), in confidence order."""
        index, rowids = self._path_index()
        buckets = []
        for pattern in patterns:
            literal = globs.literal_segments(pattern)
            if not literal:  # "**/*.py" can relate to anything cited: most confident first
                buckets.append(index.get("*", []))
                continue
            # Cited paths at or under the pattern's literal directory, and cited directories
            # that hold it (each shorter literal prefix, exactly), and subject words.
            buckets.append(index.get("p:" + "/".join(literal), []))
            buckets += [index.get("e:" + "/".join(literal[:n]), [])
                        for n in range(1, len(literal))]
            buckets += [index.get("w:" + seg.lower().split(".")[0], []) for seg in literal]
        chosen: list[int] = []
        for order in heapq.merge(*buckets):
            if not chosen or chosen[-1] != order:
                chosen.append(order)
                if len(chosen) >= PATH_CANDIDATES:
                    break
        return [rowids[order] for order in chosen]

    def _path_index(self) -> tuple[dict[str, list[int]], list[int]]:
        """key → confidence-ordered row positions, and position → rowid.

        Keys: "p:<dir>" for every leading directory of a cited path (and the path itself),
        "e:<path>" for the cited path exactly, the same for path-like subjects,
        "w:<subject>" for word subjects, "*" for every row. Built once per snapshot file.
        """
        if self._paths_index is None:
            index: dict[str, list[int]] = {"*": []}
            rowids: list[int] = []
            rows = self.db.execute("SELECT rowid, subject, evidence_paths FROM claims "
                                   "ORDER BY confidence DESC, rowid")
            for order, (rowid, subject, paths_json) in enumerate(rows):
                rowids.append(rowid)
                index["*"].append(order)
                subject = str(subject or "")
                cited = _paths({"evidence_paths": paths_json})
                if "/" in subject:
                    cited.append(subject)
                elif subject.strip():
                    index.setdefault("w:" + subject.strip().lower(), []).append(order)
                keys: set[str] = set()
                for path in cited:
                    segs = globs.segments(path)[:PATH_INDEX_DEPTH]
                    keys.add("e:" + "/".join(segs))
                    keys.update("p:" + "/".join(segs[:n]) for n in range(1, len(segs) + 1))
                for key in keys:
                    index.setdefault(key, []).append(order)
            self._paths_index = (index, rowids)
        return self._paths_index

    # -- timeline -------------------------------------------------------------------------

    def timeline(self, subject: str, *, since: dt.datetime | None, limit: int,
                 ) -> tuple[list[dict[str, Any]], bool]:
        sql = (f"SELECT at, kind, subject, claim_id, session_id, {self._outcome}, actor, "
               "summary FROM timeline WHERE lower(subject) = lower(?)")
        args: list[Any] = [subject]
        if since is not None:
            sql += " AND julianday(at) >= julianday(?)"
            args.append(since.strftime("%Y-%m-%dT%H:%M:%SZ"))
        sql += " ORDER BY at DESC, rowid DESC LIMIT ?"
        cur = self.db.execute(sql, [*args, limit + 1])
        names = [d[0] for d in cur.description]
        rows = [dict(zip(names, r, strict=True)) for r in cur]
        return clean_value(rows[:limit], self.max_chars), len(rows) > limit


def _paths(row: dict[str, Any]) -> list[str]:
    return _json_list(row["evidence_paths"])


def _json_list(raw: Any) -> list[str]:
    """A JSON list of strings from a snapshot column; [] for anything else."""
    try:
        items = json.loads(raw or "[]")
    except (TypeError, ValueError):
        return []
    return [x for x in items if isinstance(x, str)] if isinstance(items, list) else []


PATH_CANDIDATES = 400  # rows path-scoped recall examines at most, most confident first
PATH_INDEX_DEPTH = 12  # directory levels indexed per cited path


def _top(sims: Any, n: int) -> Any:
    import numpy as np

    if len(sims) <= n:
        return np.argsort(-sims)
    part = np.argpartition(-sims, n)[:n]
    return part[np.argsort(-sims[part])]


#: The claim's id and the columns _factors_from reads, in its order (Snapshot._factors_of).
_FACTOR_COLUMNS = "id, confidence, created_at, promoted_at, stale, staleness"


def _factors(row: dict[str, Any], now: dt.datetime) -> ranking.Factors:
    return _factors_from(row["confidence"], row.get("created_at"), row.get("promoted_at"),
                         row["stale"], row["staleness"], now)


def _factors_from(confidence: Any, created_at: Any, promoted_at: Any, stale: Any,
                  staleness: Any, now: dt.datetime) -> ranking.Factors:
    """A claim's ranking factors from its snapshot columns (a row tuple needs no dict)."""
    when = parse_time(promoted_at or created_at)
    age = (now - when).total_seconds() / 86400 if when else 365.0
    stale_share = float(staleness or (ranking.STALE_DEFAULT if stale else 0.0))
    return ranking.Factors(confidence=float(confidence or 0.0), age_days=age,
                           staleness=stale_share)
