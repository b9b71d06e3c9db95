"""The fleet over a local Ray instance of twins (engine.run.fleet, `slm-dvfs fleet`).

One module-scoped local fleet of three twins serves the API tests; the CLI starts its own.
Ray's token auth is turned off for these local instances (nothing listens beyond localhost
that a test did not start), so nothing is written under ~/.ray."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.core.errors import ConfigError
from engine.core.provenance import Source
from engine.results.store import Store, setting_key
from engine.run.fleet import SweepPlan, connect, parse_twins
from engine.workload.spec import WorkloadSpec

from conftest import fleet_isolation, twin_gpu_files

ray = pytest.importorskip("ray")

MODELS = ("bert-tiny", "bert-mini")
TASKS = ("sst2", "mrpc")
PLANS = [SweepPlan(WorkloadSpec(m, t), fast=True, steps=2) for m in MODELS for t in TASKS]
GPU_SETTINGS = 12  # the AGX Orin 64GB's GPU space: its 11 GPU steps and MAXN


@pytest.fixture(scope="module")
def fleet_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """State, data and cache folders of the module (the twins' actors inherit them), offline, no Ray auth."""
    base = tmp_path_factory.mktemp("fleet")
    with fleet_isolation(base):
        yield base


@pytest.fixture(scope="module")
def fleet(fleet_env: Path) -> Iterator[object]:
    from engine.workload.resolve import resolve_workload

    for plan in PLANS:  # trace here once, into the module's cache, rather than in three workers at once
        resolve_workload(plan.workload)
    with connect(twins=3, folder=fleet_env / "twins") as f:
        yield f


def _points(store: Store, sweep_id: int) -> list[tuple[str, int]]:
    return sorted((repr(p.setting), p.repeat) for p in store.sweep_points(sweep_id))


def _check_every_point_once(store: Store, result: object, n_sweeps: int) -> None:
    assert result.status == "finished" and len(result.sweeps) == n_sweeps
    assert len(store.list_sweeps()) == n_sweeps
    for outcome in result.sweeps:
        sweep = store.get_sweep(outcome.sweep_id)
        assert sweep.status == "finished" and sweep.source is Source.TWIN
        points = _points(store, sweep.id)
        assert len(points) == len(set(points)) == outcome.total == outcome.points == GPU_SETTINGS


def test_status_lists_three_twins_with_their_own_serials_and_roots(fleet, fleet_env: Path) -> None:
    boards = fleet.boards()
    assert sorted(b.serial for b in boards) == ["twin-0", "twin-1", "twin-2"]
    for b in boards:
        assert b.is_twin and b.profile == "agx-orin-64gb" and "P3701" in b.module and b.l4t
        assert not b.busy and b.running == ""
        assert b.power_w is not None and b.power_w > 0 and b.temps_c
    assert sorted(p.name for p in (fleet_env / "twins").iterdir()) == ["twin-0", "twin-1", "twin-2"]
    pids = {ray.get(fleet.actor(s).pid.remote()) for s in fleet.serials}
    assert len(pids) == 3 and os.getpid() not in pids  # each twin is driven by its own worker process


def test_a_local_fleet_listens_on_the_loopback_interface_only(fleet) -> None:
    import ipaddress

    psutil = pytest.importorskip("psutil")
    procs = [psutil.Process(), *psutil.Process().children(recursive=True)]  # the driver, Ray's GCS, raylet, agents, workers
    listening = {}
    for p in procs:
        try:
            sockets = p.net_connections(kind="inet")
        except psutil.Error:
            continue
        for c in sockets:
            if c.status == psutil.CONN_LISTEN:
                listening[(p.name(), c.laddr.port)] = c.laddr.ip
    names = {name for name, _port in listening}
    assert {"gcs_server", "raylet", "ray::BoardWorker"} <= names  # what would face the network
    for (name, port), ip in listening.items():
        address = ipaddress.ip_address(ip)
        mapped = getattr(address, "ipv4_mapped", None)  # a dual-stack socket bound to 127.0.0.1
        assert (mapped or address).is_loopback, f"{name} listens on {ip}:{port}, not on the loopback interface"


def test_no_ray_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` fails as a missing module does
    with pytest.raises(ConfigError) as err:
        connect(twins=2)
    assert "pip install -e '.[fleet]'" in err.value.remedy


def test_twins_syntax() -> None:
    assert parse_twins("3") == (3, "agx-orin-64gb")
    assert parse_twins("2:agx-orin-32gb") == (2, "agx-orin-32gb")
    for bad in ("0", "x", "-1:agx-orin-64gb"):
        with pytest.raises(ConfigError):
            parse_twins(bad)


def test_two_models_by_two_tasks_store_every_point_once_with_the_local_figures(fleet, tmp_path: Path) -> None:
    from engine.run.sweep import run_sweep

    events = []
    with Store(tmp_path / "fleet.sqlite") as store:
        result = fleet.sweep(PLANS, store=store, on_event=events.append)
        _check_every_point_once(store, result, 4)
        assert sum(result.per_board.values()) == 4 * GPU_SETTINGS
        fleet_figures = {o.model + "/" + o.task: {(repr(p.setting), p.repeat): (p.energy_j, p.time_s)
                                                  for p in store.sweep_points(o.sweep_id)} for o in result.sweeps}
    kinds = [e.kind for e in events]
    assert kinds.count("finished") == 4 and kinds.count("point") == 4 * GPU_SETTINGS
    # the sweeps are spread in shares over the boards: more shares than sweeps, each started and done
    assert kinds.count("started") == kinds.count("done") > 4
    point = next(e for e in events if e.kind == "point")
    assert point.source is Source.TWIN and point.energy_j > 0 and point.board.startswith("twin-")
    # every stored point names the board that measured it, as its event did
    told = {(e.sweep_id, setting_key(e.setting), e.repeat): e.board for e in events if e.kind == "point"}
    with Store(tmp_path / "fleet.sqlite") as store:
        named = {(o.sweep_id, *p.key): store.get_device(p.device_id).serial
                 for o in result.sweeps for p in store.sweep_points(o.sweep_id)}
        spread = [len(store.sweep_boards(o.sweep_id)) for o in result.sweeps]
    assert named == told and set(named.values()) == {"twin-0", "twin-1", "twin-2"}
    assert max(spread) > 1  # a workload's sweep measured on more than one board
    # the same sweep run locally stores the same figures: the boards run the local sweep's path
    with Store(tmp_path / "local.sqlite") as store:
        local = run_sweep(SweepPlan(WorkloadSpec("bert-mini", "mrpc"), fast=True, steps=2, twin="agx-orin-64gb"),
                          store=store)
        figures = {(repr(p.setting), p.repeat): (p.energy_j, p.time_s) for p in store.sweep_points(local.sweep_id)}
    assert figures == fleet_figures["bert-mini/mrpc"]


def test_a_second_sweep_of_the_same_plans_resumes_nothing_to_do(fleet, tmp_path: Path) -> None:
    with Store(tmp_path / "again.sqlite") as store:
        first = fleet.sweep(PLANS[:1], store=store)
        store.finish_sweep(first.sweeps[0].sweep_id, "cancelled")  # as if stopped after its last point
        again = fleet.sweep(PLANS[:1], store=store)
        assert again.sweeps[0].sweep_id == first.sweeps[0].sweep_id and again.per_board == {
            s: 0 for s in again.per_board}
        _check_every_point_once(store, again, 1)


@pytest.mark.slow  # the real fine-tuning loop in two workers (torch imported there): ~20-40 s on two cores
def test_cancel_stops_every_board_restores_its_clocks_and_the_sweeps_resume(fleet, fleet_env: Path,
                                                                            tmp_path: Path) -> None:
    import threading

    from engine.device.setting import MAXN, DvfsSetting

    few = (MAXN, DvfsSetting(gpu_hz=306_000_000, nvpmodel=0), DvfsSetting(gpu_hz=816_000_000, nvpmodel=0))
    plans = [SweepPlan(WorkloadSpec("bert-tiny", t, batch_size=4, seq_len=16), train_samples=16, eval_samples=4,
                       warmup_steps=1, steps=2, settings=few) for t in TASKS]
    before = twin_gpu_files(fleet_env / "twins")
    cancel = threading.Event()

    def cancel_after_a_point(event) -> None:  # type: ignore[no-untyped-def]
        if event.kind == "point":
            cancel.set()  # what Ctrl-C does in `fleet sweep`: the boards are mid-unit, clocks pinned

    fleet.set_pace(20.0)  # each point also waits 20x its twin time: the cancel lands mid-unit
    try:
        with Store(tmp_path / "cancel.sqlite") as store:
            result = fleet.sweep(plans, store=store, on_event=cancel_after_a_point, cancel=cancel)
            assert result.status == "cancelled"
            assert twin_gpu_files(fleet_env / "twins") == before  # every twin's guard restored its clocks
            stored = {o.sweep_id: o.points for o in result.sweeps if o.sweep_id is not None}
            assert stored and all(store.get_sweep(i).status == "cancelled" for i in stored)
            assert sum(stored.values()) < len(few) * len(plans)
            fleet.set_pace(0.0)
            again = fleet.sweep(plans, store=store)  # resumes from the stored points
    finally:
        fleet.set_pace(0.0)
    with Store(tmp_path / "cancel.sqlite") as store:
        assert again.status == "finished" and {o.sweep_id for o in again.sweeps} >= set(stored)
        assert sum(again.per_board.values()) == len(few) * len(plans) - sum(stored.values())
        for o in again.sweeps:
            points = _points(store, o.sweep_id)
            assert len(points) == len(set(points)) == len(few)
    assert twin_gpu_files(fleet_env / "twins") == before


def test_a_bad_model_fails_its_sweep_with_the_error_and_its_remedy_and_the_others_go_on(fleet, tmp_path: Path) -> None:
    with Store(tmp_path / "bad.sqlite") as store:
        result = fleet.sweep([SweepPlan(WorkloadSpec("no-such-model", "sst2"), fast=True, steps=2), PLANS[0]],
                             store=store)
    bad, good = result.sweeps
    assert result.status == "failed" and good.status == "finished" and good.points == GPU_SETTINGS
    assert bad.status == "failed" and bad.sweep_id is None
    # the board's own error, said on one line with what to do (not Ray's wrapper around it)
    assert bad.error.startswith("'no-such-model' is not in the model zoo; what to do:") and "Ray" not in bad.error


# Kept last: it loses one of the module's three boards.
def test_a_worker_killed_mid_sweep_loses_nothing_and_its_unit_is_retried(fleet, tmp_path: Path) -> None:
    import signal

    pids = {serial: ray.get(fleet.actor(serial).pid.remote()) for serial in fleet.serials}
    victim: dict[str, str] = {}
    events = []

    busy: list[object] = []

    def kill_on_third_point(event) -> None:  # type: ignore[no-untyped-def]
        events.append(event)
        if event.kind == "point" and not busy:
            busy.extend(b for b in fleet.boards() if b.busy)  # status answers while the boards sweep
        if event.kind == "point" and event.done == 3 and not victim:
            victim["serial"] = event.board
            os.kill(pids[event.board], signal.SIGKILL)  # the worker process dies mid-unit

    fleet.set_pace(3.0)  # each point takes 3x its twin time in wall time: the kill lands mid-unit
    try:
        with Store(tmp_path / "killed.sqlite") as store:
            result = fleet.sweep(PLANS, store=store, on_event=kill_on_third_point)
            _check_every_point_once(store, result, 4)
    finally:
        fleet.set_pace(0.0)
    dead = victim["serial"]
    assert busy and all("/" in b.running and b.running.split()[-1].count("/") == 1 for b in busy)
    (retried,) = [o for o in result.sweeps if o.retries]  # the dead board's share went back to the pool
    assert retried.retries == 1 and dead in retried.boards and set(retried.boards) - {dead}
    with Store(tmp_path / "killed.sqlite") as store:  # what the dead board stored stays, named after it
        serials = {store.get_device(p.device_id).serial for o in result.sweeps for p in store.sweep_points(o.sweep_id)}
    assert dead in serials and result.per_board[dead] >= 3
    assert [e.kind for e in events if e.board == dead and e.kind in ("board_lost", "retried")] == ["board_lost",
                                                                                                     "retried"]
    assert dead not in fleet.serials and len(fleet.boards()) == 2


def test_importing_the_fleet_does_not_import_ray() -> None:
    import subprocess

    code = "import sys, engine.run.fleet, engine.cli.fleet_cmd; print('ray' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    assert out.stdout.strip() == "False"


def test_a_thermal_twin_board_runs_the_thermal_model_and_a_plain_one_does_not(tmp_path: Path) -> None:
    from engine.run.fleet.board import BoardWorker

    hot = BoardWorker("board-twin-t", twin="agx-orin-64gb", twin_dir=str(tmp_path / "t"), serial="twin-t",
                      thermal=True)
    plain = BoardWorker("board-twin-p", twin="agx-orin-64gb", twin_dir=str(tmp_path / "p"), serial="twin-p")
    try:
        assert hot.session.twin.thermal_enabled and not plain.session.twin.thermal_enabled
        assert hot.info().serial == "twin-t" and hot.device_record().serial == "twin-t"
    finally:
        hot.close()
        plain.close()


def test_only_boards_of_one_kind_share_a_sweep_or_stand_in_for_one_another() -> None:
    from engine.run.fleet.loop import board_kind

    agx = "P3701-0000 (AGX Orin 64GB)"
    assert board_kind(agx, False, None) == board_kind(agx, False, None)  # two boards of the module
    # a twin's points are twin figures, a board's measured ones; twins of two profiles compute differently
    assert len({board_kind(agx, False, None), board_kind(agx, True, "agx-orin-64gb"),
                board_kind(agx, True, "agx-orin-64gb-calibrated"), board_kind("P3767-0000", False, None)}) == 4
