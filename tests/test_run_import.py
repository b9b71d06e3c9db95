"""Runs carried from one store into another (engine.results.store.run_import): what a fleet board records
in its own store reaches the driver's store whole, in one transaction, with every field kept."""

from __future__ import annotations

from dataclasses import fields, replace
from pathlib import Path

import pytest

from engine.results.records import ComparisonRecord
from engine.results.store.run_import import RunBundle, export_runs
from engine.results.store import Store, StoreError
from engine.run.experiment import ExperimentSpec, run_experiment
from engine.workload.spec import WorkloadSpec

ID_FIELDS = {"id", "device_id", "workload_id"}


def _same_run(a, b) -> None:  # type: ignore[no-untyped-def]
    for f in fields(a):
        if f.name not in ID_FIELDS:
            assert getattr(a, f.name) == getattr(b, f.name), f.name


def test_an_experiment_exported_and_imported_keeps_every_field(twin_session, tmp_path: Path) -> None:
    spec = ExperimentSpec(WorkloadSpec("bert-tiny", "sst2"), policy="static:gpu=816", compare="maxn", steps=4,
                          simulate=True, twin="agx-orin-64gb", label="fleet")
    with Store(tmp_path / "board.sqlite") as board:
        result = run_experiment(spec, store=board, session=twin_session)
        bundle = export_runs(board, [result.run.run_id, result.baseline.run_id])
        originals = [board.get_run(i) for i in (result.run.run_id, result.baseline.run_id)]
        samples = {i: board.power_samples(i) for i in (result.run.run_id, result.baseline.run_id)}
    assert len(bundle.comparisons) == 1 and bundle.comparisons[0].id == result.comparison.record_id
    with Store(tmp_path / "driver.sqlite") as driver:
        driver.start_run(policy="maxn", source="twin")  # the driver's ids differ from the board's
        imported = driver.import_runs(bundle)
        assert set(imported.run_ids) == {r.id for r in originals}
        assert all(imported.run_ids[r.id] != r.id for r in originals)
        for original in originals:
            copy = driver.get_run(imported.run_ids[original.id])
            _same_run(original, copy)
            assert copy.device == original.device and copy.workload.key == original.workload.key
            assert driver.power_samples(copy.id) == samples[original.id]
        (cmp_,) = driver.comparisons_for(imported.run_ids[result.run.run_id])
        assert cmp_.baseline_run_id == imported.run_ids[result.baseline.run_id]
        assert cmp_.saving_pct == bundle.comparisons[0].saving_pct and imported.comparison_ids == {
            bundle.comparisons[0].id: cmp_.id}


def test_an_import_is_all_or_nothing(twin_session, tmp_path: Path) -> None:
    spec = ExperimentSpec(WorkloadSpec("bert-tiny", "sst2"), policy="maxn", steps=2, simulate=True,
                          twin="agx-orin-64gb")
    with Store(tmp_path / "board.sqlite") as board:
        result = run_experiment(spec, store=board, session=twin_session)
        bundle = export_runs(board, [result.run.run_id])
    broken = RunBundle(bundle.runs, bundle.samples, (ComparisonRecord(
        run_id=result.run.run_id, baseline_run_id=999, saving_pct=0.0, slowdown_pct=0.0, source=result.source),))
    with Store(tmp_path / "driver.sqlite") as driver:
        with pytest.raises(StoreError):
            driver.import_runs(broken)
        assert driver.list_runs(limit=None) == []  # the run went back out with the bad comparison
        driver.import_runs(replace(bundle))
        assert len(driver.list_runs(limit=None)) == 1
