"""Unit formatting that every layer prints with; imports nothing, so even the errors can use it."""

from __future__ import annotations


def format_mhz(hz: float) -> str:
    """Hz as MHz in the shortest exact form: 1300500000 -> "1300.5", 816000000 -> "816"."""
    return f"{hz / 1e6:g}"


def format_bytes(n: float) -> str:
    """A size with its unit, to three figures: `17 MiB`, `1.5 GiB`, `512 KiB` (binary units, as the
    board's memory is counted); never a bare `0.0` for something small."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(size) < 1024 or unit == "GiB":
            break
        size /= 1024
    if unit == "B":
        return f"{size:.0f} B"
    return f"{size:.3g} {unit}" if abs(size) < 100 else f"{size:,.0f} {unit}"
