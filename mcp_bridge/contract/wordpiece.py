"""BERT's uncased WordPiece tokenizer, in Python: the embedder's one tokenizer.

It turns text into the ids all-MiniLM-L6-v2 was trained on, id for id as the Hugging Face
`tokenizers` package's `BertWordPieceTokenizer(vocab, lowercase=True)` with truncation at
MAX_TOKENS does (its BertNormalizer, BertPreTokenizer, WordPiece and BertProcessing). It
replaced that package because a bridge serving the host's embedder peaked 14 MiB higher
with it (its library and tables against one dict here), and issue 29 bounds a hybrid
bridge's peak memory; docs/search.md has the figures. tests/mcp_bridge/test_wordpiece.py
holds the two equal on every code point alone, on the public sets' texts and on random
text.

The character classes are the ones `tokenizers` applies (wordpiece_tables.py, read off it
by tests/mcp_bridge/wordpiece_reference.py), not the running Python's `unicodedata`
alone: the two were built from different Unicode versions. Python does the canonical
decomposition and lower-casing; FOLDED corrects the characters where its Unicode differs.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from . import wordpiece_tables

SPECIAL = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")  # matched in the raw text, as is
MAX_WORD_CHARS = 100  # a longer word is one [UNK] (WordPiece's max_input_chars_per_word)
PREFIX = "##"  # a piece that continues a word
_SPECIAL_SPLIT = re.compile("(" + "|".join(re.escape(s) for s in SPECIAL) + ")")


def char_class(ranges: Sequence[int]) -> str:
    """A regex character class body for half-open ranges [start, stop, start, stop, …]."""
    parts = []
    for start, stop in zip(ranges[::2], ranges[1::2], strict=True):
        parts.append(re.escape(chr(start)) if stop - start == 1
                     else f"{re.escape(chr(start))}-{re.escape(chr(stop - 1))}")
    return "".join(parts)


class Normalizer:
    """BERT's cleaning, CJK spacing, accent stripping and lower-casing, then its split
    into words: `words(text)`. Built from a tables namespace (wordpiece_tables's names)."""

    def __init__(self, tables: Any = wordpiece_tables) -> None:
        self.folded: Mapping[int, str] = tables.FOLDED
        self.drop = re.compile(f"[{char_class(tables.DROPPED)}]")
        self.space = re.compile(f"[{char_class(tables.WHITESPACE)}]")
        self.cjk = re.compile(f"[{char_class(tables.CJK)}]")
        self.nonspacing = re.compile(f"[{char_class(tables.NONSPACING)}]")
        punctuation = char_class(tables.PUNCTUATION)
        self.split = re.compile(f"[{punctuation}]|[^{punctuation} ]+")
        ascii_table: dict[int, str | None] = {}
        for code in range(0x80):
            ch = chr(code)
            if self.drop.match(ch):
                ascii_table[code] = None
            elif self.space.match(ch):
                ascii_table[code] = " "
        self.ascii = ascii_table

    def fold(self, text: str) -> str:
        """The normalized text (what BERT's normalizer makes of it)."""
        if text.isascii():
            return text.translate(self.ascii).lower()
        text = self.space.sub(" ", self.drop.sub("", text))
        text = self.cjk.sub(r" \g<0> ", text).translate(self.folded)
        text = self.nonspacing.sub("", unicodedata.normalize("NFD", text))
        # per character, as Rust's char::to_lowercase: without Greek's final-sigma rule
        return "".join(c.lower() for c in text) if "Σ" in text else text.lower()

    def words(self, text: str) -> list[str]:
        """Split on whitespace; each punctuation character is a word of its own."""
        return self.split.findall(self.fold(text))


class WordPiece:
    """`encode(text)`: [CLS], the text's pieces (at most max_tokens − 2), [SEP]."""

    def __init__(self, vocab_path: Path, max_tokens: int,
                 normalizer: Normalizer | None = None) -> None:
        with open(vocab_path, encoding="utf-8") as f:
            self.vocab: dict[str, int] = {line.rstrip("\n"): i for i, line in enumerate(f)}
        self.max_tokens = max_tokens
        self.normalizer = normalizer or Normalizer()
        self.unk, self.cls, self.sep = (self.vocab[t] for t in ("[UNK]", "[CLS]", "[SEP]"))

    def encode(self, text: str) -> list[int]:
        ids = [self.cls]
        room = self.max_tokens - 1
        for part in _SPECIAL_SPLIT.split(text):
            if part in SPECIAL:
                ids.append(self.vocab[part])
            elif part:
                for word in self.normalizer.words(part):
                    ids.extend(self.pieces(word))
            if len(ids) >= room:
                break
        del ids[room:]
        ids.append(self.sep)
        return ids

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return [self.encode(t) for t in texts]

    def pieces(self, word: str) -> list[int]:
        """Greedy longest match first; a word with any part not in the vocabulary is [UNK]."""
        if len(word) > MAX_WORD_CHARS:
            return [self.unk]
        whole = self.vocab.get(word)
        if whole is not None:
            return [whole]
        out: list[int] = []
        start = 0
        while start < len(word):
            end = len(word)
            while end > start:
                found = self.vocab.get(word[start:end] if start == 0
                                       else PREFIX + word[start:end])
                if found is not None:
                    out.append(found)
                    break
                end -= 1
            else:
                return [self.unk]
            start = end
        return out

