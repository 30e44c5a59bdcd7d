"""The lease glob cases every caller must answer alike (mcp_bridge.contract.globs semantics).

Data only: test_glob_agreement.py asks the contract, the server's staleness marks and
contention check, the guard, path recall, the briefing and the rules block each of them.
TRICKY marks the cases the slower, database-backed callers must see too.
"""

from __future__ import annotations

# (pattern, concrete path, does the pattern cover the path?)
COVERS: list[tuple[str, str, bool]] = [
    # exact paths; a plain path covers what lies beneath it
    ("src/app.py", "src/app.py", True),
    ("src/app.py", "src/app.pyc", False),
    ("src/payments", "src/payments/api.py", True),
    ("src/pay", "src/payments/api.py", False),
    ("a/b/c/d/e/f/g/h/i/j/k/l/m/n.py", "a/b/c/d/e/f/g/h/i/j/k/l/m/n.py", True),  # deep
    # case sensitivity
    ("README.md", "readme.md", False),
    ("src/*.PY", "src/a.py", False),
    # ./ prefixes, doubled slashes, backslashes (a separator, not an escape)
    ("./src/app.py", "src/app.py", True),
    ("src/app.py", "./src/app.py", True),
    ("src//app.py", "src/app.py", True),
    ("src\\app.py", "src/app.py", True),
    ("src/*.py", "src\\app.py", True),
    # a trailing / is the directory and everything under it
    ("docs/", "docs/x.md", True),
    ("docs/", "docs/a/b/c.md", True),
    ("docs/", "docsx/a.md", False),
    ("src/*/", "src/a/b.py", True),
    # * within one segment
    ("src/*.py", "src/app.py", True),
    ("src/*.py", "src/pkg/app.py", False),
    ("src/*", "src/pkg/app.py", True),
    ("a/*/c", "a/c", False),
    ("a/*/c", "a/b/c/d", True),
    ("src/a*b.py", "src/ab.py", True),
    # ? is exactly one character, never a separator
    ("src/?pp.py", "src/app.py", True),
    ("src/a?.py", "src/abc.py", False),
    ("src/a?.py", "src/a.py", False),
    ("src/a?c", "src/a/c", False),
    # ** at the start, in the middle, at the end; inside a segment it is *
    ("**", "anything/at/all", True),
    ("**/test_*.py", "test_x.py", True),
    ("**/test_*.py", "a/b/test_x.py", True),
    ("**/test_*.py", "a/b/x_test.py", False),
    ("src/**/views.py", "src/views.py", True),
    ("src/**/views.py", "src/a/b/views.py", True),
    ("src/**/views.py", "lib/src/views.py", False),
    ("src/**", "src/a/b.py", True),
    ("src/**", "srcx/a.py", False),
    ("src/a**b.py", "src/axxb.py", True),
    ("src/a**b.py", "src/a/x/b.py", False),
    # character classes
    ("src/[ab].py", "src/a.py", True),
    ("src/[ab].py", "src/c.py", False),
    ("src/[!ab].py", "src/c.py", True),
    ("src/[!ab].py", "src/a.py", False),
    ("src/[^ab].py", "src/c.py", True),
    ("src/[a-c].py", "src/b.py", True),
    ("src/[a-c].py", "src/d.py", False),
    ("src/[]].py", "src/].py", True),
    ("src/[.py", "src/[.py", True),  # an unclosed [ is literal
    # a pattern names its literal text too (a Next.js route); a class matches a metacharacter
    ("app/[id]/page.tsx", "app/[id]/page.tsx", True),
    ("app/[id]/page.tsx", "app/i/page.tsx", True),
    ("app/[id]/page.tsx", "app/x/page.tsx", False),
    ("app/[id]", "app/[id]/page.tsx", True),
    ("src/[*].py", "src/*.py", True),
    ("src/[*].py", "src/a.py", False),
    ("src/*.py", "src/[id].py", True),
    # dot-files are not special
    ("src/*", "src/.env", True),
    ("*.py", ".hidden.py", True),
    ("src/**/*.py", "src/.venv/x.py", True),
    ("src/?env", "src/.env", True),
    ("**", ".github/workflows/ci.yml", True),
    # patterns and paths that cannot name a file in a repository
    ("../x", "x", False),
    ("/etc", "/etc/passwd", False),
    ("", "a", False),
    ("src", "", False),
]

# (pattern a, pattern b, can some path be covered by both?) — overlap is symmetric
OVERLAPS: list[tuple[str, str, bool]] = [
    ("src/payments/**", "src/payments/stripe.py", True),
    ("src/payments", "src/payments/stripe.py", True),
    ("src/payments/", "src/payments/refunds/api.py", True),
    ("src/*.py", "src/app.py", True),
    ("src/*.py", "src/pkg/app.py", False),
    ("src/**/test_*.py", "src/**/*_api.py", True),  # test_x_api.py matches both
    ("docs/**", "src/**", False),
    ("src/a?.py", "src/ab.py", True),
    ("src/a?.py", "src/abc.py", False),
    ("src/[ab].py", "src/c.py", False),
    ("src/[ab].py", "src/[bc].py", True),
    ("src/[ab].py", "src/[cd].py", False),
    ("src/[!ab].py", "src/a.py", False),
    ("src/[!ab].py", "src/[!bc].py", True),
    ("src/[!ab].py", "src/[ab].py", False),
    ("src/[a-c].py", "src/[c-e].py", True),
    ("src/[a-b].py", "src/[c-e].py", False),
    ("app/[id]/page.tsx", "app/[id]/page.tsx", True),
    ("app/[id]/page.tsx", "app/*/page.tsx", True),
    ("app/[id]", "app/x", False),
    ("src/*.py", "src/[*].py", True),
    ("**", "anything/at/all", True),
    ("README.md", "README.rst", False),
    ("README.md", "readme.md", False),
    ("*.md", "*.rst", False),
    ("src/*", "src/**", True),
    ("docs/", "docs/**", True),
    ("./src/a.py", "src\\a.py", True),
    ("src/.env", "src/*", True),
    ("**/*.py", "docs/", True),
    ("a/*/c", "a/c", True),  # a/c/c
    ("x/**/y", "x/z", True),  # x/z/y
    ("src/a", "src/ab", False),
    ("../x", "x", False),
]

# The cases the database-backed callers must see too: classes, **, trailing /, dot-files,
# literal brackets.
TRICKY_COVERS: list[tuple[str, str, bool]] = [
    case
    for case in COVERS
    if case[0]
    in {
        "src/[ab].py",
        "src/[!ab].py",
        "**/test_*.py",
        "src/**/views.py",
        "docs/",
        "src/*",
        "app/[id]/page.tsx",
        "src/*.py",
    }
]
TRICKY_OVERLAPS: list[tuple[str, str, bool]] = [
    case for case in OVERLAPS if "[" in case[0] + case[1] or "**" in case[0] + case[1]
    or case[0].endswith("/") or ".env" in case[0]
]
