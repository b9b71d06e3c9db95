"""Results carry the board they came from (serial, module, L4T): two boards of one module are two
devices; baselines are per board, the oracle's points per module; runs of two modules never
compare; the selector trains per module by default and across modules with the module a feature."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from engine.core.errors import ConfigError
from engine.core.provenance import Source
from engine.device.jetson.identity import read_identity
from engine.device.setting import MAXN
from engine.device.sysfs import SysfsTree
from engine.device.twin.fast import fast_sweep
from engine.device.twin.orin import VirtualOrin
from engine.device.twin.profile import load_profile
from engine.results import migrations
from engine.results.baseline import find_baseline, matching_baseline
from engine.results.compare import board_note, compare_records, mismatch, Side
from engine.results.store import DeviceRecord, Store, SweepPoint, WorkloadRecord
from engine.results.sweeps import stored_points
from engine.selector.dataset import from_store, profile_settings
from engine.selector.features import describe_workload
from engine.selector.modules import pick_module
from engine.results.totals import RunTotals

from conftest import migrate

AGX = "P3701-0000 (AGX Orin 64GB)"
# Only the AGX Orin 64GB twin ships: the "other module" below is a label put on device records
# whose sweeps are that twin's, energy scaled 1.3x. It stands for a second module in these tests;
# it is not a model of an Orin NX.
OTHER = "P3767-0000 (Orin NX 16GB)"  # its rows: the AGX twin's at 1.3x the energy, encoded with the NX profile
BOARD = "NVIDIA Jetson AGX Orin Developer Kit"


def _twin(root: Path, serial: str | None) -> DeviceRecord:
    twin = VirtualOrin(root=root, serial=serial)
    try:
        return DeviceRecord.from_identity(read_identity(SysfsTree(twin.root)))
    finally:
        twin.close()


# --------------------------------------------------------------------------- the serial
def test_two_twins_with_their_own_serials_are_two_devices_of_one_module(tmp_path: Path) -> None:
    a, b = _twin(tmp_path / "a", "1422921000001"), _twin(tmp_path / "b", "1422921000002")
    plain = _twin(tmp_path / "c", None)
    assert (a.serial, b.serial, plain.serial) == ("1422921000001", "1422921000002", None)
    assert a.module == b.module == AGX and a.same_module(b) and a.other_board(b) and not a.other_board(a)
    assert not a.other_board(plain)  # an unknown serial may be the same board
    assert "#1422921000001" in a.label() and "[twin]" in a.label()
    assert _twin(tmp_path / "a", None).serial == "1422921000001"  # a reopened twin keeps its serial
    with Store(tmp_path / "r.sqlite") as store:
        ida, idb = store.ensure_device(a), store.ensure_device(b)
        assert ida != idb and store.ensure_device(a) == ida
        assert store.get_device(idb).serial == "1422921000002"
        assert store.device_ids(ida, "board") == (ida,)
        assert set(store.device_ids(ida, "module")) == {ida, idb}


def test_a_version_8_store_keeps_its_devices_with_an_unknown_serial(tmp_path: Path) -> None:
    db = tmp_path / "old.sqlite"
    conn = sqlite3.connect(db)
    migrate(conn, 8)
    conn.executescript(f"""
        INSERT INTO devices VALUES (3, '{BOARD}', '{AGX}', '36.3.0', '6.0', NULL, 0, 'measured', '2025-01-01');
        PRAGMA user_version = 8;
    """)
    conn.close()
    old = DeviceRecord(BOARD, AGX, "36.3.0", "6.0")
    with Store(db) as store:
        assert store.schema_version() == migrations.SCHEMA_VERSION == 12
        assert store.get_device(3) == old and old.serial is None
        assert store.ensure_device(old) == 3  # its identity is unchanged
        new = store.ensure_device(DeviceRecord(BOARD, AGX, "36.3.0", "6.0", serial="1422921012345"))
        assert new != 3
        assert store.device_ids(new, "board") == (new, 3)  # the serial-less row may be this board
        assert store.device_ids(3, "board") == (3,)
        other = store.ensure_device(DeviceRecord(BOARD, AGX, "36.3.0", "6.0", serial="999"))
        assert 3 in store.device_ids(other, "board") and new not in store.device_ids(other, "board")


# --------------------------------------------------------------------------- runs and baselines
def _run(store: Store, device: DeviceRecord, policy: str, energy: float) -> int:
    wl = WorkloadRecord("bert-tiny", "sst2", 32, 128, "fp32")
    rid = store.start_run(policy=policy, source=Source.TWIN if device.is_twin else Source.MEASURED, device=device,
                          workload=wl, steps=4, seed=0, rails="all")
    store.finish_run(rid, RunTotals(time_s=2.0, energy_j=energy, rails_preset="all", samples=128, steps=4))
    return rid


def test_comparisons_refuse_two_modules_and_label_another_board(tmp_path: Path) -> None:
    a = DeviceRecord(BOARD, AGX, "36.4.0", serial="A")
    b = DeviceRecord(BOARD, AGX, "36.4.0", serial="B")
    nx = DeviceRecord("NVIDIA Jetson Orin NX", OTHER, "36.4.0", serial="C")
    with Store(tmp_path / "r.sqlite") as store:
        maxn_a = _run(store, a, "maxn", 100.0)
        run_b = _run(store, b, "online", 80.0)
        run_nx = _run(store, nx, "online", 50.0)
        rb, ra, rn = store.get_run(run_b), store.get_run(maxn_a), store.get_run(run_nx)
        assert rb.device is not None and rb.device.serial == "B"
        problem = mismatch(Side.of(rn), Side.of(ra))
        assert problem is not None and problem.kind == "module" and "different modules never compare" in problem.what
        with pytest.raises(ConfigError, match="different modules never compare"):
            compare_records(rn, ra)
        assert compare_records(rb, ra).saving_pct == pytest.approx(20.0)  # one module, another board: allowed
        assert board_note(rb, ra) == "other board (#A)" and board_note(ra, ra) is None
        # the baseline lookup: this board's first; another board's of the module only as a fallback
        key = rb.workload.key  # type: ignore[union-attr]
        assert matching_baseline(store, workload_key=key, device_id=rb.device_id, source=rb.source, steps=None,
                                 seed=None, rails_preset="all", simulated=False) is None
        found = find_baseline(store, rb)
        assert found is not None and found.id == maxn_a and board_note(rb, found) == "other board (#A)"
        assert find_baseline(store, rn) is None  # never another module's
        maxn_b = _run(store, b, "maxn", 90.0)
        assert find_baseline(store, rb).id == maxn_b  # type: ignore[union-attr]


def test_the_oracle_reads_the_sweeps_of_every_board_of_its_module(tmp_path: Path) -> None:
    a = DeviceRecord(BOARD, AGX, "36.4.0", serial="A")
    b = DeviceRecord(BOARD, AGX, "36.4.0", serial="B")
    nx = DeviceRecord("NVIDIA Jetson Orin NX", OTHER, "36.4.0", serial="C")
    wl = WorkloadRecord("bert-tiny", "sst2", 32, 128, "fp32")
    with Store(tmp_path / "r.sqlite") as store:
        for dev, energy in ((a, 10.0), (nx, 99.0)):
            sweep = store.find_or_create_sweep(device=dev, workload=wl, space={"rails": "all"}, warmup_steps=0,
                                               steps=1, repeats=1, source=Source.MEASURED)
            store.add_point(SweepPoint(sweep.id, MAXN.to_json(), 0, 1.0, energy, 10))
        points = stored_points(store, store.ensure_device(b), store.ensure_workload(wl))
        assert [m.energy_j for _s, m in points] == [10.0]  # board A's, not the other module's
        # resuming is per board: board B starts its own sweep rather than adding to A's
        mine = store.find_or_create_sweep(device=b, workload=wl, space={"rails": "all"}, warmup_steps=0, steps=1,
                                          repeats=1, source=Source.MEASURED)
        assert mine.device_id == store.ensure_device(b)


def test_a_fleet_sweep_resumes_on_any_board_of_the_module_and_its_points_name_their_board(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from engine.cli import main
    from engine.results.report import write_report

    a = DeviceRecord(BOARD, AGX, "36.4.0", serial="A")
    b = DeviceRecord(BOARD, AGX, "36.4.0", serial="B")
    nx = DeviceRecord("NVIDIA Jetson Orin NX", OTHER, "36.4.0", serial="C")
    wl = WorkloadRecord("bert-tiny", "sst2", 32, 128, "fp32")
    db = tmp_path / "r.sqlite"
    args = dict(workload=wl, space={"rails": "all"}, warmup_steps=0, steps=1, repeats=1, source=Source.MEASURED)
    with Store(db) as store:
        first = store.find_or_create_sweep(device=a, **args)
        store.add_point(SweepPoint(first.id, MAXN.to_json(), 0, 1.0, 10.0, 10))  # device None: the sweep's (A)
        store.finish_sweep(first.id, "cancelled")
        # board B picks it up (scope "module"); the other module never does
        again = store.find_or_create_sweep(device=b, scope="module", **args)
        assert again.id == first.id and again.device_id == store.ensure_device(a)
        assert store.find_or_create_sweep(device=nx, scope="module", **args).id != first.id
        store.add_point(SweepPoint(first.id, {"gpu_hz": 816_000_000, "nvpmodel": 0}, 0, 2.0, 8.0, 10,
                                   device_id=store.ensure_device(b)))
        store.finish_sweep(first.id)
        by_board = {p.key[0]: p.device_id for p in store.sweep_points(first.id)}
        assert sorted(by_board.values(), key=str) == sorted([None, store.ensure_device(b)], key=str)
        assert [d.serial for d in store.sweep_boards(first.id)] == ["A", "B"]
        md = write_report(store, f"s{first.id}", out_dir=tmp_path / "rep").markdown.read_text()
    assert "measured on 2 boards of the module (serials A, B)" in md
    assert main(["show", f"s{first.id}", "--db", str(db)]) == 0
    assert "boards       2 of the module measured its points: #A, #B" in capsys.readouterr().out
    assert main(["show", f"s{first.id}", "--db", str(db), "--json"]) == 0
    assert [d["serial"] for d in json.loads(capsys.readouterr().out)["boards"]] == ["A", "B"]


# --------------------------------------------------------------------------- the selector
PROFILE = load_profile("agx-orin-64gb")
SETTINGS = profile_settings(PROFILE, "gpu")


@pytest.fixture(scope="module")
def two_modules(tmp_path_factory: pytest.TempPathFactory, selector_trace_cache: Path) -> Path:
    """A store of twin sweeps of three workloads on an AGX Orin device record and on the stand-in
    module's (the same twin sweeps, energy x1.3: see OTHER)."""
    db = tmp_path_factory.mktemp("modules") / "results.sqlite"
    agx = DeviceRecord(BOARD, AGX, profile="agx-orin-64gb", is_twin=True, serial="A")
    nx = DeviceRecord("NVIDIA Jetson Orin NX", OTHER, profile="agx-orin-64gb", is_twin=True, serial="N")
    with Store(db) as store:
        for model, batch in (("bert-tiny", 8), ("bert-tiny", 32), ("pythia-14m", 8)):
            w, trace = describe_workload(model, "sst2", batch_size=batch, seq_len=32)
            rec = WorkloadRecord.from_trace(trace, "sst2", family=w.family)
            rows = fast_sweep(trace, PROFILE, SETTINGS, steps=2)
            for dev, scale in ((agx, 1.0), (nx, 1.3)):
                sweep = store.find_or_create_sweep(device=dev, workload=rec, space={"space": "gpu", "rails": "all"},
                                                   warmup_steps=1, steps=2, repeats=1, source=Source.TWIN)
                for s, m in rows:
                    store.add_point(SweepPoint(sweep.id, s.to_json(), 0, m.time_s, m.energy_j * scale, m.samples))
                store.finish_sweep(sweep.id)
    return db


