"""`slm-dvfs import-sweep`: measured sweeps from CSV or JSON files, checked against the board's tables,
stored whole or not at all; energy-only points (no time) all the way through show, report, the TUI's
heat map and the oracle."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from conftest import migrate
from engine.cli import main
from engine.core.errors import ConfigError
from engine.core.measurement import Measurement, TimeUnknownError
from engine.core.provenance import Source
from engine.device.setting import MAXN, DvfsSetting
from engine.device.twin.profile import load_profile
from engine.dvfs.objectives import Objective, parse_objective
from engine.results import migrations
from engine.results.imports.fields import BoardTables
from engine.results.store import DeviceRecord, Store, WorkloadRecord
from engine.results.imports.sweep_file import WorkloadFlags, read_sweep_file
from engine.results.store.sweep_tables import FinishedSweep
from engine.results.records import SweepPoint, setting_key
from engine.results.sweeps import stored_points, summarize_points
from engine.workload.spec import WorkloadSpec

EXAMPLE = Path(__file__).resolve().parent.parent / "docs" / "examples" / "measured-sweep.csv"
MHZ = 1_000_000
TABLES = BoardTables.from_profile(load_profile("agx-orin-64gb"))
FLAGS = WorkloadFlags(model="bert-tiny", task="sst2", samples=640, rails="gpu+cpu")


@pytest.fixture(autouse=True)
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "results.sqlite"
    monkeypatch.setenv("SLM_DVFS_DB", str(path))
    monkeypatch.chdir(tmp_path)
    return path


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def imported(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    assert main(["import-sweep", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def refused(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert main(["import-sweep", *args]) == 2
    return capsys.readouterr().err


def stored_sweeps(db: Path) -> int:
    if not db.exists():
        return 0
    with Store(db) as s:
        return len(s.list_sweeps())


# --------------------------------------------------------------------------- reading files
def test_csv_in_mhz_with_maxn_repeats_and_energy_only_rows(tmp_path: Path) -> None:
    path = write(tmp_path, "m.csv", "gpu_mhz,setting,time_s,energy_j\n"
                                    ",maxn,10.0,300\n"
                                    "612,,,200\n"         # energy only
                                    "612,,,210\n"         # its second repeat
                                    "1300,,8.0,290.0\n")  # 1300 MHz: the table's 1300.5
    f = read_sweep_file(path, TABLES, FLAGS)
    (sw,) = f.sweeps
    assert [(p.setting, p.repeat, p.time_s, p.energy_j) for p in sw.points] == [
        (MAXN, 0, 10.0, 300.0),
        (DvfsSetting(gpu_hz=612 * MHZ, nvpmodel=0), 0, None, 200.0),
        (DvfsSetting(gpu_hz=612 * MHZ, nvpmodel=0), 1, None, 210.0),
        (DvfsSetting(gpu_hz=1_300_500_000, nvpmodel=0), 0, 8.0, 290.0),
    ]
    assert (sw.settings, sw.repeats, sw.energy_only, sw.rails) == (3, 2, 2, "gpu+cpu")
    assert sw.rail_names == ("VDD_GPU_SOC", "VDD_CPU_CV")
    assert sw.workload.key == WorkloadSpec("bert-tiny", "sst2", padding="dynamic").key  # how the engine files sweeps


def test_json_in_hz_with_a_workload_object_power_and_numbered_repeats(tmp_path: Path) -> None:
    path = write(tmp_path, "m.json", json.dumps({
        "workload": {"model": "bert-tiny", "task": "SST-2", "batch_size": 16, "max_seq_len": 64, "pad": "max",
                     "samples": 160, "rails": "VDD_GPU_SOC+VDD_CPU_CV"},
        "rows": [{"gpu_hz": 816000000, "emc_hz": 3199000000, "power_w": 10.0, "time_s": 2.0, "repeat": 1},
                 {"gpu_hz": 816000000, "emc_hz": 3199000000, "energy_j": 21.0, "repeat": 0},
                 {"gpu_hz": 612000000, "mode": "MAXN", "energy_j": 15.0}],
    }))
    f = read_sweep_file(path, TABLES)
    (sw,) = f.sweeps
    assert f.kind == "json" and sw.rails == "gpu+cpu"  # named rails are the preset's: `run --rails gpu+cpu` finds it
    assert [(p.setting.gpu_hz, p.setting.emc_hz, p.repeat, p.energy_j, p.time_s, p.samples) for p in sw.points] == [
        (816 * MHZ, 3199 * MHZ, 1, 20.0, 2.0, 160), (816 * MHZ, 3199 * MHZ, 0, 21.0, None, 160),
        (612 * MHZ, None, 0, 15.0, None, 160)]
    assert sw.workload.key == WorkloadSpec("bert-tiny", "sst2", batch_size=16, seq_len=64, padding="max_length").key


def test_the_json_workload_object_may_hold_any_shared_column(tmp_path: Path) -> None:
    path = write(tmp_path, "m.json", json.dumps({
        "workload": {"model": "bert-tiny", "task": "sst2", "mode": "lora", "nvpmodel": 0, "samples": 8, "rails": "all"},
        "rows": [{"gpu_mhz": 612, "energy_j": 1.0}, {"gpu_mhz": 612, "energy_j": 2.0, "samples": 16}]}))
    (sw,) = read_sweep_file(path, TABLES).sweeps
    assert sw.workload.mode == "lora" and [p.samples for p in sw.points] == [8, 16]
    assert sw.workload.key == WorkloadSpec("bert-tiny", "sst2", mode="lora", padding="dynamic").key


def test_a_json_list_of_rows_and_a_mode_only_row(tmp_path: Path) -> None:
    path = write(tmp_path, "m.json", json.dumps([{"nvpmodel": "MODE_30W", "energy_j": 5}, {"mode": 1, "energy_j": 6}]))
    (sw,) = read_sweep_file(path, TABLES, FLAGS).sweeps
    assert [p.setting for p in sw.points] == [DvfsSetting(nvpmodel=2), DvfsSetting(nvpmodel=1)]


def test_several_workloads_and_rail_sets_become_one_sweep_each(tmp_path: Path) -> None:
    path = write(tmp_path, "m.csv", "model,task,rails,gpu_mhz,energy_j\n"
                                    "bert-tiny,sst2,gpu+cpu,612,1\n"
                                    "bert-mini,qnli,gpu+cpu,612,2\n"
                                    "bert-tiny,sst2,all,612,3\n"
                                    "bert-tiny,sst2,VDD_CPU_CV+vdd_gpu_soc,816,4\n")
    f = read_sweep_file(path, TABLES, WorkloadFlags(samples=10))
    assert [(sw.workload.model, sw.workload.task, sw.rails, len(sw.points)) for sw in f.sweeps] == [
        ("bert-tiny", "sst2", "gpu+cpu", 2), ("bert-mini", "qnli", "gpu+cpu", 1), ("bert-tiny", "sst2", "all", 1)]


@pytest.mark.parametrize("cell, message", [
    ("1300.7", "ambiguous|no GPU clock"),  # within 1 MHz of 1300.5 only: accepted below
    ("700", "has no GPU clock 700 MHz"),
    ("1250", "has no GPU clock 1250 MHz"),
])
def test_a_clock_the_board_lacks_is_refused_with_its_table(tmp_path: Path, cell: str, message: str) -> None:
    path = write(tmp_path, "m.csv", f"gpu_mhz,energy_j\n{cell},1\n")
    if cell == "1300.7":
        (sw,) = read_sweep_file(path, TABLES, FLAGS).sweeps
        assert sw.points[0].setting.gpu_hz == 1_300_500_000
        return
    with pytest.raises(ConfigError, match=message) as err:
        read_sweep_file(path, TABLES, FLAGS)
    assert "line 2, column gpu_mhz" in err.value.what and "612, 714, 816" in err.value.remedy


def test_mhz_in_an_hz_column_is_refused_with_a_hint(tmp_path: Path) -> None:
    path = write(tmp_path, "m.csv", "gpu_hz,energy_j\n816,1\n")
    with pytest.raises(ConfigError, match="no GPU clock 816 Hz") as err:
        read_sweep_file(path, TABLES, FLAGS)
    assert "_mhz column" in err.value.remedy


@pytest.mark.parametrize("rails, message", [("VDD_GPU_SOC+VDD_NOPE", "has no rail VDD_NOPE"), (None, "rails")])
def test_rails_must_be_named_and_the_boards(tmp_path: Path, rails: str | None, message: str) -> None:
    path = write(tmp_path, "m.csv", "gpu_mhz,energy_j\n612,1\n")
    with pytest.raises(ConfigError, match=message) as err:
        read_sweep_file(path, TABLES, WorkloadFlags(model="bert-tiny", task="sst2", samples=1, rails=rails))
    assert "nothing was stored" in err.value.remedy


@pytest.mark.parametrize("row, column, message", [
    ("612,,", "energy_j", "gives no energy"),
    ("612,abc,", "energy_j", "'abc' is not a number"),
    ("612,-3,", "energy_j", "must be positive"),
    ("612,,12", "time_s", "power_w alone gives no energy"),
    ("612,5,,maxn", "setting", "a maxn row pins nothing"),
    (",5,,turbo", "setting", "unknown setting 'turbo'"),
    (",5,,", None, "the row names no setting"),
])
def test_a_bad_row_names_its_line_and_column(tmp_path: Path, row: str, column: str | None, message: str) -> None:
    path = write(tmp_path, "m.csv", "gpu_mhz,energy_j,power_w,setting\n816,2,,\n" + row + "\n")
    with pytest.raises(ConfigError, match=message) as err:
        read_sweep_file(path, TABLES, FLAGS)
    assert f"{path}, line 3" + (f", column {column}" if column else "") in err.value.what


def test_a_clock_above_the_modes_cap_and_an_unknown_mode_are_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "m.csv", "gpu_mhz,mode,energy_j\n1300.5,MODE_15W,1\n")
    with pytest.raises(ConfigError, match="above power mode 1"):
        read_sweep_file(path, TABLES, FLAGS)
    path = write(tmp_path, "n.csv", "gpu_mhz,mode,energy_j\n612,7,1\n")
    with pytest.raises(ConfigError, match="no power mode '7'"):
        read_sweep_file(path, TABLES, FLAGS)


def test_a_repeat_given_twice_and_a_flag_a_column_contradicts_are_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "m.csv", "gpu_mhz,repeat,energy_j\n612,0,1\n612,0,2\n")
    with pytest.raises(ConfigError, match="repeat 0 is already given at line 2"):
        read_sweep_file(path, TABLES, FLAGS)
    path = write(tmp_path, "n.csv", "model,gpu_mhz,energy_j\nbert-mini,612,1\n")
    with pytest.raises(ConfigError, match="model is 'bert-mini' here but --model says 'bert-tiny'"):
        read_sweep_file(path, TABLES, FLAGS)


def test_a_model_or_task_it_cannot_resolve_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "m.csv", "gpu_mhz,energy_j\n612,1\n")
    with pytest.raises(ConfigError, match="column task"):
        read_sweep_file(path, TABLES, WorkloadFlags(model="bert-tiny", task="nope", samples=1, rails="all"))
    with pytest.raises(ConfigError, match="the workload's model is not given"):
        read_sweep_file(path, TABLES, WorkloadFlags(task="sst2", samples=1, rails="all"))


@pytest.mark.parametrize("content, message", [
    (b"\x89PNG\r\n\x1a\n\x00\x00", "not UTF-8|NUL"),
    (b"", "empty"),
    (b'{"rows": [1, 2', "not valid JSON"),
    (b'{"nope": []}', 'needs a "rows" list'),
    (b"gpu_mhz,energy_j\n", "no rows"),
    (b"gpu_mhz,energy_j\n612,1,9\n", "line 2 has 3 cells"),
])
def test_a_corrupt_file_is_refused(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / ("m.json" if content.startswith(b"{") else "m.csv")
    path.write_bytes(content)
    with pytest.raises(ConfigError, match=message):
        read_sweep_file(path, TABLES, FLAGS)


# --------------------------------------------------------------------------- storing
def test_the_example_file_imports_and_shows(capsys: pytest.CaptureFixture[str], db: Path) -> None:
    out = imported(capsys, str(EXAMPLE))
    (sw,) = out["sweeps"]
    assert (sw["points"], sw["settings"], sw["energy_only"], sw["rails"]) == (12, 12, 2, "gpu+cpu")
    assert sw["workload"] == WorkloadSpec("bert-tiny", "sst2", seq_len=128, padding="max_length").key
    assert main(["show", f"s{sw['sweep_id']}"]) == 0
    text = capsys.readouterr().out
    assert "imported from measured-sweep.csv" in text and "[measured]" in text
    line_714 = next(line for line in text.splitlines() if "GPU 714 " in line)
    assert "—" in line_714 and " 0 " not in line_714.split("mode 0")[1]  # the unknown time is never 0
    assert "optimum (energy per sample): GPU 612" in text
    assert main(["show", f"s{sw['sweep_id']}", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    p714 = next(p for p in shown["points"] if p["setting"]["gpu_hz"] == 714 * MHZ)
    assert p714["energy_only"] and p714["time_s"] is None and p714["seconds_per_sample"] is None
    assert shown["device"]["source"] == "measured" and shown["space"]["method"] == "import"


def test_the_store_holds_what_was_imported(capsys: pytest.CaptureFixture[str], db: Path, tmp_path: Path) -> None:
    path = write(tmp_path, "m.csv", "gpu_mhz,time_s,energy_j\n612,,200\n612,,220\n816,5.0,230\n")
    out = imported(capsys, str(path), "--model", "bert-tiny", "--task", "sst2", "--samples", "320",
                   "--rails", "VDD_GPU_SOC+VDD_CPU_CV", "--l4t", "36.3.0", "--label", "lab bench")
    sid = out["sweeps"][0]["sweep_id"]
    with Store(db) as s:
        sweep = s.get_sweep(sid)
        pts = s.sweep_points(sid)
        device = s.get_device(sweep.device_id)
    assert (sweep.source, sweep.status, sweep.label, sweep.repeats) == (Source.MEASURED, "finished", "lab bench", 2)
    assert sweep.space["rails"] == "gpu+cpu" and sweep.space["file"] == "m.csv" and len(sweep.space["sha256"]) == 64
    assert (device.board, device.l4t, device.is_twin) == ("NVIDIA Jetson AGX Orin Developer Kit", "36.3.0", False)
    assert [(p.repeat, p.time_s, p.energy_j, p.samples, p.avg_power_w) for p in pts] == [
        (0, None, 200.0, 320, None), (1, None, 220.0, 320, None), (0, 5.0, 230.0, 320, 46.0)]
    (s612, s816) = summarize_points(pts)
    assert s612.energy_only and s612.time_s is None and s612.power_w is None and s612.energy_j.mean == 210.0
    assert s612.measurement().time_s is None and s816.seconds_per_sample.mean == pytest.approx(5.0 / 320)


def test_a_bad_row_stores_nothing(capsys: pytest.CaptureFixture[str], db: Path, tmp_path: Path) -> None:
    path = write(tmp_path, "m.csv", "gpu_mhz,energy_j\n612,1\n816,2\n700,3\n")
    err = refused(capsys, str(path), "--model", "bert-tiny", "--task", "sst2", "--samples", "1", "--rails", "all")
    assert "line 4, column gpu_mhz" in err and "nothing was stored" in err
    assert stored_sweeps(db) == 0


def test_a_failure_while_storing_rolls_back_every_sweep(db: Path, tmp_path: Path) -> None:
    path = write(tmp_path, "m.csv", "model,task,gpu_mhz,energy_j\nbert-tiny,sst2,612,1\nbert-mini,sst2,612,2\n")
    f = read_sweep_file(path, TABLES, WorkloadFlags(samples=1, rails="all"))
    sweeps = f.finished_sweeps()
    twice = [sweeps[0], FinishedSweep(sweeps[1].workload, sweeps[1].space, list(sweeps[1].points) * 2, 1)]
    with Store(db) as s:
        with pytest.raises(Exception, match="already holds repeat 0"):
            s.add_finished_sweeps(DeviceRecord("b", "m"), twice)
        assert s.list_sweeps() == []  # the first sweep went too


def test_reimporting_a_file_is_refused_naming_the_sweep(capsys: pytest.CaptureFixture[str], db: Path) -> None:
    first = imported(capsys, str(EXAMPLE))["sweeps"][0]["sweep_id"]
    err = refused(capsys, str(EXAMPLE))
    assert f"imported before (the same content) as sweep s{first}" in err and "--replace" in err
    assert stored_sweeps(db) == 1
    again = imported(capsys, str(EXAMPLE), "--replace", "--label", "fixed")
    assert again["replaced"] == [first] and stored_sweeps(db) == 1
    with Store(db) as s:
        assert s.get_sweep(again["sweeps"][0]["sweep_id"]).label == "fixed"


def test_dry_run_stores_nothing(capsys: pytest.CaptureFixture[str], db: Path) -> None:
    assert main(["import-sweep", str(EXAMPLE), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "dry run: nothing was stored" in out and "12 points over 12 settings" in out
    assert not db.exists()


# --------------------------------------------------------------------------- the store's schema
def test_a_version_7_store_is_migrated_keeping_its_sweep_points(db: Path) -> None:
    conn = sqlite3.connect(db)
    migrate(conn, 7)
    key = setting_key({"gpu_hz": 612_000_000})
    conn.executescript(f"""
        INSERT INTO devices VALUES (1, 'Orin', 'P3701', NULL, NULL, NULL, 0, 'measured', '2025-01-01');
        INSERT INTO workloads (id, key, model, task, batch_size, seq_len, precision, mode, source, created_at)
            VALUES (1, 'bert-tiny|sst2|32|128|fp32|full', 'bert-tiny', 'sst2', 32, 128, 'fp32', 'full', 'predicted',
                    '2025-01-01');
        INSERT INTO sweeps VALUES (4, 1, 1, '{{"rails":"all"}}', 1, 5, 1, 'finished', 'measured', NULL, '2025-01-01', NULL);
        INSERT INTO sweep_points (id, sweep_id, setting, gpu_hz, repeat, time_s, energy_j, rail_energy_j, samples,
            source, created_at) VALUES (9, 4, '{key}', 612000000, 0, 2.5, 30.0, '{{}}', 80, 'measured',
            '2025-01-01');
        PRAGMA user_version = 7;
    """)
    conn.close()
    with Store(db) as s:
        assert s.schema_version() == migrations.SCHEMA_VERSION == 12  # through v8, v9, v10, v11 and v12
        (old,) = s.sweep_points(4)
        assert (old.id, old.time_s, old.energy_j, old.samples, old.device_id) == (9, 2.5, 30.0, 80, None)
        s.add_point(SweepPoint(4, {"gpu_hz": 816_000_000}, 0, time_s=None, energy_j=33.0, samples=80))
        assert [p.time_s for p in s.sweep_points(4)] == [2.5, None]
        with pytest.raises(Exception, match="already holds"):  # the unique (sweep, setting, repeat) survived
            s.add_point(SweepPoint(4, {"gpu_hz": 612_000_000}, 0, time_s=1.0, energy_j=1.0, samples=1))
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT name FROM sqlite_master WHERE name = 'sweep_points_clocks'").fetchone()
    assert conn.execute("PRAGMA foreign_key_check").fetchall() == []


# --------------------------------------------------------------------------- energy-only downstream
def test_energy_only_measurements_rank_by_energy_and_refuse_time_objectives() -> None:
    m = Measurement(None, 10.0, 5, source=Source.MEASURED)
    assert m.joules_per_sample == 2.0 and not m.has_time and m.to_json()["samples_per_s"] is None
    with pytest.raises(TimeUnknownError, match="energy-only"):
        _ = m.seconds_per_sample
    assert (m + Measurement(1.0, 1.0, 1, source=Source.MEASURED)).time_s is None
    points = [(MAXN, Measurement(None, 12.0, 4, source=Source.MEASURED)),
              (DvfsSetting(gpu_hz=612 * MHZ, nvpmodel=0), m)]
    assert Objective().best(points, None)[0] == DvfsSetting(gpu_hz=612 * MHZ, nvpmodel=0)
    for spec in ("edp", "energy@5%", "eta:0.5"):
        with pytest.raises(TimeUnknownError, match=f"objective {spec} weighs the time"):
            parse_objective(spec).best(points, None)


def test_report_and_heat_map_of_an_energy_only_sweep(capsys: pytest.CaptureFixture[str], db: Path,
                                                     tmp_path: Path) -> None:
    from engine.results.report import write_report
    from tui.sweep_model import from_store

    sid = imported(capsys, str(EXAMPLE))["sweeps"][0]["sweep_id"]
    with Store(db) as s:
        report = write_report(s, f"s{sid}", tmp_path / "rep")
        heat = from_store(s, sid)
    md = report.markdown.read_text()
    assert "imported from `measured-sweep.csv`" in md and "2 of the 12 settings are energy-only" in md
    row = next(line for line in md.splitlines() if line.startswith("| GPU 714 "))
    assert row.count("—") == 3  # ms/sample, W, samples/s
    assert len(report.figures) == 3 and all(p.exists() for p in report.figures)
    cell = heat.cells[("GPU 714", "gov")]
    assert cell.ms_per_sample is None and cell.mj_per_sample == pytest.approx(2597 / 640)
    assert heat.best == "GPU 612 · mode 0"


def test_an_all_energy_only_sweep_has_no_slowdown(capsys: pytest.CaptureFixture[str], db: Path,
                                                  tmp_path: Path) -> None:
    path = write(tmp_path, "m.csv", "setting,gpu_mhz,energy_j\nmaxn,,300\n,612,200\n")
    sid = imported(capsys, str(path), "--model", "bert-tiny", "--task", "sst2", "--samples", "10",
                   "--rails", "gpu+cpu")["sweeps"][0]["sweep_id"]
    assert main(["show", f"s{sid}"]) == 0
    text = capsys.readouterr().out
    assert "vs MAXN (mode 0): 33.3% less energy, time not recorded per sample" in text
    assert main(["report", f"s{sid}", "--out", str(tmp_path / "r")]) == 0
    assert "**33.3% less energy**, **time not recorded**" in (tmp_path / "r" / f"sweep-s{sid}.md").read_text()
    assert main(["report", f"s{sid}", "--out", str(tmp_path / "r"), "--objective", "edp"]) == 2
    assert "weighs the time per sample" in capsys.readouterr().err


def test_the_oracle_runs_on_energy_only_sweeps_by_energy_and_refuses_edp(
        isolated_env: object, twin_session: object, tmp_path: Path) -> None:
    """End to end on the twin: its sweep of energy-only points (as an import would store them) is the
    oracle's data; energy picks its least-energy setting, a time-weighing objective is refused up front."""
    from engine.run.experiment import ExperimentSpec, run_experiment

    spec = ExperimentSpec(WorkloadSpec("bert-tiny", "sst2"), policy="oracle", twin="agx-orin-64gb", simulate=True,
                          steps=2)
    identity = twin_session.device.identity()  # type: ignore[attr-defined]
    workload = WorkloadRecord("bert-tiny", "sst2", 32, 128, "fp32", padding=spec.workload.padding)
    assert workload.key == WorkloadSpec("bert-tiny", "sst2", padding=spec.workload.padding).key
    points = [SweepPoint(0, s.to_json(), 0, None, e, 64) for s, e in (
        (MAXN, 9.0), (DvfsSetting(gpu_hz=816 * MHZ, nvpmodel=0), 6.0), (DvfsSetting(gpu_hz=612 * MHZ, nvpmodel=0), 7.0))]
    with Store(tmp_path / "o.sqlite") as store:
        device_id = store.ensure_device(DeviceRecord.from_identity(identity))
        store.add_finished_sweeps(device_id, [FinishedSweep(workload, {"rails": "all"}, points, 1, Source.TWIN)])
        assert [m.time_s for _s, m in stored_points(store, device_id, store.ensure_workload(workload))] == [None] * 3
        result = run_experiment(spec, store=store, session=twin_session)
        assert result.run.setting == DvfsSetting(gpu_hz=816 * MHZ, nvpmodel=0)
        runs = len(store.list_runs())
        with pytest.raises(TimeUnknownError, match="objective edp weighs the time per sample, but 3 of the 3"):
            run_experiment(ExperimentSpec(**{**spec.__dict__, "objective": "edp"}), store=store, session=twin_session)
        assert len(store.list_runs()) == runs  # refused before any run started


async def test_the_tui_lists_and_opens_an_imported_sweep(twin_session: object, results_store: Store) -> None:
    from tui_helpers import drive, make_app, plain
    from tui.screens.sweep import SweepScreen

    f = read_sweep_file(EXAMPLE, TABLES)
    (sid,) = results_store.add_finished_sweeps(DeviceRecord(TABLES.board, TABLES.module), f.finished_sweeps())
    app = make_app(twin_session, store=results_store)
    async with drive(app, size=(100, 30)) as ui:
        await ui.press("5")
        sweeps = app.screen.query_one("#sweeps")
        assert sweeps.row_count == 1 and "import" in [str(c).strip() for c in sweeps.get_row_at(0)]
        sweeps.focus()
        await ui.settle()
        await ui.press("enter")
        assert isinstance(app.screen, SweepScreen)
        heat = plain(app.screen.query_one("#sweep-heat").content)
        assert "GPU 612" in heat and "★" in heat and "[measured]" in heat and "GPU 714" in heat
        assert f"sweep {sid}" in plain(app.screen.query_one("#sweep-summary").content)
        await ui.press("q")
