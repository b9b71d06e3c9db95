"""`slm-dvfs calibrate` end to end on a results store of measured sweeps (synthetic: a perturbed
twin's figures with noise, written through the store API into a test's own data dir), what it
writes, `--twin <name>-calibrated` afterwards, and its refusals (nothing written on any)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from engine.cli import main
from engine.core.errors import ConfigError
from engine.device.setting import MAXN, DvfsSetting
from engine.device.twin.calibration import Observation, predict
from engine.device.twin.profile import load_profile, user_profiles_dir
from engine.device.twin.synthetic import gpu_sweep_settings, perturbed_profile, synthetic_sweep
from engine.results.records import DeviceRecord, SweepPoint, WorkloadRecord
from engine.results.store import Store, default_db_path
from engine.run.calibrate import _observations, _rails, parse_sweep_ids

SHIPPED = load_profile("agx-orin-64gb")
TRUTH = perturbed_profile(SHIPPED)
BOARD = DeviceRecord("NVIDIA Jetson AGX Orin Developer Kit", "P3701-0000", l4t="36.3.0", jetpack="6.0")
NANO = DeviceRecord("NVIDIA Jetson Orin Nano Developer Kit", "P3767-0005")
RAILS = ("VDD_GPU_SOC", "VDD_CPU_CV")
SMALL = ("bert-small", "sst2", 16, 64)
SMALL_QNLI = ("bert-small", "qnli", 16, 128)
STEPS = 5  # measured steps a point
FEW_PARAMS = "gpu.vf.knee_hz,gpu.capacitance_f,gpu.podgov_load_seen,rails.VDD_GPU_SOC.static_mw"


def _steps(model: str, task: str, batch: int, length: int):
    from engine.workload.resolve import resolve_workload
    from engine.workload.spec import WorkloadSpec

    return resolve_workload(WorkloadSpec(model, task, batch_size=batch, seq_len=length, padding="max_length"))


def store_sweep(store: Store, workload: tuple, *, device: DeviceRecord = BOARD, source: str = "measured",
                settings=None, repeats: int = 2) -> int:
    """A sweep "measured" on the perturbed twin (each repeat its own noise), stored as a board's."""
    w = _steps(*workload)
    sweep = store.find_or_create_sweep(device=device, workload=WorkloadRecord.from_workload(w),
                                       space={"space": "gpu", "rails": "gpu+cpu", "method": "run"},
                                       warmup_steps=1, steps=STEPS, repeats=repeats, source=source)
    n = w.batch_size * STEPS
    for r in range(repeats):
        for ob in synthetic_sweep(w.steps, TRUTH, sweep=str(sweep.id), settings=settings, noise=0.01, seed=r):
            assert ob.time_s_per_sample is not None
            store.add_point(SweepPoint(sweep.id, ob.setting.to_json(), r, ob.time_s_per_sample * n,
                                       ob.energy_j_per_sample * n, n))
    store.finish_sweep(sweep.id)
    return sweep.id


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_calibrate_end_to_end_then_use_the_calibrated_twin(isolated_env, capsys, tmp_path: Path) -> None:
    with Store(default_db_path()) as store:
        first = store_sweep(store, SMALL)
        store_sweep(store, SMALL_QNLI, settings=gpu_sweep_settings(TRUTH, steps=(0, 2, 4, 6, 8, 10)))
    # four of the numbers (a fit of all of them is the device layer's tests' business; this keeps it quick)
    code, out, err = _run(capsys, "calibrate", "--params", FEW_PARAMS)
    assert code == 0, err
    for text in ("[measured]", "[predicted]", "Leave-one-sweep-out", "energy MAPE", "time MAPE",
                 "gpu.vf.knee_hz", "Next: use it with --twin agx-orin-64gb-calibrated"):
        assert text in out, text
    folder = user_profiles_dir()
    assert sorted(p.name for p in folder.iterdir()) == ["agx-orin-64gb-calibrated-report.json",
                                                         "agx-orin-64gb-calibrated-report.md",
                                                         "agx-orin-64gb-calibrated.toml"]
    report = json.loads((folder / "agx-orin-64gb-calibrated-report.json").read_text())
    assert report["calibration"]["n_points"] == 12 + 7 and report["calibration"]["sweeps"] == ["s1", "s2"]
    assert report["calibration"]["energy_mape_pct"] < report["calibration"]["energy_mape_before_pct"]
    assert "| sweep |" in (folder / "agx-orin-64gb-calibrated-report.md").read_text()
    calibrated = load_profile("agx-orin-64gb-calibrated")
    # the calibrated twin through the CLI: its MAXN figure is the calibrated model's, not the shipped one's
    code, out, err = _run(capsys, "sweep", "--fast", "--twin", "agx-orin-64gb-calibrated", "--model", "bert-small",
                          "--task", "sst2", "--batch-size", "16", "--max-seq-len", "64", "--pad", "max",
                          "--loop", "lean",  # the board's sweeps trained (lean); a fast sweep is hf unless told
                          "--rails", "gpu+cpu", "--db", str(tmp_path / "twin.sqlite"), "--json")
    assert code == 0, err
    maxn = json.loads(out)["maxn"]["joules_per_sample"]["mean"]
    steps = _steps(*SMALL).steps
    want = predict(calibrated, [Observation("x", steps, MAXN, RAILS, 1.0)])[0].energy_j_per_sample
    shipped = predict(SHIPPED, [Observation("x", steps, MAXN, RAILS, 1.0)])[0].energy_j_per_sample
    assert maxn == pytest.approx(want, rel=1e-9) and abs(maxn / shipped - 1) > 0.01
    # predictions with no profile named rest on the calibration: select's interval names it
    code, out, err = _run(capsys, "select", "--model", "bert-small", "--task", "sst2")
    assert code == 0, err
    assert "twin ensemble of 32 agx-orin-64gb-calibrated profiles" in out
    # a second calibration: named, every uncertain number, one sweep, JSON
    code, out, err = _run(capsys, "calibrate", "--sweeps", f"s{first}", "--name", "mine", "--no-loso", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["profile"] == "mine" and data["next"] == "--twin mine"
    assert data["summary"].startswith("calibrated agx-orin-64gb to 1 measured sweep(s): energy MAPE ")
    # every uncertain number, MAXN's governor's both (the twin is continuous in them) and the host's
    assert [p["path"] for p in data["calibration"]["params"]] == [s.path for s in SHIPPED.uncertainty]
    assert isinstance(data["calibration"]["at_bounds"], list)
    assert data["calibration"]["leave_one_sweep_out"] == []
    assert load_profile("mine").base == "agx-orin-64gb"


def _nothing_written() -> bool:
    folder = user_profiles_dir()
    return not folder.exists() or not any(folder.iterdir())


def test_refusals_say_what_to_do_and_write_nothing(isolated_env, capsys) -> None:
    code, _out, err = _run(capsys, "calibrate")
    assert code == 2 and "no measured sweeps" in err and "import-sweep" in err and "slm-dvfs sweep" in err
    with Store(default_db_path()) as store:
        twin_sweep = store_sweep(store, SMALL, source="twin", repeats=1)
    code, _out, err = _run(capsys, "calibrate")
    assert code == 2 and "no measured sweeps" in err
    code, _out, err = _run(capsys, "calibrate", "--sweeps", str(twin_sweep))
    assert code == 2 and "not measured" in err
    code, _out, err = _run(capsys, "calibrate", "--sweeps", "s99")
    assert code == 2 and "no sweep s99" in err
    with Store(default_db_path()) as store:
        nano = store_sweep(store, SMALL, device=NANO, repeats=1)
        few = store_sweep(store, SMALL_QNLI, repeats=1, settings=(MAXN, DvfsSetting(gpu_hz=612000000, nvpmodel=0)))
    code, _out, err = _run(capsys, "calibrate", "--sweeps", f"s{nano}")
    assert code == 2 and "P3767-0005" in err and "--sweeps" in err
    code, _out, err = _run(capsys, "calibrate", "--sweeps", f"s{few}")
    assert code == 2 and "too few measured points" in err and "at least 6" in err
    with Store(default_db_path()) as store:
        good = store_sweep(store, SMALL, repeats=1)
    code, _out, err = _run(capsys, "calibrate", "--sweeps", f"s{good}", "--name", "agx-orin-64gb")
    assert code == 2 and "shipped profile's name" in err
    code, _out, err = _run(capsys, "calibrate", "--sweeps", f"s{good}", "--name", "../evil")
    assert code == 2 and "not a plain name" in err
    code, _out, err = _run(capsys, "calibrate", "--sweeps", f"s{good}", "--params", "gpu.sms")
    assert code == 2 and "no uncertainty for gpu.sms" in err
    code, _out, err = _run(capsys, "calibrate", "--sweeps", "x1")
    assert code == 2 and "not a sweep id" in err
    assert _nothing_written()


def test_stored_points_become_observations_energy_only_included() -> None:
    s612 = {"gpu_hz": 612000000, "cpu_hz": None, "emc_hz": None, "nvpmodel": 0}
    points = [SimpleNamespace(setting=s612, energy_j=10.0, time_s=2.0, samples=10, rail_energy_j={}),
              SimpleNamespace(setting=s612, energy_j=12.0, time_s=None, samples=10, rail_energy_j={}),
              SimpleNamespace(setting={"nvpmodel": 0}, energy_j=30.0, time_s=None, samples=20, rail_energy_j={})]
    obs = _observations("s1", object(), RAILS, points)
    assert [(o.setting, o.energy_j_per_sample, o.time_s_per_sample) for o in obs] == [
        (DvfsSetting(gpu_hz=612000000, nvpmodel=0), pytest.approx(1.1), pytest.approx(0.2)),  # the repeat with a time
        (MAXN, pytest.approx(1.5), None)]  # energy only


def test_rails_of_a_sweep_from_its_preset() -> None:
    pts = [SimpleNamespace(rail_energy_j={"VDD_CPU_CV": 1.0, "VDD_GPU_SOC": 2.0})]
    assert _rails("gpu+cpu", pts, SHIPPED, 1) == RAILS
    assert _rails("all", pts, SHIPPED, 1) == RAILS  # the rails the board reported, in the profile's order
    assert _rails("all", [SimpleNamespace(rail_energy_j={})], SHIPPED, 1) == SHIPPED.rail_names
    assert _rails("VDD_GPU_SOC", pts, SHIPPED, 1) == ("VDD_GPU_SOC",)
    with pytest.raises(ConfigError, match="VDD_SOMETHING"):
        _rails("VDD_GPU_SOC,VDD_SOMETHING", pts, SHIPPED, 1)


def test_sweep_ids_parse_with_or_without_the_s() -> None:
    assert parse_sweep_ids(["s3", "5", "s3,7"]) == (3, 5, 7)
    with pytest.raises(ConfigError, match="not a sweep id"):
        parse_sweep_ids(["r3"])


def test_import_then_calibrate_then_predict_from_files(isolated_env, capsys, tmp_path: Path) -> None:
    """The user's path with logs from elsewhere: CSV files (a perturbed twin's figures with noise, some
    rows energy-only) -> import-sweep -> calibrate -> a fast sweep on the calibrated twin, whose
    MAXN saving lies nearer the truth's than the shipped profile's."""
    rows = ["model,task,batch_size,max_seq_len,pad,rails,samples,gpu_mhz,setting,time_s,energy_j"]
    n = SMALL[2] * STEPS
    for model, task, batch, length in (SMALL, SMALL_QNLI):
        steps = _steps(model, task, batch, length).steps
        for ob in synthetic_sweep(steps, TRUTH, sweep=task, noise=0.01, energy_only=2):
            pinned = "" if ob.setting == MAXN else f"{ob.setting.gpu_hz / 1e6:g}"
            time_s = "" if ob.time_s_per_sample is None else f"{ob.time_s_per_sample * n:.6g}"
            rows.append(f"{model},{task},{batch},{length},max,gpu+cpu,{n},{pinned},"
                        f"{'maxn' if ob.setting == MAXN else ''},{time_s},{ob.energy_j_per_sample * n:.6g}")
    measured = tmp_path / "measured.csv"
    measured.write_text("\n".join(rows) + "\n")
    code, out, err = _run(capsys, "import-sweep", str(measured))
    assert code == 0, err
    assert "2 sweep(s) [measured]" in out and "2 energy-only" in out
    code, out, err = _run(capsys, "calibrate", "--sweeps", "s1,s2", "--params", FEW_PARAMS, "--json")
    assert code == 0, err
    report = json.loads(out)["calibration"]
    assert report["n_points"] == 2 * 12 and report["energy_mape_pct"] < report["energy_mape_before_pct"]

    def saving(twin: str) -> float:
        code, out, err = _run(capsys, "sweep", "--fast", "--twin", twin, "--model", "bert-small", "--task", "mrpc",
                              "--batch-size", "16", "--max-seq-len", "128", "--pad", "max", "--rails", "gpu+cpu",
                              "--db", str(tmp_path / f"{twin}.sqlite"), "--json")
        assert code == 0, err
        data = json.loads(out)
        return 1 - data["optimum"]["joules_per_sample"]["mean"] / data["maxn"]["joules_per_sample"]["mean"]

    held_out = _steps("bert-small", "mrpc", 16, 128).steps
    truth = {ob.setting: ob.energy_j_per_sample for ob in synthetic_sweep(held_out, TRUTH, sweep="t", noise=0.0)}
    true_saving = 1 - min(truth.values()) / truth[MAXN]
    assert abs(saving("agx-orin-64gb-calibrated") - true_saving) < abs(saving("agx-orin-64gb") - true_saving)



def _import_rows() -> list[str]:
    """A "measured" GPU sweep of bert-small on sst2 (the perturbed twin's figures), as import-sweep reads it."""
    n = SMALL[2] * STEPS
    rows = ["task,batch_size,max_seq_len,precision,pad,rails,samples,gpu_mhz,setting,time_s,energy_j"]
    for ob in synthetic_sweep(_steps(*SMALL).steps, TRUTH, sweep="s", noise=0.01):
        pinned = "" if ob.setting == MAXN else f"{ob.setting.gpu_hz / 1e6:g}"
        rows.append(f"sst2,16,64,fp32,max,gpu+cpu,{n},{pinned},{'maxn' if ob.setting == MAXN else ''},"
                    f"{ob.time_s_per_sample * n:.6g},{ob.energy_j_per_sample * n:.6g}")
    return rows


def _import_as(capsys, tmp_path: Path, rows: list[str], model: str, name: str) -> tuple[int, str, str]:
    measured = tmp_path / name
    measured.write_text("\n".join(rows) + "\n")
    return _run(capsys, "import-sweep", str(measured), "--model", model)


def test_a_config_files_model_is_kept_with_its_sweep_and_never_taken_for_the_zoos(isolated_env, capsys,
                                                                                 tmp_path: Path) -> None:
    """import-sweep --model path/to/bert-tiny.json keeps the file's model with the sweep (schema v11), and the
    zoo's bert-tiny of that shape is refused rather than filed with its points (the oracle would mix them)."""
    from engine.workload.models import resolve_model

    custom = tmp_path / "bert-tiny.json"  # the zoo's name as its stem, bert-small's architecture inside
    custom.write_text(json.dumps(dict(resolve_model("bert-small").config)))
    rows = _import_rows()
    code, out, err = _import_as(capsys, tmp_path, rows, str(custom), "a.csv")
    assert code == 0, err
    code, out, err = _run(capsys, "show", "s1", "--json")
    shown = json.loads(out)["workload"]
    assert shown["model"] == "bert-tiny" and shown["config"] == json.loads(custom.read_text())
    code, out, err = _import_as(capsys, tmp_path, rows[:1] + rows[:0:-1], "bert-tiny", "b.csv")
    assert code == 2 and "already holds results of another model named 'bert-tiny'" in err
    assert "hidden_size 128 vs 512" in err and "my-bert-tiny.json" in err
    code, out, err = _import_as(capsys, tmp_path, rows[:1] + rows[:0:-1], str(custom), "c.csv")
    assert code == 0, err  # the same model again is the same workload


def test_calibrate_rebuilds_a_model_imported_from_a_config_file_as_itself(isolated_env, capsys,
                                                                          tmp_path: Path) -> None:
    """calibrate rebuilds the model kept with the sweep (bert-small's architecture in bert-tiny.json), not the
    zoo's bert-tiny its stem names, after the file is gone: the twin's figures are those of bert-small."""
    from engine.workload.models import resolve_model

    custom = tmp_path / "bert-tiny.json"
    custom.write_text(json.dumps(dict(resolve_model("bert-small").config)))
    rows = _import_rows()
    assert _import_as(capsys, tmp_path, rows, "bert-small", "a.csv")[0] == 0
    assert _import_as(capsys, tmp_path, rows[:1] + rows[:0:-1], str(custom), "b.csv")[0] == 0
    custom.unlink()  # what calibrate rebuilds is in the store
    before = {}
    for sweep in ("s1", "s2"):
        code, out, err = _run(capsys, "calibrate", "--sweeps", sweep, "--params", FEW_PARAMS, "--name", f"c-{sweep}",
                              "--json")
        assert code == 0, err
        before[sweep] = json.loads(out)["calibration"]["energy_mape_before_pct"]
    assert before["s2"] == pytest.approx(before["s1"])  # one architecture, so the same twin figures
    from engine.selector.training import store_dataset  # what train-selector learns from: the same model

    with Store(default_db_path()) as store:
        ds = store_dataset(store, source="measured", rails="gpu+cpu")
    assert {(w.model, w.hidden, w.layers) for w in ds.workloads} == {("bert-small", 512, 4), ("bert-tiny", 512, 4)}


def test_a_store_from_before_model_definitions_checks_and_fills_them(isolated_env, capsys, tmp_path: Path) -> None:
    """A store upgraded from schema v10 holds its workloads without a config (NULL, before v11): the check was
    skipped, so a `bert-tiny.json` of another architecture was filed under the zoo's bert-tiny, and calibrate
    or select rebuilt the zoo's model for it. A zoo name stands for the zoo's model (what a row without its
    config is rebuilt as); a row's NULL config is filled the next time the workload is written."""
    import sqlite3

    from conftest import migrate
    from engine.workload.models import resolve_model

    db = default_db_path()
    db.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(db)
    migrate(conn, 10)
    for wid, model in ((1, "bert-tiny"), (2, "my-model")):  # as v10 wrote them: no config column yet
        conn.execute("INSERT INTO workloads (id, key, model, task, batch_size, seq_len, precision, mode, source, "
                     "created_at) VALUES (?, ?, ?, 'sst2', 16, 64, 'fp32', 'full', 'predicted', '2025-01-01')",
                     (wid, f"{model}|sst2|16|64|fp32|full", model))
    conn.execute("PRAGMA user_version = 10")
    conn.commit()
    conn.close()

    def config_of(wid: int) -> object:
        with Store(db) as store:
            return store.get_workload(wid).config

    custom = tmp_path / "bert-tiny.json"  # the zoo's name as its stem, bert-small's architecture inside
    custom.write_text(json.dumps(dict(resolve_model("bert-small").config)))
    rows = _import_rows()
    code, out, err = _import_as(capsys, tmp_path, rows, str(custom), "a.csv")
    assert code == 2 and "already holds results of another model named 'bert-tiny'" in err
    assert "hidden_size 512 vs 128" in err and config_of(1) is None  # refused, nothing written
    code, out, err = _import_as(capsys, tmp_path, rows, "bert-tiny", "b.csv")  # the zoo's: it is that model
    assert code == 0, err
    assert config_of(1) == resolve_model("bert-tiny").config  # filled in on this write
    # A name the zoo does not know: the first write that brings a definition records it; another is refused.
    mine = tmp_path / "my-model.json"
    mine.write_text(custom.read_text())
    code, out, err = _import_as(capsys, tmp_path, rows[:1] + rows[:0:-1], str(mine), "c.csv")  # other content
    assert code == 0, err
    assert config_of(2) == json.loads(custom.read_text())
    mine.write_text(json.dumps(dict(resolve_model("bert-tiny").config)))
    code, out, err = _import_as(capsys, tmp_path, rows[:1] + rows[2:] + rows[1:2], str(mine), "d.csv")
    assert code == 2 and "already holds results of another model named 'my-model'" in err


@pytest.mark.slow
def test_two_measured_sweeps_of_different_workloads_give_a_twin_that_predicts_a_third(isolated_env, capsys,
                                                                                      tmp_path: Path) -> None:
    """A user with two measured sweeps (a small model on short sentences, a BERT-base on pairs: a perturbed
    twin's figures with noise) imports them, calibrates every uncertain number, and the calibrated twin
    predicts a third workload's normalised energy curve and its optimum against the synthetic truth."""
    from engine.device.twin.calibration import sweep_error

    rows = ["model,task,batch_size,max_seq_len,pad,rails,samples,gpu_mhz,setting,time_s,energy_j"]
    n = 16 * STEPS
    for model, task, batch, length in (SMALL, ("bert-base-uncased", "qnli", 16, 128)):
        for ob in synthetic_sweep(_steps(model, task, batch, length).steps, TRUTH, sweep=task, noise=0.01):
            pinned = "" if ob.setting == MAXN else f"{ob.setting.gpu_hz / 1e6:g}"
            rows.append(f"{model},{task},{batch},{length},max,gpu+cpu,{n},{pinned},"
                        f"{'maxn' if ob.setting == MAXN else ''},{ob.time_s_per_sample * n:.6g},"
                        f"{ob.energy_j_per_sample * n:.6g}")
    measured = tmp_path / "measured.csv"
    measured.write_text("\n".join(rows) + "\n")
    code, out, err = _run(capsys, "import-sweep", str(measured))
    assert code == 0, err
    code, out, err = _run(capsys, "calibrate", "--sweeps", "s1,s2", "--no-loso", "--json")
    assert code == 0, err
    fitted = {p["path"] for p in json.loads(out)["calibration"]["params"]}
    assert fitted == {s.path for s in SHIPPED.uncertainty}  # the governor's and the host's among them
    third = _steps("distilbert-base-uncased", "rte", 16, 128).steps
    truth = synthetic_sweep(third, TRUTH, sweep="third", noise=0.0)
    after = sweep_error(load_profile("agx-orin-64gb-calibrated"), truth)
    before = sweep_error(SHIPPED, truth)
    assert after.curve_rmse_pct < 5.0 and after.curve_rmse_pct < before.curve_rmse_pct
    assert after.optimum_step_error is not None and after.optimum_step_error <= 1
    assert after.saving_error_pts is not None and before.saving_error_pts is not None
    assert abs(after.saving_error_pts) < abs(before.saving_error_pts)
