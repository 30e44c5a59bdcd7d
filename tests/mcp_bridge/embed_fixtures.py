"""Texts and derivations the embedder's graph-rewrite tests compare (embed_fuse, embed_nbits).

TEXTS mixes a one-word text, identifiers, prose and one long text, so a padded batch holds
texts of very different lengths; `beside_shipped` derives another variant of the shipped
weights into a throwaway folder, to compare with the shipped derivation."""

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
def beside_shipped(prefix: str, options: dict[str, bool]) -> Iterator[tuple[Path, Path]]:
    """(the source weights derived with `options`, the shipped derivation): the shipped
    one is the host's cached file (embed.model_path), not derived again."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        other = folder / "other.onnx"
        embed.derive(embed.source_path(), other, **options)
        yield other, embed.model_path()
    finally:
        shutil.rmtree(folder)
