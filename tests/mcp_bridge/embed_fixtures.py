"""Texts and derivations the embedder's graph-rewrite tests compare (embed_fuse, embed_nbits).

TEXTS mixes a one-word text, identifiers, prose and one long text, so a padded batch holds
texts of very different lengths; `derived_pair` derives two variants of the shipped weights
into a throwaway folder."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from mcp_bridge.contract import embed

TEXTS = ["The build fails unless RUSTFLAGS is set.", "who holds the lease on api/",
         "fleet.leases.contention_among compares every pair of live leases",
         "We ordered pizza for the team lunch.",
         "When a drain finds a line it cannot parse it moves the line to the dead-letter file "
         "with the reason, and the next line is applied as if nothing had happened; the "
         "moderator sees the count on the health page and can replay the file once fixed.",
         "lease"]


@contextmanager
def derived_pair(prefix: str, before: dict[str, bool], after: dict[str, bool]
                 ) -> Iterator[tuple[Path, Path]]:
    """The source weights derived with `before`'s options and with `after`'s."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        pair = folder / "before.onnx", folder / "after.onnx"
        for target, options in zip(pair, (before, after), strict=True):
            embed.derive(embed.source_path(), target, **options)
        yield pair
    finally:
        shutil.rmtree(folder)
