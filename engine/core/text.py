"""Text that is safe to print on a terminal: every layer that prints stored or foreign text uses it."""

from __future__ import annotations

import re


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


SHOWN_CHARS = 60  # how much of a user's text an error quotes back: enough to recognise it, never a screenful


def shown(text: object, limit: int = SHOWN_CHARS) -> str:
    """A user's text as an error quotes it: printable, on one line, at most `limit` characters
    (a 5000-character name or number is cut, saying how long it was)."""
    out = " ".join(clean_text(text).split())  # newlines and tabs too: one line
    if len(out) <= limit:
        return out
    return f"{out[:limit - 1]}… ({len(out)} characters)"


def clean_text(text: object) -> str:
    """`text` safe to print on a terminal: escape sequences and control characters (but
    newline and tab) removed, so stored labels, notes and names cannot move the cursor,
    retitle the window or hide what follows. Every text printer passes its output here;
    text without controls comes back unchanged."""
    out = str(text)
    if out.isprintable() or not _CONTROLS.search(out.replace("\n", "").replace("\t", "")):
        return out
    return _CONTROLS.sub("", _ESCAPES.sub("", out))
