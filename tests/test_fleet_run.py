"""`fleet run`: experiments spread over a local Ray fleet of twins (engine.run.fleet.runs, the CLI).

Each experiment runs whole on one board (its policy run, then MAXN there) and the driver stores
what the board recorded, once. One module-scoped fleet of two twins serves the API tests; the
CLI test, first in the file, starts (and stops) its own before that fleet exists (one Ray instance
per process at a time)."""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.core.errors import ConfigError
from engine.core.provenance import Source
from engine.results.store import Store
from engine.run.experiment import ExperimentSpec
from engine.run.fleet import SweepPlan, connect
from engine.workload.spec import WorkloadSpec

from conftest import fleet_isolation, twin_gpu_files

ray = pytest.importorskip("ray")

MODELS = ("bert-tiny", "bert-mini")
POLICIES = ("online", "ml")
SPECS = [ExperimentSpec(WorkloadSpec(m, "sst2"), policy=p, compare="maxn", steps=6, simulate=True)
         for m in MODELS for p in POLICIES]


@pytest.mark.slow  # its own local Ray instance and two workers: ~20-30 s on two cores
def test_cli_fleet_run_twins_2_simulate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from engine.cli import main

    db = tmp_path / "cli.sqlite"
    with fleet_isolation(tmp_path):
        code = main(["fleet", "run", "--twins", "2", "--model", "bert-tiny", "--task", "sst2", "--policy", "online",
                     "static:gpu=816", "--steps", "6", "--simulate", "--db", str(db)])
        out = capsys.readouterr().out
        assert code == 0, out
        summary = out.split("fleet run finished")[1]
        assert "experiments per board: twin-0 1, twin-1 1" in summary
        assert summary.count(", MAXN run ") == 2 and len(re.findall(r"; vs MAXN: .* energy, .*\[twin\]", summary)) == 2
        progress = [line for line in out.splitlines() if " step " in line]
        assert progress and all(line.endswith("[twin]") for line in progress)  # every figure names its source
        with Store(db) as store:
            runs = store.list_runs(limit=None)
            assert len(runs) == 4 and all(r.status == "finished" and r.simulated for r in runs)
        code = main(["fleet", "run", "--twins", "1", "--model", "bert-tiny", "--task", "sst2", "--policy", "maxn",
                     "--compare", "none", "--steps", "3", "--simulate", "--json", "--db", str(db)])
        result = json.loads(capsys.readouterr().out)
    assert code == 0 and result["status"] == "finished"
    (only,) = result["experiments"]
    assert only["baseline_run_id"] is None and only["source"] == "twin" and only["board"] == "twin-0"


