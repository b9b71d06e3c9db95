"""How stored settings and times read, the same in the CLI's tables and the TUI's."""

from __future__ import annotations

from typing import Any, Mapping

from engine.core.units import format_mhz
from engine.core.errors import ConfigError
from engine.results.records import dvfs_setting


def format_setting(setting: Mapping[str, Any] | None) -> str:
    """`GPU 816 EMC 3199 MHz m0`; `governor` when nothing is pinned; `-` when not known."""
    if setting is None:
        return "-"
    parts = [f"{d.upper()} {format_mhz(setting[d + '_hz'])}" for d in ("gpu", "cpu", "emc") if setting.get(d + "_hz")]
    text = " ".join(parts) + (" MHz" if parts else "governor")
    if setting.get("nvpmodel") is not None:
        text += f" m{setting['nvpmodel']}"
    return text


def setting_label(setting: Mapping[str, Any] | None) -> str:
    """A stored setting as DvfsSetting.label() says it; `unknown` when not recorded."""
    if not setting:
        return "unknown"
    try:
        return dvfs_setting(setting).label()
    except ConfigError:
        return str(dict(setting))


def format_when(stamp: str | None) -> str:
    """`2025-01-01 12:34` from an ISO timestamp; `-` when there is none."""
    return "-" if not stamp else stamp.replace("T", " ")[:16]
