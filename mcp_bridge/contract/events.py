"""One definition of every spool event's payload, and the one check every front door runs.

Stdlib only. The bridge's write tools, the REST spool upload, the REST write endpoints, the
drain and the model field lengths all take their limits from here, so a write the bridge
answers "queued" is never refused later for a rule the bridge could have checked.
"""

from __future__ import annotations

import json
from typing import Any, Final

#: Deepest JSON any front door takes (REST bodies, spool lines, tool arguments). Caller-
#: shaped data 100 levels deep is ordinary; 10,000 levels is an attack on the parser.
MAX_JSON_DEPTH: Final = 100


def json_depth_problem(raw: bytes | str) -> str | None:
    """Why `raw` nests deeper than MAX_JSON_DEPTH, or None; never parses the document.

    Counts brackets outside strings in one linear scan, so a hostile body costs no
    recursion and no allocation per level.
    """
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    depth = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > MAX_JSON_DEPTH:
                return f"JSON nested deeper than {MAX_JSON_DEPTH} levels"
        elif ch in "]}":
            depth -= 1
    return None


def loads(raw: bytes | str) -> Any:
    """json.loads for untrusted input: depth-bounded, no NaN/Infinity; ValueError on trouble."""
    problem = json_depth_problem(raw)
    if problem:
        raise ValueError(problem)
    try:
        return json.loads(raw, parse_constant=_refuse_constant)
    except RecursionError:  # pragma: no cover - the depth check runs first
        raise ValueError(f"JSON nested deeper than {MAX_JSON_DEPTH} levels") from None


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")
