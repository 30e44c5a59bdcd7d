"""Promoted claims with real embeddings, built inline (no factories), for the search tests."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from claims.models import Claim, Evidence, text_hash
from fleet.models import Fleet
from mcp_bridge.contract import embed


def promoted(
    fleet: Fleet,
    rows: list[dict[str, Any]],
    *,
    now: datetime | None = None,
) -> list[Claim]:
    """Rows of {text, subject, type?, confidence?, paths?, commit?, age_days?, ...}."""
    now = now or timezone.now()
    vectors = embed.embed([r["text"] for r in rows])
    claims = []
    for row, vector in zip(rows, vectors, strict=True):
        row = dict(row)
        paths, commit = row.pop("paths", []), row.pop("commit", "abc1234")
        age = timedelta(days=row.pop("age_days", 1))
        claim = Claim.objects.create(
            fleet=fleet,
            type=row.pop("type", "gotcha"),
            scope="fleet",
            status=Claim.Status.PROMOTED,
            promoted_at=now - age,
            created_at=now - age,
            independent_sessions=1,
            embedding=vector,
            embedding_model=embed.NAME,
            text_hash=text_hash(row["text"]),
            **row,
        )
        for i, path in enumerate(paths or [""]):
            Evidence.objects.create(
                claim=claim,
                session_id="s-old",
                message_id=f"m{i}",
                path=path,
                commit=commit if path else "",
                created_at=now - age,
            )
        claims.append(claim)
    return claims
