"""What a user hands the engine, taken in strictly: numbers, JSON, names and files.

Python's own readers are generous in ways that hide mistakes or hang: int() and float() read
`2_5` as 25 and any Unicode digit as a digit, int() refuses a 5000-digit number with its own
text, json.loads recurses until RecursionError, and reading /dev/zero or a FIFO never ends.
Every place a user's text becomes a number, JSON or a name, and every file a user names that
the engine reads whole, comes through here, so each refusal is a ConfigError that says what
was wrong (the text quoted short, on one line) and what to do.
"""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import BinaryIO, NoReturn

from engine.core.errors import ConfigError, SlmDvfsError
from engine.core.text import shown

# The longest number a person or a spreadsheet writes: a double prints in at most 24 characters
# (repr), 64 leaves room for padded decimals. Longer text is refused before int() or float() sees
# it, so Python's int-str limit (4300 digits) is never what answers.
MAX_NUMBER_CHARS = 64
_FLOAT = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?", re.ASCII)
_INT = re.compile(r"[+-]?[0-9]+", re.ASCII)
# A JSON integer above 2**1024 is no figure of ours (and float() of it overflows).
_MAX_JSON_INT_DIGITS = 309
# Our JSON (import files, configs, checkpoint metadata, sidecars) nests a few levels; 64 is far
# beyond any of them and far below where the json module's recursion fails.
MAX_JSON_DEPTH = 64
# A model is named by a zoo name, a hub id (at most 96 + 1 + 96 characters) or a path: Linux
# refuses a path over PATH_MAX (4096) or a component over NAME_MAX (255 bytes); 1024 is more than
# any real path to a checkpoint and keeps an error's quote short.
MAX_NAME_CHARS = 1024
NAME_MAX_BYTES = 255


class InputError(ConfigError):
    """A user's number, JSON, name or file is not one the engine takes."""


def _what(what: str, text: object) -> str:
    return f"{what} {shown(text)!r}"


def parse_float(text: object, what: str) -> float:
    """A finite number written plainly: digits, an optional sign, point and exponent (ASCII only).
    Not read: `2_5` (underscores), `1,5`, Unicode digits, `inf`, `nan`, hex, text over 64 characters."""
    raw = str(text).strip()
    if len(raw) > MAX_NUMBER_CHARS:
        raise InputError(f"{_what(what, raw)} is too long for a number",
                         f"write a plain number of at most {MAX_NUMBER_CHARS} characters")
    if not _FLOAT.fullmatch(raw):
        raise InputError(f"{_what(what, raw)} is not a number", _number_remedy(raw))
    value = float(raw)
    if value != value or value in (float("inf"), float("-inf")):
        raise InputError(f"{_what(what, raw)} is beyond what a number can hold", "write a finite number")
    return value


def parse_int(text: object, what: str) -> int:
    """A whole number written plainly: ASCII digits with an optional sign (no `2_5`, no `2.0`)."""
    raw = str(text).strip()
    if len(raw) > MAX_NUMBER_CHARS:
        raise InputError(f"{_what(what, raw)} is too long for a number",
                         f"write a whole number of at most {MAX_NUMBER_CHARS} digits")
    if not _INT.fullmatch(raw):
        raise InputError(f"{_what(what, raw)} is not a whole number", _number_remedy(raw, whole=True))
    return int(raw, 10)


def _number_remedy(raw: str, *, whole: bool = False) -> str:
    kind = "a whole number" if whole else "a plain number"
    if "_" in raw or "," in raw:
        return f"write {kind} without separators (`2_5` and `2,5` are not read; write 25 or 2.5)"
    if any(c.isdigit() and not c.isascii() for c in raw):
        return f"write {kind} in ASCII digits 0-9"
    return f"write {kind}, without units" + ("" if whole else " (e.g. 12.5 or 1.2e3)")


def number_value(value: object, what: str) -> float:
    """A finite number from a JSON value or a cell: a JSON number, or text parse_float reads."""
    if isinstance(value, bool):
        raise InputError(f"{what} is {value!r}, not a number", "write a plain number")
    if isinstance(value, int):
        if value.bit_length() > 1023:
            raise InputError(f"{what} is a whole number of over 300 digits: beyond what a number can hold",
                             "write a finite number")
        return float(value)
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise InputError(f"{what} {value!r} is not a finite number", "write a finite number")
        return value
    return parse_float(value, what)


# --------------------------------------------------------------------------- JSON
def _json_int(text: str) -> int:
    if len(text.lstrip("-")) > _MAX_JSON_INT_DIGITS:
        raise InputError(f"a JSON number of {len(text)} digits", "write numbers of at most a few dozen digits")
    return int(text)


def _json_constant(name: str) -> NoReturn:
    raise InputError(f"{name}, which is no JSON number", "write a finite number (JSON has no NaN or Infinity)")


