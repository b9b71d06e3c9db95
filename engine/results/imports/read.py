"""An imported sweep file's rows: CSV (a header row; `#` comment lines; comma, semicolon or tab
separated) or JSON (a list of row objects, or {"workload": {...}, "rows": [...]}), each row a mapping
of normalised column names (lower case, `_` for spaces and dashes) to its cells (None for empty).
A file that is none of these is refused, naming what is wrong with it."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any, Mapping

from engine.core.errors import ConfigError
from engine.core.userinput import load_json, read_user_file

# A sweep of every GPU x EMC setting of the AGX Orin (44) repeated ten times is about 50 KB of CSV;
# 16 MiB is hundreds of such sweeps, and keeps a wrong file (a disk image, /dev/zero) from being read whole.
MAX_SWEEP_FILE_BYTES = 16 << 20


def read_bytes(path: Path) -> bytes:
    """The file's bytes: a regular file of at most MAX_SWEEP_FILE_BYTES (a device, FIFO or folder is
    refused before it is opened)."""
    return read_user_file(path, "measurements file", max_bytes=MAX_SWEEP_FILE_BYTES,
                          remedy="give a CSV or JSON file of measured points (docs/experiments.md)")


def _corrupt(path: Path, why: str) -> ConfigError:
    return ConfigError(f"{path} cannot be read as a sweep: {why}",
                       "give a CSV file with a header row, or JSON (a list of row objects, or "
                       '{"workload": {...}, "rows": [...]}); see docs/experiments.md; nothing was stored')


def table_rows(path: Path, raw: bytes) -> tuple[str, list[tuple[str, dict[str, Any]]], dict[str, Any]]:
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise _corrupt(path, f"it is not UTF-8 text (byte {exc.start})") from None
    if "\x00" in text:
        raise _corrupt(path, "it holds NUL bytes (a binary file?)")
    stripped = text.lstrip()
    if not stripped:
        raise _corrupt(path, "it is empty")
    suffix = path.suffix.lower()
    if suffix == ".json" or (suffix != ".csv" and stripped[0] in "[{"):
        return ("json",) + _json_rows(path, text)
    return "csv", _csv_rows(path, text), {}


def _json_rows(path: Path, text: str) -> tuple[list[tuple[str, dict[str, Any]]], dict[str, Any]]:
    data = load_json(text, f"{path} cannot be read as a sweep: its JSON", _corrupt(path, "").remedy)
    file_values: dict[str, Any] = {}
    if isinstance(data, dict):
        if not isinstance(data.get("rows"), list):
            raise _corrupt(path, 'a JSON object needs a "rows" list')
        workload = data.get("workload", {})
        if not isinstance(workload, dict):
            raise _corrupt(path, '"workload" must be an object of workload fields')
        file_values = _normalise(workload)
        data = data["rows"]
    if not isinstance(data, list):
        raise _corrupt(path, "the JSON holds neither a list of rows nor an object with rows")
    rows = []
    for i, row in enumerate(data, start=1):
        if not isinstance(row, dict):
            raise _corrupt(path, f"row {i} is {type(row).__name__}, not an object of columns")
        rows.append((f"row {i}", _normalise(row)))
    if not rows:
        raise _corrupt(path, "it has no rows")
    return rows, file_values


def _csv_rows(path: Path, text: str) -> list[tuple[str, dict[str, Any]]]:
    # Comment lines (#...) become blank, so line numbers stay the file's.
    lines = ["" if line.lstrip().startswith("#") else line for line in text.splitlines()]
    header = next((line for line in lines if line.strip()), "")
    delimiter = ";" if header.count(";") > header.count(",") else ("\t" if "\t" in header and "," not in header
                                                                   else ",")
    reader = csv.reader(io.StringIO("\n".join(lines)), delimiter=delimiter)
    rows: list[tuple[str, dict[str, Any]]] = []
    names: list[str] | None = None
    try:
        for cells in reader:
            if not any(c.strip() for c in cells):
                continue
            if names is None:
                names = [_key(c) for c in cells]
                dup = sorted({n for n in names if names.count(n) > 1 and n})
                if dup:
                    raise _corrupt(path, f"the header names {', '.join(dup)} twice")
                continue
            where = f"line {reader.line_num}"
            if len(cells) > len(names):
                raise _corrupt(path, f"{where} has {len(cells)} cells but the header names {len(names)} columns")
            rows.append((where, {n: _value(c) for n, c in zip(names, cells) if n}))
    except csv.Error as exc:
        raise _corrupt(path, f"line {reader.line_num}: {exc}") from None
    if names is None or not rows:
        raise _corrupt(path, "it has no header and rows" if names is None else "it has a header but no rows")
    return rows


def _key(name: Any) -> str:
    return str(name).strip().lower().replace(" ", "_").replace("-", "_")


def _value(cell: Any) -> Any:
    if isinstance(cell, str):
        cell = cell.strip()
        return cell or None
    return cell


def _normalise(row: Mapping[str, Any]) -> dict[str, Any]:
    return {_key(k): _value(v) for k, v in row.items()}
