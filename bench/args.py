"""Argument types the benches share (argparse `type=`)."""

from __future__ import annotations

import argparse


def positive_int(text: str) -> int:
    """A count of at least one: a median of no rounds, or of no requests, is nothing."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value
