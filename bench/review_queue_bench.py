"""Bench: the admin review queue with 10k proposed claims in one fleet; target ≤ 300 ms.

The rows look like a fleet with transcript capture on: half are captured candidates (an
extractor each), three of every four are labelled likely duplicates of the fourth (groups
of four, filed over days so the queue's group order differs from filing order), and half
the cited sessions are verified (Session rows), so every page computes its groups' figures.

Run standalone: `/work/main/.venv/bin/python bench/review_queue_bench.py [--claims N]
[--requests N]`. It uses the configured database (the embedded Postgres by default),
creates a throwaway fleet, moderator and superuser, bulk-creates the claims, and removes
all of it afterwards, even on failure.

It renders the review queue through the Django test client as a logged-in moderator and
reports server time (the full request: middleware, queries, template) p50/p95 and the
query count, with where the time goes (SQL vs the rest, and the pagination COUNTs). The
baseline, measured in the same run on the same rows, is the stock ModelAdmin changelist
(no scoping, filters or custom columns) on a separate AdminSite.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ctxlake_site.settings")

import django  # noqa: E402

# whitenoise warns that STATIC_ROOT was never collected; irrelevant to server time here.
warnings.filterwarnings("ignore", message="No directory at")

django.setup()

from datetime import timedelta  # noqa: E402

from django.conf import settings  # noqa: E402
from django.contrib import admin  # noqa: E402
from django.contrib.auth.models import Permission, User  # noqa: E402
from django.db import connection  # noqa: E402
from django.test import Client, override_settings  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402
from django.urls import path  # noqa: E402
from django.utils import timezone  # noqa: E402

from claims.models import Claim, Evidence, text_hash  # noqa: E402
from fleet.models import Agent, Fleet, FleetModerator, Session  # noqa: E402
from mcp_bridge.contract import events as ev  # noqa: E402

TARGET_MS = 300
SUBJECTS = [f"subject {i:02d}" for i in range(40)]
TYPES = Claim.Type.values
GROUP = 4  # a root and three claims labelled likely duplicates of it


class StockClaimAdmin(admin.ModelAdmin[Claim]):
    """Django's defaults (Meta ordering, __str__ only); the stock template, not ours."""

    change_list_template = "admin/change_list.html"


stock_site = admin.AdminSite(name="stock")
stock_site.register(Claim, StockClaimAdmin)
urlpatterns = [path("admin/", admin.site.urls), path("stock/", stock_site.urls)]


