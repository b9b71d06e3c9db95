"""The fixed sets (precision, mode, padding, run status, source, objective kind) are parsed once at the edge:
a value outside one is a clear error listing the set, through the path a user takes; a stored row
holding one is the store's corruption error naming the row, never passed on."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from engine.cli import main
from engine.core.constants import MODES, PADDINGS, PRECISIONS, parse_mode, parse_padding, parse_precision
from engine.core.errors import ConfigError, UnknownChoiceError

POINT = {"gpu_mhz": 612, "energy_j": 1, "samples": 8, "rails": "all", "model": "bert-tiny", "task": "sst2"}


def test_each_parse_names_the_set_and_takes_the_stored_spellings() -> None:
    for parse, values in ((parse_precision, PRECISIONS), (parse_mode, MODES), (parse_padding, PADDINGS)):
        assert tuple(parse(v) for v in values) == values
        with pytest.raises(UnknownChoiceError) as err:
            parse("bogus")
        assert isinstance(err.value, ConfigError) and err.value.choices == values
        assert ", ".join(values) in err.value.remedy
    assert parse_padding("max") == "max_length"  # --pad's spelling


def test_train_selector_refuses_an_unknown_precision_listing_them(isolated_env, capsys) -> None:
    assert main(["train-selector", "--from-twin-zoo", "--models", "bert-tiny", "--precisions", "fp32,fp8"]) == 2
    err = capsys.readouterr().err
    assert "unknown precision 'fp8'" in err and "fp32, fp16, bf16" in err and "Traceback" not in err


@pytest.mark.parametrize("cell, value, column, words", [
    ("train_mode", "prefix", "mode", ("unknown training mode 'prefix'", "full, bitfit, head, lora")),
    ("pad", "longest", "pad", ("unknown padding 'longest'", "max_length, dynamic")),
    ("precision", "fp8", "precision", ("unknown precision 'fp8'", "fp32, fp16, bf16")),
])
def test_import_sweep_refuses_a_cell_outside_its_set(tmp_path: Path, monkeypatch, capsys, cell, value, column,
                                                     words) -> None:
    monkeypatch.setenv("SLM_DVFS_DB", str(tmp_path / "r.sqlite"))
    path = tmp_path / "m.json"
    path.write_text(json.dumps([{**POINT, cell: value}]))
    assert main(["import-sweep", str(path)]) == 2
    err = capsys.readouterr().err
    assert all(w in err for w in words) and f"column {column}" in err and "nothing was stored" in err


def _imported_store(tmp_path: Path, monkeypatch) -> Path:
    db = tmp_path / "r.sqlite"
    monkeypatch.setenv("SLM_DVFS_DB", str(db))
    path = tmp_path / "m.json"
    path.write_text(json.dumps([POINT]))
    assert main(["import-sweep", str(path)]) == 0
    return db


def _edit(db: Path, sql: str) -> None:
    with sqlite3.connect(db) as conn:  # a row changed outside slm-dvfs, past the schema's CHECKs
        conn.execute("PRAGMA ignore_check_constraints = ON")
        conn.execute(sql)


def test_a_stored_status_outside_the_set_is_the_stores_corruption_error(tmp_path: Path, monkeypatch, capsys) -> None:
    db = _imported_store(tmp_path, monkeypatch)
    capsys.readouterr()
    _edit(db, "UPDATE sweeps SET status = 'paused'")
    # A clean close spares the next open its integrity check (issue 24), so the row is named when read.
    assert main(["sweeps"]) == 2
    err = capsys.readouterr().err
    assert "sweep s1 holds status 'paused'" in err and "running" in err and "Traceback" not in err
    assert main(["check"]) == 2  # the whole-file check still finds the schema's CHECK
    err = capsys.readouterr().err
    assert "CHECK constraint failed in sweeps" in err and "Traceback" not in err


def test_a_stored_workload_mode_outside_the_set_is_named_as_corrupt(tmp_path: Path, monkeypatch, capsys) -> None:
    from engine.results.errors import CorruptRowError, CorruptStoreError
    from engine.results.store import Store

    db = _imported_store(tmp_path, monkeypatch)
    with Store(db) as store:
        store.start_run(policy="maxn", source="twin", workload=1)
    capsys.readouterr()
    _edit(db, "UPDATE workloads SET mode = 'prefix'")  # no CHECK on it: read, it is named
    assert main(["runs"]) == 2
    err = capsys.readouterr().err
    assert "workload 1 holds mode 'prefix'" in err and "full, bitfit, head, lora" in err and "Traceback" not in err
    with Store(db) as store, pytest.raises(CorruptStoreError) as exc:
        store.get_workload(1)
    assert isinstance(exc.value, CorruptRowError) and (exc.value.row, exc.value.column) == ("workload 1", "mode")


@pytest.mark.parametrize("table, argv, row", [
    ("sweeps", ["sweeps"], "sweep s1"),
    ("sweep_points", ["show", "s1"], "sweep s1's point 1"),
    ("runs", ["runs"], "run 1"),
    ("workloads", ["runs"], "workload 1"),
])
def test_a_stored_source_outside_the_set_is_named_as_corrupt(tmp_path: Path, monkeypatch, capsys, table, argv,
                                                             row) -> None:
    db = _imported_store(tmp_path, monkeypatch)
    from engine.results.store import Store

    with Store(db) as store:
        store.start_run(policy="maxn", source="twin", workload=1)
    capsys.readouterr()
    _edit(db, f"UPDATE {table} SET source = 'guessed'")
    # Cleanly closed, the store is not checked at open: the row reader names the value (no ValueError).
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"{row} holds source 'guessed'" in err and "measured, twin, predicted" in err and "Traceback" not in err


def test_a_stored_comparison_source_outside_the_set_is_named_as_corrupt(tmp_path: Path, monkeypatch) -> None:
    from engine.results.errors import CorruptRowError
    from engine.results.records import ComparisonRecord
    from engine.results.store import Store

    db = _imported_store(tmp_path, monkeypatch)
    with Store(db) as store:
        run = store.start_run(policy="maxn", source="twin", workload=1)
        store.add_comparison(ComparisonRecord(run_id=run, baseline_run_id=run, saving_pct=0.0, slowdown_pct=0.0,
                                              source="twin"))
    _edit(db, "UPDATE comparisons SET source = 'guessed'")
    with Store(db) as store, pytest.raises(CorruptRowError) as exc:
        store.comparisons_for(run)
    assert (exc.value.row, exc.value.column, exc.value.value) == ("comparison 1", "source", "guessed")


def test_the_setup_form_parses_its_selects(isolated_env) -> None:
    from tui.forms import SetupValues, workload_spec

    assert workload_spec(SetupValues(precision="bf16", mode="lora")).precision == "bf16"
    with pytest.raises(UnknownChoiceError, match="unknown precision 'fp8'"):
        workload_spec(SetupValues(precision="fp8"))


def test_an_unknown_objective_kind_is_refused_listing_the_kinds(isolated_env, capsys) -> None:
    from engine.dvfs.objectives import OBJECTIVES, Objective

    assert main(["train-selector", "--from-twin-zoo", "--models", "bert-tiny", "--objective", "speed@5%"]) == 2
    err = capsys.readouterr().err
    assert "unknown objective 'speed@5%'" in err and "energy, edp, eta" in err and "Traceback" not in err
    assert OBJECTIVES == ("energy", "edp", "eta")
    with pytest.raises(UnknownChoiceError):
        Objective(name="speed")  # a library caller's, checked as it is built


def test_every_engine_task_the_tui_sets_is_one_of_its_set() -> None:
    import re

    from tui.state import ENGINE_TASKS

    root = Path(__file__).resolve().parents[1] / "tui"
    set_to = {m for p in root.rglob("*.py") for m in re.findall(r'engine_busy = "([^"]+)"', p.read_text())}
    assert set_to and set_to <= set(ENGINE_TASKS)
