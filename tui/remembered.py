"""Setup's last values, remembered across restarts of the app (no Textual here).

A small JSON file in the state directory (engine.core.paths: $SLM_DVFS_STATE_DIR, else
$XDG_STATE_HOME/slm-dvfs): what the form held when it was last changed. It is read as untrusted
input: its JSON as any user's (engine.core.userinput.load_json: no nesting that recurses away, no
300-digit numbers), every field checked as the form checks it (tui.forms: a number as the CLI
reads it, within its bounds), a field that does not check falls back to its default, and a file
that cannot be read or parsed is ignored. Either way the caller gets a
note that says what was ignored and why, never an exception; a file that cannot be written is
said in the log and the form goes on.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.core import paths
from engine.core.errors import ConfigError
from engine.core.text import clean_text
from engine.core.userinput import load_json
from tui import forms

log = logging.getLogger(__name__)

FILE_NAME = "tui-setup.json"
VERSION = 1
MAX_BYTES = 64 * 1024  # a few hundred bytes are written: anything much larger is not ours
MAX_FIELD = 4096  # longer than any model path or policy the form takes


def setup_file() -> Path:
    return paths.state_dir() / FILE_NAME


@dataclass(frozen=True)
class Remembered:
    """The values to start the form with, and what was ignored on the way (None: nothing)."""

    values: forms.SetupValues
    note: str | None = None


# The form's fields, their types, and the choices of those the form offers as a list.
FIELDS = {f.name: f.type for f in dataclasses.fields(forms.SetupValues)}


def _choices() -> dict[str, tuple[str, ...]]:
    return {"task": tuple(k for _d, k in forms.task_choices()), "precision": forms.PRECISION_CHOICES,
            "mode": tuple(forms.MODE_CHOICES), "unit": ("steps", "epochs")}


def load_setup(path: Path | None = None) -> Remembered:
    """The remembered values (the defaults where there are none or they do not check)."""
    path = setup_file() if path is None else path
    defaults = forms.SetupValues()
    try:
        raw = _read(path)
    except FileNotFoundError:
        return Remembered(defaults)
    except (OSError, ValueError) as exc:
        return Remembered(defaults, f"Setup's remembered values in {path} were ignored ({exc}); "
                                    "the form starts from its defaults")
    if not isinstance(raw, dict) or raw.get("version") != VERSION or not isinstance(raw.get("values"), dict):
        return Remembered(defaults, f"Setup's remembered values in {path} were ignored (not a file this "
                                    "version wrote); the form starts from its defaults")
    values, bad = _checked(raw["values"], defaults)
    note = None
    if bad:
        note = (f"Setup's remembered {', '.join(bad)} did not check and went back to the default"
                f"{'s' if len(bad) > 1 else ''} (from {path})")
    return Remembered(values, note)


def _read(path: Path) -> Any:
    """The file's JSON; OSError or ValueError (said as the reason) when it is not a small JSON file."""
    # not through a link, and never blocking on a FIFO put in its place
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            raise ValueError("not a regular file")
        data = fh.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        raise ValueError(f"larger than {MAX_BYTES // 1024} KiB")
    try:
        return load_json(data.decode("utf-8"), "it", "")
    except UnicodeDecodeError:
        raise ValueError("not UTF-8 text") from None
    except ConfigError as exc:
        raise ValueError(exc.what) from None


def _checked(stored: dict, defaults: forms.SetupValues) -> tuple[forms.SetupValues, list[str]]:
    """The stored fields that are of the right type and check (as the form checks them); the
    labels of those that fell back to their defaults."""
    choices = _choices()
    kept: dict[str, Any] = {}
    bad: list[str] = []
    for name, value in stored.items():
        if name not in FIELDS:
            continue  # a field this version does not have: nothing to restore it into
        want_bool = isinstance(getattr(defaults, name), bool)
        ok = isinstance(value, bool) if want_bool else (
            isinstance(value, str) and len(value) <= MAX_FIELD and value == clean_text(value)
            and "\n" not in value and "\t" not in value)
        if ok and name in choices and value not in choices[name]:
            ok = False
        if ok:
            kept[name] = value
        else:
            bad.append(forms.label_of(name))
    values = dataclasses.replace(defaults, **kept)
    # the form's own checks: a field that no longer checks (a folder since removed, a policy
    # mid-edit) goes back to its default, and the others are checked again without it
    for _ in range(len(FIELDS)):
        errors = values.errors()
        if not errors:
            break
        name = next(iter(errors))
        bad.append(forms.label_of(name))
        values = dataclasses.replace(values, **{name: getattr(defaults, name)})
    return values, bad


def save_setup(values: forms.SetupValues, path: Path | None = None) -> bool:
    """Remember the form's values (atomically: a crash leaves the old file or the new one);
    False, and a warning in the log, when the file cannot be written."""
    path = setup_file() if path is None else path
    data = json.dumps({"version": VERSION, "values": dataclasses.asdict(values)}, indent=1)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(data + "\n")
        os.replace(tmp, path)
    except OSError as exc:
        log.warning("cannot remember Setup's values in %s (%s); they apply until the app exits", path,
                    exc.strerror or exc)
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass
        return False
    return True