def create_rows(n: int) -> tuple[Fleet, User, User]:
    """A throwaway fleet with `n` proposed claims (one citation each) and two people."""
    tag = uuid.uuid4().hex[:8]
    fleet = Fleet.objects.create(slug=f"bench-{tag}", name=f"Bench {tag}", claim_seq=n)
    agent = Agent.objects.create(fleet=fleet, agent_id=f"bench-agent-{tag}")
    start = timezone.now() - timedelta(days=60)
    claims = []
    for i in range(1, n + 1):
        text = f"bench claim {i}: the build of module {i % 97} needs flag {i % 13}"
        member = (i - 1) % GROUP  # 0: the group's root; later members filed days after
        claims.append(
            Claim(
                fleet=fleet,
                number=i,
                text=text,
                text_hash=text_hash(text),
                type=TYPES[i % len(TYPES)],
                subject=SUBJECTS[i % len(SUBJECTS)],
                independent_sessions=1 + i % 3,
                proposed_by=agent,
                extractor=ev.CAPTURE_EXTRACTORS[i % len(ev.CAPTURE_EXTRACTORS)] if i % 2 else "",
                created_at=start + timedelta(seconds=i * 60, days=member * 3),
            )
        )
    Claim.objects.bulk_create(claims, batch_size=2000)
    for i, claim in enumerate(claims):
        if i % GROUP:
            claim.near_claim_id = claims[i - i % GROUP].pk
            claim.near_similarity, claim.near_relation = 0.97, Claim.NearRelation.DUPLICATE
    Claim.objects.bulk_update(
        [c for i, c in enumerate(claims) if i % GROUP],
        ["near_claim", "near_similarity", "near_relation"],
        batch_size=2000,
    )
    Evidence.objects.bulk_create(
        [Evidence(claim=c, session_id=f"s{c.number}", message_id="m1") for c in claims],
        batch_size=2000,
    )
    Session.objects.bulk_create(
        [Session(fleet=fleet, agent=agent, session_id=f"s{i}") for i in range(2, n + 1, 2)],
        batch_size=2000,
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE claims_claim")  # what autovacuum would soon do for real
    moderator = User.objects.create_user(f"bench-mod-{tag}", is_staff=True)
    moderator.user_permissions.add(Permission.objects.get(codename="promote_claim"))
    FleetModerator.objects.create(fleet=fleet, user=moderator)
    root = User.objects.create_superuser(f"bench-root-{tag}", password=None)
    return fleet, moderator, root


def measure(client: Client, url: str, requests: int) -> dict[str, Any]:
    """Warm up, then time `requests` GETs; one more under query capture for the breakdown."""
    for _ in range(3):
        assert client.get(url).status_code == 200, url
    times = []
    for _ in range(requests):
        began = time.perf_counter()
        response = client.get(url)
        times.append((time.perf_counter() - began) * 1000)
        assert response.status_code == 200
    with CaptureQueriesContext(connection) as queries:
        began = time.perf_counter()
        client.get(url)
        captured_ms = (time.perf_counter() - began) * 1000
    sql_ms = sum(float(q["time"]) * 1000 for q in queries.captured_queries)
    counts_ms = sum(
        float(q["time"]) * 1000
        for q in queries.captured_queries
        if q["sql"].lstrip().upper().startswith("SELECT COUNT")
    )
    times.sort()
    return {
        "p50": statistics.median(times),
        "p95": times[max(0, round(0.95 * len(times)) - 1)],
        "queries": len(queries.captured_queries),
        "sql_ms": sql_ms,
        "count_ms": counts_ms,
        "captured_ms": captured_ms,
        "slowest": max(queries.captured_queries, key=lambda q: float(q["time"])),
    }


def report(name: str, m: dict[str, Any]) -> None:
    print(
        f"{name:<34} p50 {m['p50']:7.1f} ms   p95 {m['p95']:7.1f} ms   {m['queries']:>2} queries"
        f"   (one request: SQL {m['sql_ms']:.1f} ms of {m['captured_ms']:.1f} ms;"
        f" COUNTs {m['count_ms']:.1f} ms)"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--claims", type=int, default=10_000)
    parser.add_argument("--requests", type=int, default=30)
    args = parser.parse_args()
    quiet_static = {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"}
    overrides = override_settings(
        ROOT_URLCONF=__name__,
        ALLOWED_HOSTS=[*settings.ALLOWED_HOSTS, "testserver"],
        STORAGES={**settings.STORAGES, "staticfiles": quiet_static},
        DEBUG=False,
    )
    print(f"creating {args.claims} proposed claims in a throwaway fleet…", flush=True)
    began = time.perf_counter()
    fleet, moderator, root = create_rows(args.claims)
    print(f"  done in {time.perf_counter() - began:.1f} s", flush=True)
    try:
        with overrides:
            as_mod, as_root = Client(), Client()
            as_mod.force_login(moderator)
            as_root.force_login(root)
            first = as_mod.get("/admin/claims/claim/review/").content.decode()
            assert "4 proposals · " in first, "the first page should show whole groups"
            queue = measure(as_mod, "/admin/claims/claim/review/", args.requests)
            filtered = measure(
                as_mod, f"/admin/claims/claim/review/?fleet={fleet.pk}&type=gotcha", args.requests
            )
            searched = measure(as_mod, "/admin/claims/claim/review/?q=module+42", args.requests)
            captured = measure(
                as_mod, "/admin/claims/claim/review/?source=captured", args.requests
            )
            stock = measure(as_root, "/stock/claims/claim/", args.requests)
    finally:
        cleanup(fleet, moderator, root)
    print(f"\n{args.claims} proposed claims, {args.requests} requests each (server time),"
          f" load {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}:")
    report("review queue (moderator)", queue)
    report("review queue, fleet+type filter", filtered)
    report("review queue, text search", searched)
    report("review queue, captured only", captured)
    report("baseline: stock ModelAdmin list", stock)
    ratio = queue["p50"] / stock["p50"]
    print(f"\nreview queue / stock changelist (p50): {ratio:.2f}x")
    print(f"slowest query in the queue: {float(queue['slowest']['time']) * 1000:.1f} ms")
    print(f"  {queue['slowest']['sql'][:300]}")
    worst = max(queue["p95"], filtered["p95"], searched["p95"], captured["p95"])
    verdict = "met" if worst <= TARGET_MS else "MISSED"
    print(f"target p95 ≤ {TARGET_MS} ms: {verdict} (worst p95 {worst:.1f} ms)")
    return 0 if worst <= TARGET_MS else 1


def cleanup(fleet: Fleet, *users: User) -> None:
    Evidence.objects.filter(claim__fleet=fleet)._raw_delete(Evidence.objects.db)
    Claim.objects.filter(fleet=fleet)._raw_delete(Claim.objects.db)
    fleet.delete()
    for user in users:
        user.delete()
    print("cleaned up the throwaway fleet and users", flush=True)


if __name__ == "__main__":
    sys.exit(main())