def test_cli_fleet_run_refuses_a_bad_fleet_before_ray_starts(isolated_env, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    from engine.cli import main

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert main(["fleet", "run", "--twins", "0", "--model", "bert-tiny", "--task", "sst2", "--policy", "online"]) == 2
    assert "--twins 3" in capsys.readouterr().err
    assert main(["fleet", "run", "--model", "bert-tiny", "--task", "sst2", "--policy", "online"]) == 2
    assert "no fleet to connect to" in capsys.readouterr().err


def test_cli_fleet_run_makes_one_experiment_per_combination() -> None:
    import argparse

    from engine.cli import build_parser
    from engine.cli.fleet_run_cmd import run_specs

    args = build_parser().parse_args(["fleet", "run", "--twins", "2", "--model", "bert-tiny", "bert-mini", "--task",
                                      "sst2", "--batch-size", "4", "8", "--policy", "online", "oracle", "--compare",
                                      "none", "--steps", "7", "--simulate"])
    assert isinstance(args, argparse.Namespace)
    specs = run_specs(args)
    assert len(specs) == 8 and len(set(specs)) == 8
    assert all(s.compare is None and s.steps == 7 and s.simulate and s.twin is None for s in specs)
    assert [(s.workload.model, s.workload.batch_size, s.policy) for s in specs[:3]] == [
        ("bert-tiny", 4, "online"), ("bert-tiny", 4, "oracle"), ("bert-tiny", 8, "online")]


@pytest.fixture(scope="module")
def fleet_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    base = tmp_path_factory.mktemp("fleet-run")
    with fleet_isolation(base):
        yield base


@pytest.fixture(scope="module")
def fleet(fleet_env: Path) -> Iterator[object]:
    from engine.workload.resolve import resolve_workload

    for spec in SPECS[::2]:  # trace here once, into the module's cache, rather than in three workers at once
        resolve_workload(spec.workload)
    with connect(twins=2, folder=fleet_env / "twins") as f:
        yield f


def _local(spec: ExperimentSpec, tmp_path: Path) -> object:
    """The same experiment run here, on a fresh twin of the fleet's profile."""
    from dataclasses import replace

    from engine.device.session import open_device
    from engine.run.experiment import run_experiment
    from engine.selector import policy_factory

    with open_device(twin="agx-orin-64gb", realtime=False, twin_dir=tmp_path / "local-twin") as session, \
            Store(tmp_path / "local.sqlite") as store:  # the policies a client hands down, `ml` included
        return run_experiment(replace(spec, twin="agx-orin-64gb"), store=store, session=session,
                              policies=policy_factory())


def test_two_models_by_two_policies_store_every_run_and_comparison_once_within_one_board(
        fleet, tmp_path: Path) -> None:
    events = []
    with Store(tmp_path / "fleet.sqlite") as store:
        result = fleet.run(SPECS, store=store, on_event=events.append)
        assert result.status == "finished" and len(result.experiments) == 4
        assert sum(result.per_board.values()) == 4
        runs = store.list_runs(limit=None)
        assert len(runs) == 8 and all(r.status == "finished" and r.source is Source.TWIN for r in runs)
        for o in result.experiments:
            run, base = store.get_run(o.run_id), store.get_run(o.baseline_run_id)
            assert base.policy == "maxn" and run.workload.model == o.model
            assert run.device.serial == base.device.serial == o.board  # the comparison is within one board
            (cmp_,) = store.comparisons_for(o.run_id)
            assert cmp_.id == o.comparison_id and cmp_.baseline_run_id == base.id and cmp_.source is Source.TWIN
            assert len(store.power_samples(run.id)) > 0 and run.notes and run.simulated
        fleet_mini_ml = next(o for o in result.experiments if o.model == "bert-mini" and o.policy == "ml")
    kinds = [e.kind for e in events]
    assert kinds.count("started") == 4 and kinds.count("finished") == 4 and kinds.count("phase") == 8
    progress = [e for e in events if e.kind == "progress"]
    assert progress and all(e.source is Source.TWIN and e.energy_j > 0 and e.board.startswith("twin-")
                            for e in progress)
    assert {(e.index, e.role) for e in progress} == {(i, r) for i in range(4) for r in ("policy", "baseline")}
    # the same experiment run here gives the same figures: the board runs the local experiment's path
    local = _local(SPECS[3], tmp_path)
    assert fleet_mini_ml.energy_j == pytest.approx(local.run.energy_j, rel=1e-9)
    assert fleet_mini_ml.time_s == pytest.approx(local.run.time_s, rel=1e-9)
    assert fleet_mini_ml.baseline_energy_j == pytest.approx(local.baseline.energy_j, rel=1e-9)
    assert fleet_mini_ml.saving_pct == pytest.approx(local.comparison.saving_pct, rel=1e-6)


def test_oracle_refuses_without_a_stored_sweep_then_uses_the_one_fleet_sweep_stored(fleet, tmp_path: Path) -> None:
    from engine.dvfs.objectives import parse_objective
    from engine.results.sweeps import optimum, summarize_points

    spec = ExperimentSpec(WorkloadSpec("bert-tiny", "sst2"), policy="oracle", compare="maxn", steps=6, simulate=True)
    with Store(tmp_path / "oracle.sqlite") as store:
        with pytest.raises(ConfigError) as err:
            fleet.run([spec], store=store)
        assert "fleet sweep" in err.value.remedy and "--model bert-tiny --task sst2" in err.value.remedy
        assert store.list_runs(limit=None) == []  # refused before anything started
        sweep = fleet.sweep([SweepPlan(WorkloadSpec("bert-tiny", "sst2"), fast=True, steps=2)], store=store)
        (swept,) = sweep.sweeps
        result = fleet.run([spec], store=store)
        assert result.status == "finished"
        (o,) = result.experiments
        best = optimum(summarize_points(store.sweep_points(swept.sweep_id)), parse_objective("energy"))
        run = store.get_run(o.run_id)
        assert run.policy == "oracle" and dict(run.setting)["gpu_hz"] == best.setting.gpu_hz
        assert o.saving_pct is not None and o.saving_pct > 0


def test_ml_with_a_selector_path_and_options_loads_the_drivers_file_on_the_board(fleet, tmp_path: Path) -> None:
    from engine.selector.persistence import shipped_selector_dir

    path = shipped_selector_dir() / "default.joblib"  # the driver's path: the board gets its bytes
    spec = ExperimentSpec(WorkloadSpec("bert-tiny", "sst2"), policy=f"ml:probes=0,selector={path}", steps=3,
                          simulate=True)
    with Store(tmp_path / "ml-path.sqlite") as store:
        result = fleet.run([spec], store=store)
        (o,) = result.experiments
        assert result.status == "finished", o.error
        run = store.get_run(o.run_id)
        assert run.policy == "ml" and run.status == "finished" and o.baseline_run_id is None


def test_ml_without_its_selector_is_refused_before_anything_starts(fleet, tmp_path: Path) -> None:
    spec = ExperimentSpec(WorkloadSpec("bert-tiny", "sst2"), policy=f"ml:{tmp_path / 'none.joblib'}", simulate=True)
    with Store(tmp_path / "ml.sqlite") as store:
        with pytest.raises(ConfigError) as err:
            fleet.run([spec], store=store)
        assert "no selector file" in err.value.what and "train-selector" in err.value.remedy
        assert store.list_runs(limit=None) == []


def test_a_bad_policy_is_refused_and_so_is_a_clock_the_board_does_not_list_as_locally(fleet, tmp_path: Path) -> None:
    with Store(tmp_path / "failed.sqlite") as store:
        with pytest.raises(ConfigError, match="unknown policy"):
            fleet.run([ExperimentSpec(WorkloadSpec("bert-tiny", "sst2"), policy="nonsense", simulate=True)], store=store)
        spec = ExperimentSpec(WorkloadSpec("bert-tiny", "sst2"), policy="static:gpu=1", compare="maxn", steps=3,
                              simulate=True)  # a clock the board does not list: refused by the board
        result = fleet.run([spec], store=store)
        (o,) = result.experiments
        assert result.status == "failed" and o.status == "failed" and "GPU clock 1 MHz" in o.error
        # refused before it started, as a local run is: no run recorded
        assert store.list_runs(limit=None) == [] and o.run_id is None and o.baseline_run_id is None


@pytest.mark.slow  # real fine-tuning (torch) on a board's worker: ~15-30 s on two cores
def test_a_trained_experiment_keeps_its_metric_provenance(fleet, tmp_path: Path) -> None:
    spec = ExperimentSpec(WorkloadSpec("bert-tiny", "sst2", batch_size=4, seq_len=16), policy="static:gpu=816",
                          compare="maxn", steps=2, train_samples=16, eval_samples=4)
    with Store(tmp_path / "trained.sqlite") as store:
        result = fleet.run([spec], store=store)
        (o,) = result.experiments
        assert result.status == "finished", o.error
        run = store.get_run(o.run_id)
        assert not run.simulated and run.synthetic is True and run.weights and run.metrics
        assert run.device.serial == store.get_run(o.baseline_run_id).device.serial == o.board


def test_cancel_stores_the_runs_as_cancelled_and_every_twin_restores_its_clocks(fleet, fleet_env: Path,
                                                                                 tmp_path: Path) -> None:
    specs = [ExperimentSpec(WorkloadSpec("bert-tiny", "sst2"), policy=p, compare="maxn", steps=200, simulate=True)
             for p in ("static:gpu=306", "static:gpu=816")]
    before = twin_gpu_files(fleet_env / "twins")
    cancel = threading.Event()

    def cancel_on_progress(event) -> None:  # type: ignore[no-untyped-def]
        if event.kind == "progress":
            cancel.set()  # what Ctrl-C does in `fleet run`: the boards are mid-run, clocks pinned

    fleet.set_pace(20.0)  # each step also waits 20x its twin time: the cancel lands mid-run
    try:
        with Store(tmp_path / "cancel.sqlite") as store:
            result = fleet.run(specs, store=store, on_event=cancel_on_progress, cancel=cancel)
            assert result.status == "cancelled"
            assert twin_gpu_files(fleet_env / "twins") == before  # every twin's guard restored its clocks
            stored = [o for o in result.experiments if o.run_id is not None]
            assert stored and all(o.status == "cancelled" and o.baseline_run_id is None for o in stored)
            runs = store.list_runs(limit=None)
            assert sorted(r.id for r in runs) == sorted(o.run_id for o in stored)
            assert all(r.status == "cancelled" for r in runs)
            assert any(0 < (r.steps or 0) < 200 for r in runs)  # stopped mid-run (a board yet to start: at 0)
    finally:
        fleet.set_pace(0.0)


# Kept last: it loses one of the module's two boards.
def test_a_board_killed_mid_experiment_stores_nothing_of_it_and_it_is_retried_elsewhere(fleet,
                                                                                        tmp_path: Path) -> None:
    import signal

    pids = {serial: ray.get(fleet.actor(serial).pid.remote()) for serial in fleet.serials}
    victim: dict[str, str] = {}
    events = []

    def kill_on_first_progress(event) -> None:  # type: ignore[no-untyped-def]
        events.append(event)
        if event.kind == "progress" and event.index == 0 and not victim:
            victim["serial"] = event.board
            os.kill(pids[event.board], signal.SIGKILL)  # the worker process dies mid-experiment

    specs = [ExperimentSpec(WorkloadSpec("bert-tiny", "sst2"), policy=p, compare="maxn", steps=30, simulate=True)
             for p in ("online", "static:gpu=816")]
    fleet.set_pace(3.0)
    try:
        with Store(tmp_path / "killed.sqlite") as store:
            result = fleet.run(specs, store=store, on_event=kill_on_first_progress)
            assert result.status == "finished"
            runs = store.list_runs(limit=None)
            assert len(runs) == 4 and all(r.status == "finished" for r in runs)  # nothing twice, nothing half
            assert len(store.comparisons_for(result.experiments[0].run_id)) == 1
    finally:
        fleet.set_pace(0.0)
    dead = victim["serial"]
    first = result.experiments[0]
    assert first.retries == 1 and first.boards[0] == dead and first.board != dead and len(first.boards) == 2
    assert all(r.device.serial != dead for r in runs if r.id in (first.run_id, first.baseline_run_id))
    assert [e.kind for e in events if e.board == dead and e.kind in ("board_lost", "retried")] == ["board_lost",
                                                                                                     "retried"]
    assert dead not in fleet.serials