def load_json(text: str | bytes, what: str, remedy: str, *,
              error: type[SlmDvfsError] = ConfigError, finite: bool = True) -> object:
    """JSON from a user's file or argument; anything wrong (syntax, a number too long, NaN with
    `finite`, nesting deeper than MAX_JSON_DEPTH) is `error(what is wrong, remedy)`, never another
    exception. `finite=False` takes NaN and Infinity, as Python's json writes them (our own files)."""
    try:
        data = json.loads(text, parse_int=_json_int, parse_constant=_json_constant if finite else None)
    except InputError as exc:
        raise error(f"{what} holds {exc.what}", f"{exc.remedy}; {remedy}") from None
    except RecursionError:
        raise error(f"{what} nests deeper than {MAX_JSON_DEPTH} levels", remedy) from None
    except json.JSONDecodeError as exc:
        raise error(f"{what} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})", remedy) from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise error(f"{what} is not valid JSON ({shown(exc)})", remedy) from None
    if _depth(data) > MAX_JSON_DEPTH:
        raise error(f"{what} nests deeper than {MAX_JSON_DEPTH} levels", remedy)
    return data


def _depth(data: object) -> int:
    """How deep lists and objects nest (iterative: the check itself must not recurse)."""
    deepest, stack = 0, [(data, 1)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, (list, dict)):
            deepest = max(deepest, level)
            if level <= MAX_JSON_DEPTH:
                stack.extend((child, level + 1) for child in (node.values() if isinstance(node, dict) else node))
    return deepest


# --------------------------------------------------------------------------- names
def check_name(text: object, what: str, *, limit: int = MAX_NAME_CHARS) -> str:
    """A name or path a user typed (a model, a label): stripped, one printable line, at most
    `limit` characters and no path component over NAME_MAX; refused otherwise, quoted short."""
    raw = str(text).strip()
    if len(raw) > limit:
        raise InputError(f"{what} {shown(raw)!r} is too long", f"give a {what} of at most {limit} characters")
    if not raw.isprintable():
        raise InputError(f"{what} {shown(raw)!r} holds a line break or control character",
                         f"give the {what} on one line, in printable characters")
    if any(len(part.encode("utf-8", "surrogateescape")) > NAME_MAX_BYTES for part in raw.split("/")):
        raise InputError(f"{what} {shown(raw)!r} has a part longer than a file name can be ({NAME_MAX_BYTES} bytes)",
                         f"give a zoo name, a hub id or a path whose parts are at most {NAME_MAX_BYTES} bytes")
    return raw


# --------------------------------------------------------------------------- files
def open_user_file(path: str | os.PathLike[str], what: str, *, max_bytes: int, remedy: str) -> BinaryIO:
    """A regular file a user named, opened for reading: a device, FIFO, socket or folder is refused
    before it is opened (reading /dev/zero never ends; opening a FIFO waits for a writer), and so
    is a file over `max_bytes`. `remedy` says what the file should be."""
    p = Path(path)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        raise InputError(f"{what} {shown(p)} does not exist", f"check the path of the {what}") from None
    except OSError as exc:
        raise InputError(f"cannot read {shown(p)}: {exc.strerror or exc}", f"check the path of the {what}") from None
    _check_regular(p, st, what, max_bytes, remedy)
    try:
        # O_NONBLOCK: a FIFO swapped in after the stat must not hang the open either.
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0))
    except OSError as exc:
        raise InputError(f"cannot read {shown(p)}: {exc.strerror or exc}", "check the file's permissions") from None
    try:
        _check_regular(p, os.fstat(fd), what, max_bytes, remedy)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


def read_user_file(path: str | os.PathLike[str], what: str, *, max_bytes: int, remedy: str) -> bytes:
    """The bytes of a regular file a user named, at most `max_bytes` (see open_user_file)."""
    with open_user_file(path, what, max_bytes=max_bytes, remedy=remedy) as fh:
        try:
            data = fh.read(max_bytes + 1)
        except OSError as exc:
            raise InputError(f"cannot read {shown(path)}: {exc.strerror or exc}", "check the file") from None
    if len(data) > max_bytes:  # it grew while we read
        raise _too_big(Path(path), what, max_bytes)
    return data


def _check_regular(p: Path, st: os.stat_result, what: str, max_bytes: int, remedy: str) -> None:
    if stat.S_ISDIR(st.st_mode):
        raise InputError(f"{shown(p)} is a folder", f"pass the {what} itself; {remedy}")
    if not stat.S_ISREG(st.st_mode):
        kind = ("a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)
                else "a FIFO (named pipe)" if stat.S_ISFIFO(st.st_mode)
                else "a socket" if stat.S_ISSOCK(st.st_mode) else "not a regular file")
        raise InputError(f"{shown(p)} is {kind}, not a file", f"give a regular file: {remedy}")
    if st.st_size > max_bytes:
        raise _too_big(p, what, max_bytes)


def _too_big(p: Path, what: str, max_bytes: int) -> InputError:
    return InputError(f"{shown(p)} is larger than a {what} can be ({max_bytes / 2**20:g} MiB at most)",
                      f"check that it is the {what}; split it into smaller files")