def test_training_uses_one_module_by_default_and_learns_across_with_the_flag(two_modules: Path) -> None:
    from engine.selector.candidates import CandidateSpec
    from engine.selector.training import store_dataset, train_on

    with Store(two_modules) as store:
        mine = from_store(store, source="twin")  # the profile's module, of the two swept
        assert set(mine.row_modules) == {AGX} and not mine.across_modules
        assert mine.summary()["modules"] == [AGX]
        theirs = store_dataset(store, source="twin", module=OTHER)
        assert set(theirs.row_modules) == {OTHER} and len(theirs) == len(mine)
        assert np.allclose(theirs.energy_per_sample, 1.3 * mine.energy_per_sample)
        with pytest.raises(ConfigError, match="no sweep of module"):
            from_store(store, source="twin", module="P3767-0005 (Orin Nano)")
        with pytest.raises(ConfigError, match="--across-modules"):  # two swept, the profile's module neither
            pick_module([AGX, OTHER], None, "P3701-0004 (AGX Orin 32GB)", "agx-orin-32gb")
        across = store_dataset(store, source="twin", across_modules=True)
    assert len(across) == 2 * len(mine) and tuple(across.module_encoders) == (AGX, OTHER)
    assert across.module_encoders[OTHER].profile == "orin-nx-16gb"  # each module's rows against its own profile
    assert across.columns == mine.columns and across.X().shape[1] == mine.X().shape[1]
    assert mine.digest() != across.digest()
    trained = train_on(across, candidates=[CandidateSpec("random-forest", "time+energy", small=True)], n_splits=2)
    sel = trained.selector
    assert sel.modules == (AGX, OTHER) and sel.schema["columns"][-1] == "module_power_limit_w"
    assert sel.basis.across_modules and sel.basis.modules == (AGX, OTHER) and "across modules" in sel.basis.line()
    w, _t = describe_workload("bert-tiny", "sst2", batch_size=16, seq_len=32)
    sel.use_module(AGX)
    on_agx = sel.predict(w, [MAXN])[0].energy_per_sample
    sel.use_module(OTHER)
    on_other = sel.predict(w, [MAXN])[0].energy_per_sample
    assert on_other > 1.15 * on_agx  # it learnt the stand-in module's 1.3x energy
    with pytest.raises(ConfigError, match="learnt"):  # --module names one it learnt; a board names any
        sel.use_module("P3767-0005 (Orin Nano)")
    # the ml policy predicts for the board's module (its module profile), learnt or not
    from types import SimpleNamespace

    from engine.device.base import DeviceIdentity
    from engine.selector.policy import MLPolicy

    policy = MLPolicy(sel, probes=0)
    for module, profile in ((AGX, "agx-orin-64gb"), (OTHER, "orin-nx-16gb"), ("P3767-0005 (Orin Nano 8GB)", "orin-nano-8gb")):
        ident = DeviceIdentity("board", module, "36.4.0", "6.1", is_twin=False, module_profile=profile)
        policy._ctx = SimpleNamespace(device=SimpleNamespace(identity=lambda ident=ident: ident))  # type: ignore[assignment]
        policy._for_board(policy._ctx)  # type: ignore[arg-type]
        assert sel.encoder.profile == profile and sel.module_trained == (module != "P3767-0005 (Orin Nano 8GB)")


