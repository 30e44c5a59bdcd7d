"""Random identifiers for spool events and generated session ids, without `uuid`.

`uuid` imports `platform` (its import compiles a dozen regular expressions: ~5 ms). The
PreToolUse hook spools an intrusion and may generate a session id at every edit inside
another agent's lease, with at most 2x a bare interpreter's start to do it in (issue 26),
so it makes the same text as `str(uuid.uuid4())` from `os.urandom` itself.
"""

from __future__ import annotations

import os


def random_uuid() -> str:
    """A random (version 4, RFC 4122 variant) UUID in its canonical 36-character form."""
    return _uuid4_text(os.urandom(16))


def derived_uuid(*parts: str) -> str:
    """A UUID in random_uuid's form, named by `parts`: the same parts, the same id.

    The PreToolUse hook names its intrusion events after the hook call (and the holder),
    so a call the session's bridge answered and the script then ran itself, after a reply
    that came too late, spools the same event twice, which the drain applies once.
    """
    import hashlib

    return _uuid4_text(hashlib.sha256("\0".join(parts).encode("utf-8", "surrogatepass"))
                       .digest()[:16])


def _uuid4_text(raw: bytes) -> str:
    """16 bytes as a version 4, RFC 4122 variant UUID's canonical text."""
    b = bytearray(raw)
    b[6] = b[6] & 0x0F | 0x40  # version 4
    b[8] = b[8] & 0x3F | 0x80  # RFC 4122 variant
    h = b.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


_HEX = frozenset("0123456789abcdef")


def canonical_uuid(value: object) -> str:
    """`value` as the canonical text of a UUID (`str(uuid.UUID(str(value)))`); ValueError
    when it is not one. Text already in that form (every id this package makes) is
    checked here without importing `uuid`; anything else (upper case, braces, a `urn:`)
    goes through `uuid` itself."""
    text = str(value)
    if (len(text) == 36 and text[8] == text[13] == text[18] == text[23] == "-"
            and _HEX.issuperset(text.replace("-", "")) and text.count("-") == 4):
        return text
    import uuid

    return str(uuid.UUID(text))
