"""Print what each capture extractor proposes for 20 hand-made transcripts.

    /work/main/.venv/bin/python bench/capture_precision.py

The transcripts mix sessions with something worth keeping and ordinary noise (polite
"don't worry", flaky retries, exploratory commands). The verdicts in docs/capture.md's
precision table are a person's reading of this output, not computed here.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mcp_bridge.capture import extract, record, transcript  # noqa: E402
from tests.mcp_bridge.transcripts import Claude, Codex, error_fix_claude, failing_claude  # noqa: E402,E501

Scenario = Callable[[Path], Claude | Codex]


def s01(r: Path) -> Claude:
    return error_fix_claude(r)


def s02(r: Path) -> Claude:
    return failing_claude(r)


def s03(r: Path) -> Claude:
    c = Claude(cwd=str(r))
    c.user("Run the test suite")
    c.bash("pytest -q", "E   django.core.exceptions.ImproperlyConfigured: settings not configured",
           1)
    c.bash("DJANGO_SETTINGS_MODULE=app.settings pytest -q", "58 passed in 3.1s")
    c.assistant("The suite needs DJANGO_SETTINGS_MODULE=app.settings; all 58 tests pass.")
    return c


def s04(r: Path) -> Claude:
    c = Claude(cwd=str(r))
    c.user("The integration test is flaky, can you look?")
    c.bash("pytest -q tests/test_api.py", "E   ConnectionResetError: [Errno 104]", 1)
    c.bash("pytest -q tests/test_api.py", "12 passed")
    c.assistant("It passed on a retry; the failure looks like a transient connection reset.")
    return c


def s05(r: Path) -> Claude:
    c = Claude(cwd=str(r))
    c.user("Add a --verbose flag to the CLI")
    c.edit(str(r / "src" / "cli.py"))
    c.bash("pytest -q tests/test_cli.py", "7 passed")
    c.assistant("Added --verbose to src/cli.py. Don't worry about the old alias, it still "
                "works.")
    c.user("thanks")
    return c


def s06(r: Path) -> Claude:
    c = Claude(cwd=str(r))
    c.user("Why does the migration fail on CI?")
    c.bash("python manage.py migrate", "django.db.utils.ProgrammingError: relation "
           "\"vector\" does not exist", 1)
    c.assistant("Turns out the CI database lacks the pgvector extension; the migration "
                "0003 needs CREATE EXTENSION vector first.")
    c.edit(str(r / "app" / "migrations" / "0003_vector.py"))
    c.bash("python manage.py migrate", "Applying app.0003_vector... OK")
    return c


def s07(r: Path) -> Claude:
    c = Claude(cwd=str(r))
    c.user("We decided to use uv instead of pip for installs from now on, please update the "
           "Makefile.")
    c.edit(str(r / "Makefile"))
    c.bash("make install", "Resolved 42 packages")
    c.assistant("Makefile now uses uv.")
    return c


def s08(r: Path) -> Claude:
    c = Claude(cwd=str(r))
    c.user("What does src/slug.py do?")
    c.assistant("It turns titles into URL slugs; never mind the legacy branch at the bottom, "
                "it is unused.")
    return c


def s09(r: Path) -> Claude:
    c = Claude(cwd=str(r))
    c.user("Lint is failing")
    c.bash("ruff check .", "src/a.py:1:1: F401 `os` imported but unused\nFound 1 error.", 1)
    c.edit(str(r / "src" / "a.py"))
    c.bash("ruff check .", "All checks passed!")
    c.assistant("Removed the unused import.")
    return c


def s10(r: Path) -> Claude:
    c = Claude(cwd=str(r))
    c.user("Build the frontend")
    c.bash("npm run build", "Error: Cannot find module 'vite'", 1)
    c.bash("npm ci", "added 312 packages")
    c.bash("npm run build", "built in 4.2s")
    c.assistant("The node_modules were missing; after npm ci the build works.")
    return c


def s11(r: Path) -> Claude:
    c = Claude(cwd=str(r))
    c.user("Always run make migrate before the tests here, the test DB is not created "
           "otherwise.")
    c.bash("make migrate", "ok")
    c.bash("pytest -q", "30 passed")
    c.assistant("Done, 30 passed.")
    return c


def s12(r: Path) -> Claude:
    c = Claude(cwd=str(r))
    c.user("Fix the date parsing bug")
    c.bash("pytest -q tests/test_dates.py", "E   ValueError: time data '2026-13-01' does not "
           "match format", 1)
    c.edit(str(r / "src" / "dates.py"))
    c.bash("pytest -q tests/test_dates.py", "E   ValueError: day is out of range for month", 1)
    c.edit(str(r / "src" / "dates.py"))
    c.bash("pytest -q tests/test_dates.py", "9 passed")
    c.assistant("The fix was to validate the month before building the date in "
                "src/dates.py.")
    return c


def s13(r: Path) -> Claude:
    c = Claude(cwd=str(r))
    c.user("Refactor the logger")
    c.edit(str(r / "src" / "log.py"))
    c.assistant("I refactored src/log.py. Do not forget to rotate the log files; gotcha: the "
                "handler keeps the old file open after rotation.")
    c.user("never mind, let's stop here")
    return c


def s14(r: Path) -> Claude:
    c = Claude(cwd=str(r))
    c.user("Does go test pass?")
    c.bash("go test ./...", "ok  example.com/pkg 0.3s")
    c.assistant("Yes, all packages pass.")
    return c


def s15(r: Path) -> Codex:
    c = Codex(cwd=str(r))
    c.user("cargo build fails after the upgrade")
    c.shell("cargo build", "error[E0599]: no method named `as_str` found for enum `Kind`", 101)
    c.patch("src/kind.rs")
    c.shell("cargo build", "Finished dev [unoptimized] target(s) in 3.2s")
    c.assistant("The upgrade removed Kind::as_str; src/kind.rs now implements Display.")
    return c


def s16(r: Path) -> Codex:
    c = Codex(cwd=str(r))
    c.user("run the type checker")
    c.shell("mypy src", "src/app.py:10: error: Incompatible return value type", 1)
    c.shell("mypy --ignore-missing-imports src", "src/app.py:10: error: Incompatible return",
            1)
    c.assistant("mypy reports one real type error in src/app.py line 10; I have not fixed it.")
    return c


def s17(r: Path) -> Codex:
    c = Codex(cwd=str(r))
    c.user("Make the e2e tests run locally")
    c.shell("npx playwright test", "Error: browserType.launch: Executable doesn't exist", 1)
    c.shell("npx playwright install chromium && npx playwright test", "14 passed")
    c.assistant("Playwright needs its browsers: run npx playwright install chromium once.")
    return c


def s18(r: Path) -> Claude:
    c = Claude(cwd=str(r))
    c.user("Upgrade Django to 5.2")
    c.edit(str(r / "requirements.txt"))
    c.bash("pip install -r requirements.txt", "Successfully installed Django-5.2")
    c.bash("python -m pytest -q", "E   ImportError: cannot import name 'index_together'", 1)
    c.assistant("Django 5.2 removed index_together; the old migration still uses it.")
    return c


def s19(r: Path) -> Claude:
    c = Claude(cwd=str(r))
    c.user("Speed up the slow query in reports")
    c.edit(str(r / "reports" / "queries.py"))
    c.bash("pytest -q tests/test_reports.py", "5 passed")
    c.assistant("We'll go with a covering index on (fleet_id, created_at) instead of caching; "
                "the query now uses an index-only scan.")
    c.user("looks good")
    return c


def s20(r: Path) -> Claude:
    c = Claude(cwd=str(r))
    c.user("hi")
    c.assistant("Hello! Don't hesitate to ask if you need anything.")
    return c


SCENARIOS: list[Scenario] = [s01, s02, s03, s04, s05, s06, s07, s08, s09, s10, s11, s12, s13,
                             s14, s15, s16, s17, s18, s19, s20]


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="capture-precision-"))
    repo = work / "proj"
    (repo / "src").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    totals: dict[str, int] = {}
    for n, scenario in enumerate(SCENARIOS, start=1):
        path = scenario(repo).write(work / f"s{n:02d}.jsonl")
        t = transcript.read(path)
        rec = record.build(t)
        print(f"\n#{n:02d} {t.format}: outcome={rec.outcome} ({rec.why})")
        for c in extract.candidates(t.steps, relative=rec.relative):
            totals[c.extractor] = totals.get(c.extractor, 0) + 1
            print(f"   [{c.extractor} {c.score}] {c.type} / {c.subject}: {c.claim}")
    print("\nproposed per extractor:", totals)


if __name__ == "__main__":
    main()