def test_train_selector_across_modules_then_select_for_a_module(two_modules: Path, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    from engine.cli import main
    from engine.selector.persistence import load_selector

    monkeypatch.setenv("SLM_DVFS_DATA_DIR", str(tmp_path / "data"))
    out = tmp_path / "data" / "selectors" / "across.joblib"
    common = ["train-selector", "--db", str(two_modules), "--source", "twin", "--quick", "--candidates",
              "random-forest", "--splits", "2", "--json"]
    assert main([*common, "--module", OTHER, "--across-modules", "--out", str(out)]) != 0
    assert "give one of the two" in capsys.readouterr().err
    assert main([*common, "--across-modules", "--out", str(out)]) == 0
    trained = json.loads(capsys.readouterr().out)
    assert trained["training"]["across_modules"] == {AGX: "agx-orin-64gb", OTHER: "orin-nx-16gb"}
    assert trained["basis"]["modules"] == [AGX, OTHER]
    sel = load_selector(out)
    assert sel.modules == (AGX, OTHER)
    picks = {}
    for module in (AGX, OTHER):
        assert main(["select", "--model", "bert-tiny", "--task", "sst2", "--batch-size", "16", "--max-seq-len", "32",
                     "--selector", str(out), "--module", module, "--json"]) == 0
        picks[module] = json.loads(capsys.readouterr().out)
        assert picks[module]["module"]["name"] == module and picks[module]["module"]["trained_on"]
    assert picks[OTHER]["maxn"]["energy_per_sample_j"] > picks[AGX]["maxn"]["energy_per_sample_j"]
    assert main(["select", "--model", "bert-tiny", "--task", "sst2", "--batch-size", "16", "--max-seq-len", "32",
                 "--selector", str(out), "--module", OTHER]) == 0
    assert f"Module:    {OTHER} (trained on it; learnt across 2" in capsys.readouterr().out
    assert main(["select", "--model", "bert-tiny", "--task", "sst2", "--selector", str(out), "--module", "X"]) != 0
    assert "not 'X'" in capsys.readouterr().err
    # per module (the default): the feature schema of every selector before this one
    per = tmp_path / "data" / "selectors" / "per.joblib"
    assert main([*common, "--module", OTHER, "--out", str(per)]) == 0
    trained = json.loads(capsys.readouterr().out)
    assert "across_modules" not in trained["training"] and trained["basis"]["modules"] == [OTHER]
    assert load_selector(per).modules == (OTHER,)
    # a per-module selector learnt one module: another --module is refused (a board's is chosen with --twin), its own accepted
    assert main(["select", "--model", "bert-tiny", "--task", "sst2", "--selector", str(per), "--module", AGX]) != 0
    assert "learnt P3767-0000" in capsys.readouterr().err
    assert main(["select", "--model", "bert-tiny", "--task", "sst2", "--selector", str(per), "--module", OTHER]) == 0


# --------------------------------------------------------------------------- what the CLI and reports say
def test_show_runs_and_report_say_which_board(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from engine.cli import main
    from engine.results.report import write_report

    db = tmp_path / "r.sqlite"
    a = DeviceRecord(BOARD, AGX, "36.4.0", serial="A")
    b = DeviceRecord(BOARD, AGX, "36.4.0", serial="B")
    with Store(db) as store:
        maxn_a = _run(store, a, "maxn", 100.0)
        run_b = _run(store, b, "online", 80.0)
        store.compare_runs(run_b, maxn_a)
        md = write_report(store, run_b, out_dir=tmp_path / "rep").markdown.read_text()
    assert f"{AGX} #B L4T 36.4.0" in md and "another board of the module (serial A)" in md
    assert main(["show", str(run_b), "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert f"{AGX} #B [board] L4T 36.4.0" in out and "(all, other board (#A))" in out
    assert main(["runs", "--db", str(db)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[-1] == "board" and lines[1].endswith("#B L4T 36.4.0")


# --------------------------------------------------------------------------- the TUI
def test_the_compare_view_labels_another_board_and_refuses_another_module(tmp_path: Path) -> None:
    from tui.compare_model import build_comparison

    a = DeviceRecord(BOARD, AGX, "36.4.0", serial="A")
    b = DeviceRecord(BOARD, AGX, "36.4.0", serial="B")
    nx = DeviceRecord("NVIDIA Jetson Orin NX", OTHER, "36.4.0", serial="C")
    with Store(tmp_path / "r.sqlite") as store:
        base = store.get_run(_run(store, a, "maxn", 100.0))
        mine = store.get_run(_run(store, b, "online", 80.0))
        theirs = store.get_run(_run(store, nx, "online", 50.0))
    view = build_comparison(mine, base)
    assert view.saving_pct == pytest.approx(20.0) and f"MAXN run {base.id} ran on other board (#A)" in view.notes
    refused = build_comparison(theirs, base)
    assert refused.base is None and refused.saving_pct is None
    assert any("different modules never compare" in n for n in refused.notes)


async def test_history_names_the_board_of_a_run_when_the_store_has_several(twin_session, results_store) -> None:
    from tui_helpers import drive, make_app

    a = DeviceRecord(BOARD, AGX, "36.4.0", serial="A")
    b = DeviceRecord(BOARD, AGX, "36.4.0", serial="B")
    _run(results_store, a, "maxn", 100.0)
    newest = _run(results_store, b, "online", 80.0)
    app = make_app(twin_session, store=results_store)
    async with drive(app, size=(100, 30)) as ui:
        await ui.press("5")
        await ui.settle()
        status = str(app.screen.query_one("#history-status").render())
        assert f"run {newest}: {AGX} #B L4T 36.4.0" in status
        await ui.press("down")
        await ui.settle()
        assert "#A" in str(app.screen.query_one("#history-status").render())
        await ui.press("q")


def test_an_imported_sweep_records_the_serial_given(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from engine.cli import main

    db = tmp_path / "r.sqlite"
    example = Path(__file__).resolve().parent.parent / "docs" / "examples" / "measured-sweep.csv"
    assert main(["import-sweep", str(example), "--db", str(db), "--serial", "1422921012345", "--json"]) == 0
    capsys.readouterr()
    with Store(db) as store:
        (sweep,) = store.list_sweeps()
        assert store.get_device(sweep.device_id).serial == "1422921012345"
