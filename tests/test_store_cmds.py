"""`slm-dvfs runs | show | export | import-tegrastats`, end to end as a user types them."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import pytest

from engine.cli import main
from engine.device.tegra_parse import import_log
from engine.device.power import PowerSample
from engine.core.stats import trapezoid_j
from engine.core.provenance import Source
from engine.results.store import DeviceRecord, Store, WorkloadRecord
from engine.results.totals import RunTotals

DATA = Path(__file__).parent / "data"
R35, R36 = DATA / "tegrastats_r35.log", DATA / "tegrastats_r36.log"


@pytest.fixture(autouse=True)
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "results.sqlite"
    monkeypatch.setenv("SLM_DVFS_DB", str(path))
    monkeypatch.chdir(tmp_path)
    return path


def _import(capsys: pytest.CaptureFixture[str], *args: str) -> int:
    assert main(["import-tegrastats", *args]) == 0
    return int(capsys.readouterr().out.strip())


def _twin_pair(db: Path) -> tuple[int, int]:
    """A MAXN baseline and a pinned run on the twin, compared."""
    twin = DeviceRecord("NVIDIA Jetson AGX Orin Developer Kit", "P3701-0005", "36.3.0", "6.0", "agx-orin-64gb", True)
    wl = WorkloadRecord("bert-mini", "qnli", 16, 256, "fp16")
    with Store(db) as s:
        base = s.start_run(policy="maxn", source="twin", device=twin, workload=wl, rails="gpu+cpu",
                           setting={"nvpmodel": 0})
        s.finish_run(base, RunTotals(time_s=100.0, energy_j=1000.0, samples=1600))
        run = s.start_run(policy="static", source="twin", device=twin, workload=wl, rails="gpu+cpu",
                          setting={"gpu_hz": 816_000_000, "emc_hz": 3_199_000_000, "nvpmodel": 0})
        s.finish_run(run, RunTotals(time_s=104.0, energy_j=850.0, samples=1600), metrics={"accuracy": 0.81})
        s.add_power_samples(run, [PowerSample(100.0 + k, {"VDD_GPU_SOC": 6000.0 + k, "VDD_CPU_CV": 2000.0})
                                  for k in range(5)])
        s.compare_runs(run, base)
    return base, run


@pytest.mark.parametrize("log", [R35, R36], ids=["r35", "r36"])
def test_import_tegrastats_makes_a_measured_run(capsys: pytest.CaptureFixture[str], log: Path) -> None:
    rid = _import(capsys, str(log), "--label", "bench A")
    assert main(["show", str(rid), "--json"]) == 0
    run = json.loads(capsys.readouterr().out)
    expected = import_log(log)
    assert (run["source"], run["policy"], run["status"], run["label"]) == ("measured", "imported", "finished", "bench A")
    assert run["energy_j"] == pytest.approx(expected.total_energy_j)
    assert run["rail_energy_j"] == pytest.approx(dict(expected.energy_j))
    assert run["time_s"] == pytest.approx(expected.duration_s)
    assert run["avg_power_w"] == pytest.approx(expected.avg_power_w)
    assert run["power_samples"] == len(expected.samples)
    assert run["started_at"] == expected.started_at.isoformat(timespec="seconds")
    assert run["device"]["is_twin"] is False and run["workload"] is None
    assert run["setting"] is None  # not known for a log


def test_import_with_a_zoo_model_and_a_rail_preset(capsys: pytest.CaptureFixture[str]) -> None:
    rid = _import(capsys, str(R35), "--label", "tiny", "--model", "bert-tiny", "--task", "sst2",
                  "--rails", "gpu+cpu", "--samples", "352", "--profile", "agx-orin-64gb", "--l4t", "35.4.1")
    assert main(["show", str(rid), "--json"]) == 0
    run = json.loads(capsys.readouterr().out)
    log = import_log(R35)
    gpu_cpu = log.energy_j["VDD_GPU_SOC"] + log.energy_j["VDD_CPU_CV"]
    assert run["energy_j"] == pytest.approx(gpu_cpu) and run["rails"] == "gpu+cpu"
    assert run["joules_per_sample"] == pytest.approx(gpu_cpu / 352)
    assert run["samples_per_s"] == pytest.approx(352 / log.duration_s)
    assert run["workload"]["key"] == "bert-tiny|sst2|32|128|fp32|full"  # shape from the zoo entry
    assert run["device"]["profile"] == "agx-orin-64gb" and run["device"]["l4t"] == "35.4.1"


@pytest.mark.parametrize("args, message", [
    (["--model", "bert-tiny"], "--model needs --task"),
    (["--model", "my-own-bert", "--task", "sst2"], "add --batch-size, --seq-len and --precision"),
    (["--rails", "VDD_NOPE"], "VDD_NOPE not reported"),
])
def test_import_refuses_incomplete_options(capsys: pytest.CaptureFixture[str], db: Path, args: list[str],
                                           message: str) -> None:
    assert main(["import-tegrastats", str(R35), "--label", "x", *args]) == 2
    assert message in capsys.readouterr().err
    if db.exists():
        with Store(db) as s:
            assert s.list_runs() == []  # nothing half-imported


def test_import_of_a_file_that_is_not_a_log(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    bad = tmp_path / "notes.txt"
    bad.write_text("hello\nworld\n")
    assert main(["import-tegrastats", str(bad), "--label", "x"]) == 2
    assert "holds no tegrastats line" in capsys.readouterr().err


def test_runs_lists_a_table_labelled_by_source(capsys: pytest.CaptureFixture[str], db: Path) -> None:
    base, run = _twin_pair(db)
    imported = _import(capsys, str(R35), "--label", "board", "--model", "bert-tiny", "--task", "sst2")
    assert main(["runs"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["id", "when", "model", "task", "policy", "setting", "energy", "J", "time", "s",
                                "source", "status"]
    assert [int(line.split()[0]) for line in lines[1:]] == [imported, run, base]  # newest first
    assert "GPU 816 EMC 3199 MHz m0" in lines[2] and "850.0" in lines[2] and "104.0" in lines[2]
    assert lines[2].split()[-2:] == ["twin", "finished"]
    assert lines[1].split()[-2:] == ["measured", "finished"] and "imported" in lines[1]
    assert "governor m0" in lines[3]

    assert main(["runs", "--source", "twin", "--policy", "static", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [r["id"] for r in listed] == [run] and listed[0]["source"] == "twin"
    assert main(["runs", "--model", "bert-tiny", "--task", "sst2", "--json"]) == 0
    assert [r["id"] for r in json.loads(capsys.readouterr().out)] == [imported]
    assert main(["runs", "--limit", "1", "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)) == 1
    assert main(["runs", "--model", "pythia-70m"]) == 0
    assert "no runs match" in capsys.readouterr().out


def test_runs_without_a_database_creates_nothing(capsys: pytest.CaptureFixture[str], db: Path) -> None:
    assert main(["runs"]) == 0
    assert "no runs stored yet" in capsys.readouterr().out
    assert not db.exists()


def test_db_flag_wins_over_the_environment(capsys: pytest.CaptureFixture[str], tmp_path: Path, db: Path) -> None:
    other = tmp_path / "other.sqlite"
    rid = _import(capsys, str(R36), "--label", "x", "--db", str(other))
    assert other.exists() and not db.exists()
    assert main(["show", str(rid), "--db", str(other), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["label"] == "x"


def test_show_tells_everything_with_its_comparison(capsys: pytest.CaptureFixture[str], db: Path) -> None:
    base, run = _twin_pair(db)
    assert main(["show", str(run)]) == 0
    out = capsys.readouterr().out
    assert f"Run {run}  [twin]  finished" in out
    assert "Figures [twin]" in out and "850.00 J over gpu+cpu" in out and "8.17 W" in out
    assert "bert-mini / qnli" in out and "GPU 816 EMC 3199 MHz m0" in out
    # stored without what the run learnt from: never shown as measured
    assert "accuracy     0.8100  meaning unknown (weights not recorded / data not recorded)" in out
    assert f"Comparison [twin] vs baseline run {base}: 15.0% less energy, 4.0% slower" in out
    assert "5 samples stored" in out
    assert main(["show", str(base), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["comparisons"][0]["saving_pct"] == pytest.approx(15.0)
    assert shown["comparisons"][0]["source"] == "twin"


@pytest.mark.parametrize(("weights", "synthetic", "label"), [
    ("random", True, "not meaningful (random weights / generated data)"),
    ("random", False, "not meaningful (random weights)"),
    ("pretrained", False, "[measured (host)]"),
])
def test_show_and_export_say_whether_the_eval_metric_means_anything(
        capsys: pytest.CaptureFixture[str], db: Path, tmp_path: Path, weights: str, synthetic: bool,
        label: str) -> None:
    twin = DeviceRecord("NVIDIA Jetson AGX Orin Developer Kit", "P3701-0005", "36.3.0", "6.0", "agx-orin-64gb", True)
    with Store(db) as s:
        rid = s.start_run(policy="maxn", source="twin", device=twin, workload=WorkloadRecord("bert-mini", "sst2", 16,
                                                                                             128, "fp32"))
        s.finish_run(rid, RunTotals(time_s=10.0, energy_j=100.0, samples=160), metrics={"accuracy": 1.0}, weights=weights, synthetic=synthetic, data_source="synthetic" if synthetic else "dir:/glue/SST-2")
    assert main(["show", str(rid)]) == 0
    assert f"accuracy     1.0000  {label}" in capsys.readouterr().out
    out = tmp_path / "run.csv"
    assert main(["export", str(rid), "--out", str(out)]) == 0
    meta = json.loads(next(line for line in out.read_text().splitlines()
                           if line.startswith("# metric_provenance: ")).split(": ", 1)[1])
    assert meta == {"weights": weights, "data": "generated" if synthetic else "real",
                    "meaningful": weights == "pretrained" and not synthetic}


@pytest.mark.parametrize("command", [["show", "99"], ["export", "99"], ["show", "99", "--json"]])
def test_unknown_ids_are_clear_errors(capsys: pytest.CaptureFixture[str], db: Path, command: list[str]) -> None:
    _twin_pair(db)
    assert main(command) == 2
    err = capsys.readouterr().err
    assert "no run with id 99" in err and "slm-dvfs runs" in err


def test_show_without_a_database_says_so(capsys: pytest.CaptureFixture[str], db: Path) -> None:
    assert main(["show", "1"]) == 2
    assert "no results database" in capsys.readouterr().err
    assert not db.exists()


def test_a_corrupt_database_is_reported_not_replaced(capsys: pytest.CaptureFixture[str], db: Path) -> None:
    db.write_bytes(b"this is not sqlite" * 500)
    for command in (["runs"], ["show", "1"], ["import-tegrastats", str(R35), "--label", "x"]):
        assert main(command) == 2
        err = capsys.readouterr().err
        assert str(db) in err and "move it aside" in err
    assert db.read_bytes() == b"this is not sqlite" * 500


def _read_csv(path: Path) -> tuple[dict[str, str], list[dict[str, str]]]:
    summary, body = {}, []
    for line in path.read_text().splitlines():
        if line.startswith("# ") and ": " in line:
            key, _, value = line[2:].partition(": ")
            summary[key] = value
        elif not line.startswith("#"):
            body.append(line)
    return summary, list(csv.DictReader(body))


def test_export_csv_has_the_trace_and_summary(capsys: pytest.CaptureFixture[str], db: Path) -> None:
    rid = _import(capsys, str(R35), "--label", "csv")
    assert main(["export", str(rid), "--format", "csv"]) == 0
    assert "12 power samples, measured" in capsys.readouterr().out
    summary, rows = _read_csv(Path(f"run-{rid}.csv"))
    log = import_log(R35)
    assert summary["source"] == "measured" and float(summary["energy_j"]) == pytest.approx(log.total_energy_j)
    assert len(rows) == len(log.samples) and {r["source"] for r in rows} == {"measured"}
    assert [float(r["t_s"]) for r in rows] == pytest.approx(list(log.times_s))
    for row, sample in zip(rows, log.samples):
        assert float(row["VDD_GPU_SOC_mw"]) == sample.rails["VDD_GPU_SOC"].instant_mw
        assert float(row["total_mw"]) == pytest.approx(sum(r.instant_mw for r in sample.rails.values()))
    energy = trapezoid_j([float(r["t_s"]) for r in rows], [float(r["total_mw"]) for r in rows])
    assert energy == pytest.approx(log.total_energy_j)


def test_export_csv_to_stdout(capsys: pytest.CaptureFixture[str], db: Path) -> None:
    _, run = _twin_pair(db)
    assert main(["export", str(run), "--out", "-"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"# slm-dvfs run {run}; figures are twin")
    assert "t_s,VDD_GPU_SOC_mw,VDD_CPU_CV_mw,total_mw,source\n0,6000,2000,8000,twin\n" in out


def test_export_parquet(capsys: pytest.CaptureFixture[str], tmp_path: Path, db: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    _, run = _twin_pair(db)
    out = tmp_path / "trace.parquet"
    assert main(["export", str(run), "--format", "parquet", "--out", str(out)]) == 0
    table = pq.read_table(out)
    assert table.column_names == ["t_s", "VDD_GPU_SOC_mw", "VDD_CPU_CV_mw", "total_mw", "source"]
    assert table.column("t_s").to_pylist() == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert table.column("total_mw").to_pylist() == [8000.0, 8001.0, 8002.0, 8003.0, 8004.0]
    summary = json.loads(table.schema.metadata[b"slm_dvfs.run"])
    assert summary["id"] == run and summary["energy_j"] == 850.0 and summary["source"] == Source.TWIN.value


def test_export_parquet_without_pyarrow_says_how_to_get_it(capsys: pytest.CaptureFixture[str], db: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    _, run = _twin_pair(db)
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # makes `import pyarrow` fail
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    assert main(["export", str(run), "--format", "parquet"]) == 2
    err = capsys.readouterr().err
    assert "pip install pyarrow" in err and "--format csv" in err
    assert not Path(f"run-{run}.parquet").exists()


@pytest.mark.parametrize("numpy", ["1.26.4", "2.4.6"])
def test_export_parquet_with_a_pyarrow_that_refuses_this_numpy_says_so(
        capsys: pytest.CaptureFixture[str], db: Path, monkeypatch: pytest.MonkeyPatch, numpy: str) -> None:
    """pyarrow 26 installed beside NumPy 1 (JetPack's PyTorch) is there but will not import: not "not
    installed", and under NumPy 1 the remedy is the numpy1 extra, not `pip install pyarrow`."""
    from refusals import PYARROW_UNDER_NUMPY1, refuse_import

    _, run = _twin_pair(db)
    refuse_import(monkeypatch, "pyarrow")
    monkeypatch.setattr("engine.core.optional.numpy_version", lambda: numpy)  # the tests run under either
    assert main(["export", str(run), "--format", "parquet"]) == 2
    err = capsys.readouterr().err
    assert f"parquet export needs pyarrow, which is installed but does not import here: {PYARROW_UNDER_NUMPY1}" in err
    assert "not installed" not in err and "Traceback" not in err
    if numpy.startswith("1."):
        assert f"NumPy {numpy} is installed" in err and "pip install -e '.[numpy1]'" in err
    else:
        assert "pip install --force-reinstall pyarrow" in err
    assert not Path(f"run-{run}.parquet").exists()


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_export_to_a_missing_folder_is_a_clear_error(capsys: pytest.CaptureFixture[str], tmp_path: Path, db: Path,
                                                     fmt: str) -> None:
    _, run = _twin_pair(db)
    missing = tmp_path / "nonexistent" / f"x.{fmt}"
    assert main(["export", str(run), "--format", fmt, "--out", str(missing)]) == 2
    err = capsys.readouterr().err
    assert f"the folder {missing.parent} does not exist" in err and "What to do:" in err
    assert "Traceback" not in err and not missing.parent.exists()
    assert main(["export", str(run), "--out", str(tmp_path)]) == 2  # a folder, not a file
    assert f"--out {tmp_path} is a folder" in capsys.readouterr().err


def test_export_that_cannot_write_is_a_clear_error(capsys: pytest.CaptureFixture[str], tmp_path: Path, db: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    _, run = _twin_pair(db)

    def refuse(self: Path, *args: object, **kwargs: object) -> None:
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "write_text", refuse)
    assert main(["export", str(run), "--out", str(tmp_path / "x.csv")]) == 2
    err = capsys.readouterr().err
    assert "cannot write" in err and "Permission denied" in err and "Traceback" not in err


def test_the_cli_and_the_app_export_through_the_results_api(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                            db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One export: `export --out -` prints what engine.results.export writes, and the TUI's
    export key (tui.actions.store) writes the same file through it, never through the CLI."""
    import ast

    import tui.actions.store as tui_store
    from engine.results.export import export_run

    _, run = _twin_pair(db)
    assert main(["export", str(run), "--out", "-"]) == 0
    printed = capsys.readouterr().out
    with Store(db) as s:
        rec, n = export_run(s, run, tmp_path / "api.csv")
    assert (rec.id, n) == (run, 5) and (tmp_path / "api.csv").read_text(encoding="utf-8") == printed

    class App(tui_store.StoreActions):  # the mixin alone, as the app uses it
        def __init__(self, store: Store) -> None:
            self._store, self.said = store, []  # the opened store, as AppState.store holds it

        def notify(self, message: str, **_kw: object) -> None:
            self.said.append(message)

    monkeypatch.setenv("SLM_DVFS_DATA_DIR", str(tmp_path / "data"))
    with Store(db) as s:
        out = App(s).export_run(run)
    assert out is not None and out.read_text(encoding="utf-8") == printed
    imported = {n.module for n in ast.walk(ast.parse(Path(tui_store.__file__).read_text()))
                if isinstance(n, ast.ImportFrom)}
    assert "engine.results.export" in imported and not any(m and m.startswith("engine.cli") for m in imported)
