"""wordpiece.py against the tokenizer it replaced (Hugging Face `tokenizers`, a development
requirement): the same ids for every code point alone, for the project's and the public
sets' texts and for random text; its tables what the reference says; hostile text."""

from __future__ import annotations

import csv
import random
import subprocess
import sys
import unicodedata
from pathlib import Path
from typing import Any

import pytest

from mcp_bridge.contract import embed, wordpiece, wordpiece_tables
from tests.helpers import bench_module

sys.path.insert(0, str(Path(__file__).parent))
import wordpiece_reference as ref  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
retrieval_dev = bench_module("retrieval_dev")  # the public sets, as the benches read them
PUBLIC = retrieval_dev.data_dir()


@pytest.fixture(scope="module")
def hf() -> Any:
    return ref.reference()


@pytest.fixture(scope="module")
def ours() -> wordpiece.WordPiece:
    return wordpiece.WordPiece(embed.VOCAB_PATH, embed.MAX_TOKENS)


def _differing(hf: Any, ours: wordpiece.WordPiece, texts: list[str]) -> list[str]:
    """The texts the two tokenize differently."""
    theirs = [e.ids for e in hf.encode_batch(texts)]
    return [t for t, ids in zip(texts, theirs, strict=True) if ours.encode(t) != ids]


def test_its_tables_are_what_the_reference_does_with_each_code_point() -> None:
    """wordpiece_tables.py is generated; regenerating it from the installed reference
    (and this Python's unicodedata) gives the same module. By its construction the
    Normalizer then folds every code point alone as the reference does but UNMATCHED's:
    spacing vowel signs Python decomposes and the reference does not (each is [UNK] as a
    whole word either way: the next test)."""
    found = ref.tables()
    assert all(unicodedata.category(chr(c)) == "Mc" for c in found.UNMATCHED)
    for name in ("DROPPED", "WHITESPACE", "CJK", "NONSPACING", "PUNCTUATION", "FOLDED",
                 "UNMATCHED"):
        assert getattr(found, name) == getattr(wordpiece_tables, name), name
    assert (ROOT / "mcp_bridge/contract/wordpiece_tables.py").read_text() == \
        ref.module_text(found)


def test_every_code_point_alone_gives_the_references_ids(hf: Any,
                                                         ours: wordpiece.WordPiece) -> None:
    texts = [chr(c) for c in ref.code_points()]
    differ = _differing(hf, ours, texts)
    assert differ == [], [hex(ord(t)) for t in differ[:20]]


def _project_texts() -> list[str]:
    texts = []
    for name in ("claims.tsv", "queries.tsv"):
        with open(ROOT / "bench" / "data" / name, newline="") as f:
            texts += [v for row in csv.DictReader(f, delimiter="\t") for v in row.values() if v]
    return texts


def test_the_projects_claims_and_queries_give_the_references_ids(
        hf: Any, ours: wordpiece.WordPiece) -> None:
    texts = _project_texts()
    assert len(texts) > 500 and _differing(hf, ours, texts) == []


@pytest.mark.skipif(retrieval_dev.available(PUBLIC) != list(retrieval_dev.SETS),
                    reason="../shared/retrieval-dev is not beside the repository")
def test_the_public_sets_texts_give_the_references_ids(hf: Any,
                                                        ours: wordpiece.WordPiece) -> None:
    """SciFact's abstracts and claims, LoCoMo's turns and questions (read at run time,
    never copied, as bench/retrieval_dev.py reads them): 9,500-odd texts in English with
    scientific notation, names, numbers."""
    texts = []
    for name in retrieval_dev.SETS:
        data = retrieval_dev.load(PUBLIC, name)
        texts += [d["text"] for d in data.docs] + [q["query"] for q in data.queries]
    assert len(texts) > 9_000
    assert _differing(hf, ours, texts) == []


def test_random_text_gives_the_references_ids(hf: Any, ours: wordpiece.WordPiece) -> None:
    """Mixed scripts, accents as separate marks, Greek capital sigmas (lower-cased per
    character: no final-sigma rule), control and format characters, the special tokens
    in the text, words at and over 100 characters, CJK and emoji."""
    rng = random.Random(29)
    pool = ([chr(c) for c in range(0x20, 0x250)]
            + list("\t\n\r\x00\x0b\x1c\x7f\ufffd\u200b\u200d\u00a0\u00ad\u3000\u0301\u0308")
            + ["[SEP]", "[MASK]", "[mask]", "[UNK]", "[CLS]", "[PAD]", "[SEP", "x" * 101,
               "y" * 100, "ab" * 51, "ΣΑΣ", "ΑΣ Σ", "İ", "ß", "ﬁ", "Å", "e\u0301", "日本語",
               "😀", "👩‍💻", "𝔘𝔫𝔦"]
            + [chr(c) for c in rng.sample(range(0x250, 0x32000), 4000)
               if c not in ref.SURROGATES])  # the reference cannot take a lone surrogate
    texts = ["".join(rng.choice(pool) + (" " if rng.random() < 0.3 else "")
                     for _ in range(rng.randrange(1, 80))) for _ in range(6000)]
    assert _differing(hf, ours, texts) == []


def test_a_long_text_is_cut_to_max_tokens_with_its_separator(hf: Any,
                                                            ours: wordpiece.WordPiece) -> None:
    text = "The build fails unless RUSTFLAGS is set; rerun with --no-verify. " * 200
    ids = ours.encode(text)
    assert len(ids) == embed.MAX_TOKENS and ids[0] == ours.cls and ids[-1] == ours.sep
    assert ids == hf.encode(text).ids
    special = "[SEP] " * 300  # special tokens count toward the cut as well
    assert ours.encode(special) == hf.encode(special).ids


def test_hostile_text_is_tokenized_and_loses_nothing_else() -> None:
    """NUL bytes and format characters are dropped, as BERT's cleaning drops them; a lone
    surrogate (which the Rust reference cannot even take) is dropped as well, so a query
    carrying one still embeds; a megabyte of text costs one pass and 256 ids."""
    ours = wordpiece.WordPiece(embed.VOCAB_PATH, embed.MAX_TOKENS)
    clean = ours.encode("stripe webhook")
    assert ours.encode("stripe\x00 web\u200bhook\ud800") == clean
    assert ours.encode("\ud83d\ude00 stripe webhook") == clean  # a pair of them, as two
    assert ours.encode("") == [ours.cls, ours.sep]
    assert ours.encode("\x00\ud800\u200b") == [ours.cls, ours.sep]
    huge = ("a" * 999 + " ") * 1000
    assert ours.encode(huge) == [ours.cls] + [ours.unk] * (embed.MAX_TOKENS - 2) + [ours.sep]
    assert embed.tokenize("stripe\ud800 webhook") == clean
    vector = embed.embed(["stripe webhook\ud800"])[0]
    assert abs(float(vector @ embed.embed(["stripe webhook"])[0]) - 1.0) < 1e-6


def test_loading_the_embedder_does_not_import_the_reference() -> None:
    """The point of wordpiece.py: a process that embeds holds no `tokenizers`."""
    code = ("import sys; from mcp_bridge.contract import embed; embed.embed_query('x'); "
            "print('tokenizers' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, timeout=120, check=True)
    assert done.stdout.strip() == "False"
