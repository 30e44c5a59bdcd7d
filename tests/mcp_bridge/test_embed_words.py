"""embed_words: the derived embedder's word table in a file of its own, read row by row.

The vectors must be the in-graph lookup's bit for bit, and a process that has embedded
many queries must hold none of the table mapped (the reason it moved: docs/search.md)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from mcp_bridge.contract import embed, embed_words
from tests.mcp_bridge.embed_fixtures import TEXTS, beside_shipped

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def derived() -> Iterator[tuple[Path, Path]]:
    """The shipped derivation with the word table inside the graph, and as shipped."""
    with beside_shipped("ctxlake-words-",
                        {**embed.VARIANT_OPTIONS, "words_apart": False}) as pair:
        yield pair


def test_the_vectors_are_the_in_graph_lookups_bit_for_bit(derived: tuple[Path, Path]) -> None:
    inside, apart = (embed.OnnxEncoder(p) for p in derived)
    assert inside.words is None and apart.words is not None
    texts = [*TEXTS, "", "héllo wörld ☃ \U0001f600", "x" * 3000, "[CLS] [SEP] [PAD]"]
    assert np.array_equal(inside.encode(texts), apart.encode(texts))  # one padded batch
    for text in texts:
        assert np.array_equal(inside.encode([text]), apart.encode([text]))


_RSS_FILE_GROWTH = """
import random, sys
from pathlib import Path
from mcp_bridge.contract import embed
encoder = embed.OnnxEncoder(Path(sys.argv[1]))
words = embed.VOCAB_PATH.read_text().split()[2000:]
rng = random.Random(7)
def rss_file_kib():
    return next(int(line.split()[1]) for line in open("/proc/self/status")
                if line.startswith("RssFile:"))
encoder.encode(["warm up the session once"])
before = rss_file_kib()
for _ in range(300):
    encoder.encode([" ".join(rng.sample(words, 2))])
mapped = any(line.rstrip().endswith(".words") for line in open("/proc/self/maps"))
print(rss_file_kib() - before, int(mapped))
"""


def _file_pages_gained_over_300_queries(path: Path) -> tuple[int, bool]:
    done = subprocess.run([sys.executable, "-c", _RSS_FILE_GROWTH, str(path)],
                          capture_output=True, text=True, timeout=300, check=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    kib, mapped = done.stdout.split()[-2:]
    return int(kib), mapped == "1"


def test_a_process_holds_none_of_the_table_after_many_queries(
        derived: tuple[Path, Path]) -> None:
    """300 two-word queries: with the table in the graph, the pages faulted in around
    each token's row stay in the process (~10 MiB measured); with it apart, the file is
    never mapped and the process's file pages barely grow."""
    inside_kib, _ = _file_pages_gained_over_300_queries(derived[0])
    apart_kib, mapped = _file_pages_gained_over_300_queries(derived[1])
    assert not mapped
    assert apart_kib < 2 << 10, apart_kib
    assert inside_kib - apart_kib > 3 << 10, (inside_kib, apart_kib)


def test_a_table_file_of_the_wrong_size_is_refused_by_name(tmp_path: Path) -> None:
    bad = tmp_path / "model.onnx.words"
    bad.write_bytes(b"\0" * (388 * 3 + 1))
    with pytest.raises(RuntimeError, match="not a table of 384-value rows"):
        embed_words.WordTable(bad, 384)
    bad.write_bytes(b"")
    with pytest.raises(RuntimeError, match="derive the model again"):
        embed_words.WordTable(bad, 384)


def test_ids_outside_the_table_are_refused_not_read(tmp_path: Path) -> None:
    path = tmp_path / "t.words"
    scales = np.array([0.5, 2.0], dtype=np.float32)
    rows = np.array([[1, -2, 3], [-127, 0, 127]], dtype=np.int8)
    path.write_bytes(scales.tobytes() + rows.tobytes())
    table = embed_words.WordTable(path, 3)
    assert table.rows_count == 2
    got = table.rows(np.array([[1, 0, 1]]))
    assert got.shape == (1, 3, 3) and got.dtype == np.float32
    assert np.array_equal(got[0], [[-254, 0, 254], [0.5, -1, 1.5], [-254, 0, 254]])
    for ids in ([[2]], [[-1]], [[0, 1 << 40]]):
        with pytest.raises(IndexError, match="outside the table's 2 rows"):
            table.rows(np.array(ids))
    table.close()


def test_a_file_cut_short_while_in_use_is_an_error_not_a_wrong_vector(tmp_path: Path) -> None:
    path = tmp_path / "t.words"
    path.write_bytes(np.ones(2, np.float32).tobytes() + np.ones((2, 3), np.int8).tobytes())
    table = embed_words.WordTable(path, 3)
    os.truncate(path, 9)
    with pytest.raises(RuntimeError, match="cut short"):
        table.rows(np.array([[1]]))
    table.close()


def test_a_graph_whose_lookup_is_not_the_expected_one_is_not_derived(tmp_path: Path) -> None:
    """words_apart needs the int8 lookup that int8_tables writes; without it the
    derivation fails whole and leaves no file behind."""
    target = tmp_path / "m.onnx"
    with pytest.raises(ValueError, match="word lookup"):
        embed.derive(embed.source_path(), target,
                     **{**embed.VARIANT_OPTIONS, "int8_tables": False})
    assert list(tmp_path.iterdir()) == []
