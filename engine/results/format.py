"""How stored settings and times read, the same in the CLI's tables and the TUI's."""

from __future__ import annotations

import re
from typing import Any, Mapping

from engine.core.units import format_mhz
from engine.core.errors import ConfigError
from engine.results.records import dvfs_setting


# ESC-introduced sequences (CSI `ESC [ ... final`, OSC/DCS/APC/PM strings up to BEL or ST,
# two-byte escapes), then any other C0 or C1 control but newline and tab, and DEL.
_ESCAPES = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"
    r"|[\x1b\x9d\x90\x9f\x9e][\]P_^].*?(?:\x07|\x1b\\|\x9c|$)"
    r"|\x1b[ -/]*[0-~]?"
    r"|\x9b[0-?]*[ -/]*[@-~]",
    re.DOTALL,
)
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def clean_text(text: object) -> str:
    """`text` safe to print on a terminal: escape sequences and control characters (but
    newline and tab) removed, so stored labels, notes and names cannot move the cursor,
    retitle the window or hide what follows. Every text printer passes its output here;
    text without controls comes back unchanged."""
    out = str(text)
    if out.isprintable() or not _CONTROLS.search(out.replace("\n", "").replace("\t", "")):
        return out
    return _CONTROLS.sub("", _ESCAPES.sub("", out))


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
