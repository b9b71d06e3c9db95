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


# --------------------------------------------------------------------------- import-tegrastats
@pytest.mark.parametrize("case", sorted(TEGRASTATS_CASES))
def test_import_tegrastats_stores_what_main_stored(case: str, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """The same generated log (torn lines, a line short of a rail) stores the same figures and the same
    down-sampled trace, bit for bit, whichever way its lines are timed."""
    spec = TEGRASTATS_CASES[case]
    log = write_tegrastats_log(tmp_path / f"{case}.log", spec["lines"], interval_ms=spec["interval_ms"],
                               dated=spec.get("dated", True))
    db = tmp_path / "store.sqlite"
    code, out, err = _cli(capsys, "import-tegrastats", str(log), "--db", str(db), "--label", case, *spec["args"])
    assert code == 0, err
    assert stored_run(db, int(out.strip()), spec.get("dated", True)) == MAIN["tegrastats"][case]


def test_import_tegrastats_holds_a_bounded_number_of_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """However long the log, the import holds at most a second's lines parsed at once (those that share a
    date, to spread them over it), not every line (200k lines took 1.1 GB): counted, by the parsed lines
    alive at any moment."""
    import weakref

    from engine.device import tegra_parse

    alive = peak = parsed = 0

    def gone() -> None:
        nonlocal alive
        alive -= 1

    def counting(parse: Callable[[str], Any]) -> Callable[[str], Any]:
        def counted(line: str) -> Any:
            nonlocal alive, peak, parsed
            sample = parse(line)
            alive, parsed = alive + 1, parsed + 1
            peak = max(peak, alive)
            weakref.finalize(sample, gone)
            return sample
        return counted

    # parse_line, and the second pass's lighter reading of a line (its date and rails) where there is one
    for name in ("parse_line", "_reading"):
        if hasattr(tegra_parse, name):
            monkeypatch.setattr(tegra_parse, name, counting(getattr(tegra_parse, name)))
    log = write_tegrastats_log(tmp_path / "long.log", 3000, interval_ms=10)  # 100 lines share each date
    code, _out, err = _cli(capsys, "import-tegrastats", str(log), "--db", str(tmp_path / "s.sqlite"), "--label", "x")
    assert code == 0, err
    assert parsed >= 3000 and peak <= 110, (parsed, peak)  # a second's 100 lines and the few in hand


@pytest.mark.slow
def test_import_tegrastats_memory_does_not_grow_with_the_log(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """The peak of the import's allocations (tracemalloc) for 10k lines is that of 1k lines, give or take
    the down-sampled trace (2000 samples), not ten times it."""
    import tracemalloc

    settle = write_tegrastats_log(tmp_path / "settle.log", 300, interval_ms=10)
    main(["import-tegrastats", str(settle), "--db", str(tmp_path / "settle.sqlite"), "--label", "x"])  # imports load
    peaks = []
    for lines in (1000, 10000):
        log = write_tegrastats_log(tmp_path / f"{lines}.log", lines, interval_ms=10)
        args = ["import-tegrastats", str(log), "--db", str(tmp_path / f"{lines}.sqlite"), "--label", "x",
                "--interval-ms", "10"]
        tracemalloc.start()
        try:
            assert main(args) == 0
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
    capsys.readouterr()
    assert peaks[1] < 1.5 * peaks[0] + (1 << 20), peaks  # main: 10x, about 5.5 kB a line


def _run_ids(db: Path) -> list[tuple[int, str]]:
    import sqlite3

    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT id, status FROM runs ORDER BY id").fetchall()


@pytest.mark.parametrize("fault, message", [
    ("back", "the dates go backwards at line 2801 (3 s before line 2800)"),
    ("gap", "3601 s pass between line 2800 and line 2801"),
])
def test_a_bad_date_deep_in_a_long_log_names_its_lines_and_stores_nothing(
        fault: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Dates that go back, or jump by an hour, at line 2801 of 3000: the error names the lines, what to do, and
    the store is as it was (no run started, failed or half-stored)."""
    log = write_tegrastats_log(tmp_path / "two.log", 3000, interval_ms=1000, faults=False)
    lines = log.read_text().splitlines()
    assert (lines[2799][:19], lines[2800][:19]) == ("11-21-2023 11:01:40", "11-21-2023 11:01:41")
    if fault == "back":  # line 2801 dated 3 s before line 2800
        lines[2800] = lines[2800].replace("11:01:41", "11:01:37", 1)
    else:  # from line 2801 on, an hour later
        lines[2800:] = [line.replace("11-21-2023 11:", "11-21-2023 12:", 1) for line in lines[2800:]]
    log.write_text("\n".join(lines) + "\n")
    db = tmp_path / "store.sqlite"
    earlier = write_tegrastats_log(tmp_path / "earlier.log", 50, interval_ms=1000, faults=False)
    assert _cli(capsys, "import-tegrastats", str(earlier), "--db", str(db), "--label", "earlier")[0] == 0
    code, _out, err = _cli(capsys, "import-tegrastats", str(log), "--db", str(db), "--label", "two")
    assert code == 2 and message in err and "split the log at line 2801" in err and "Traceback" not in err
    assert _run_ids(db) == [(1, "finished")]


def test_a_log_that_changes_between_the_two_passes_is_refused(tmp_path: Path) -> None:
    """The second pass finds other lines than the first (tegrastats still writing): refused, not integrated."""
    from engine.core.errors import ConfigError
    from engine.device.tegra_parse import scan_log

    log = write_tegrastats_log(tmp_path / "growing.log", 300, interval_ms=10)
    scan = scan_log(log)
    with log.open("a") as fh:
        fh.write(log.read_text().splitlines()[-1] + "\n")
    with pytest.raises(ConfigError, match="changed while it was read") as exc:
        scan.read()
    assert "once nothing writes to it" in exc.value.remedy
