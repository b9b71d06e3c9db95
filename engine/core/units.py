"""Unit formatting that every layer prints with; imports nothing, so even the errors can use it."""

from __future__ import annotations


def format_mhz(hz: float) -> str:
    """Hz as MHz in the shortest exact form: 1300500000 -> "1300.5", 816000000 -> "816"."""
    return f"{hz / 1e6:g}"
