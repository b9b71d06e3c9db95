"""Imports at scale (issue 24): a tegrastats log read and integrated line by line, in memory that does not
grow with the log; an import-sweep file in work linear in its rows. Both store exactly what main stored
for the same generated files (tests/data/imports_main.json, recorded before imports streamed), keep their
all-or-nothing transaction and their errors with line numbers. Costs are counted, not timed."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import FrameType
from typing import Any, Callable

import pytest

from engine.cli import main
from import_files import (
    SWEEP_CASES,
    SWEEP_HEADER,
    TEGRASTATS_CASES,
    stored_run,
    stored_sweeps,
    write_sweep_csv,
    write_tegrastats_log,
)

MAIN = json.loads((Path(__file__).parent / "data" / "imports_main.json").read_text())
ENGINE = str(Path(__file__).resolve().parent.parent / "engine")


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def _lines_run(paths: tuple[str, ...], call: Callable[[], Any]) -> int:
    """How many lines of the engine files under `paths` (relative to engine/) `call` executes: a count of
    work, the same on any machine."""
    prefixes = tuple(f"{ENGINE}/{p}" for p in paths)
    count = 0

    def local(frame: FrameType, event: str, arg: object) -> Any:
        nonlocal count
        if event == "line":
            count += 1
        return local

    def tracer(frame: FrameType, event: str, arg: object) -> Any:
        return local if frame.f_code.co_filename.startswith(prefixes) else None

    sys.settrace(tracer)
    try:
        call()
    finally:
        sys.settrace(None)
    return count


# --------------------------------------------------------------------------- import-sweep
@pytest.mark.parametrize("case", sorted(SWEEP_CASES))
def test_import_sweep_stores_what_main_stored(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The same generated file stores the same sweeps and points, bit for bit (repeat numbers included)."""
    csv = write_sweep_csv(tmp_path / f"{case}.csv", **SWEEP_CASES[case])
    db = tmp_path / "store.sqlite"
    code, _out, err = _cli(capsys, "import-sweep", str(csv), "--db", str(db))
    assert code == 0, err
    assert stored_sweeps(db) == MAIN["sweeps"][case]


def test_import_sweep_work_is_linear_in_its_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Four times the rows of one setting (unnumbered: the import numbers the repeats) run four times the lines of the
    import's code, not sixteen (finding each row's repeat by counting from 0 was quadratic: 20k rows took
    22 s, 400k did not finish)."""
    counts = []
    for rows in (300, 1200):
        csv = write_sweep_csv(tmp_path / f"{rows}.csv", rows)
        args = ["import-sweep", str(csv), "--db", str(tmp_path / f"{rows}.sqlite"), "--dry-run"]
        counts.append(_lines_run(("results/imports/",), lambda: main(args)))
        assert f"{rows} points" in capsys.readouterr().out
    assert counts[1] / counts[0] < 4.6, counts  # 4x the rows; main ran 6.3x the lines


def test_a_bad_row_deep_in_a_long_sweep_file_names_its_line_and_stores_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    csv = write_sweep_csv(tmp_path / "long.csv", 2000, settings=5)
    lines = csv.read_text().splitlines()
    assert lines[0] == SWEEP_HEADER
    cells = lines[1499].split(",")
    cells[SWEEP_HEADER.split(",").index("gpu_mhz")] = "1234"  # line 1500: no such GPU clock
    lines[1499] = ",".join(cells)
    csv.write_text("\n".join(lines) + "\n")
    db = tmp_path / "store.sqlite"
    earlier = write_sweep_csv(tmp_path / "earlier.csv", 30, settings=3, seed=1)
    assert _cli(capsys, "import-sweep", str(earlier), "--db", str(db))[0] == 0
    before = stored_sweeps(db)
    code, _out, err = _cli(capsys, "import-sweep", str(csv), "--db", str(db))
    assert code == 2
    assert "line 1500, column gpu_mhz" in err and "no GPU clock 1234 MHz" in err and "nothing was stored" in err
    assert "Traceback" not in err
    assert stored_sweeps(db) == before  # the earlier import as it was, nothing of this one


def test_a_repeat_given_twice_names_both_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    csv = write_sweep_csv(tmp_path / "dup.csv", 1000, settings=2, numbered_every=2)  # repeats of the first setting
    lines = csv.read_text().splitlines()
    first = lines[1].split(",")
    again = lines[901].split(",")
    again[7:10] = first[7:10]  # line 902: the first setting again, with line 2's repeat number
    lines[901] = ",".join(again)
    csv.write_text("\n".join(lines) + "\n")
    code, _out, err = _cli(capsys, "import-sweep", str(csv), "--db", str(tmp_path / "s.sqlite"))
    assert code == 2
    assert "line 902, column repeat" in err and "already given at line 2" in err  # this line and the earlier one
