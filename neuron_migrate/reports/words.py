"""Counted nouns in the text the commands print."""

from __future__ import annotations


def plural(count: int, word: str) -> str:
    """`1 call`, `2 calls`."""
    return f"{count} {word}{'s' * (count != 1)}"
