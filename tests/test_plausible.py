"""Implausible figures are never stored or summed silently (issue 20): the ranges of
engine.core.plausible, from the board's profile, over imported sweeps, tegrastats logs, the rail
sensors `device` and `monitor` read, and CPU clusters without cpufreq. Through the CLI as a user
types it, and at the checks."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from engine.cli import main
from engine.core.plausible import BoardLimits, log_gap_s
from engine.device.twin.profile import load_profile
from engine.results.store import Store

PROFILE = load_profile("agx-orin-64gb")
LIMITS = PROFILE.limits
HEADER = "model,task,rails,samples,gpu_mhz,time_s,energy_j\n"


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "results.sqlite"
    monkeypatch.setenv("SLM_DVFS_DB", str(path))
    return path


def _csv(tmp_path: Path, *rows: str, header: str = HEADER) -> str:
    path = tmp_path / "m.csv"
    path.write_text(header + "".join(r + "\n" for r in rows))
    return str(path)


def _stored(db: Path) -> int:
    if not db.exists():
        return 0
    with Store(db) as s:
        return len(s.list_sweeps())


# --------------------------------------------------------------------------- the ranges
def test_the_limits_come_from_the_profile() -> None:
    assert LIMITS == BoardLimits(profile="agx-orin-64gb", power_limit_w=60.0, memory_mb=62841.0)
    assert LIMITS.max_power_w == 120.0
    assert LIMITS.power_problem(119.0, "p") is None and "above anything" in LIMITS.power_problem(121.0, "p")
    assert LIMITS.power_warning(70.0, "p") and LIMITS.power_warning(50.0, "p") is None
    assert LIMITS.energy_problem(2.5e12, None) and LIMITS.energy_problem(1e6, None) is None
    assert LIMITS.energy_problem(1000.0, 1.0) and LIMITS.energy_problem(1000.0, 100.0) is None
    assert LIMITS.rail_problem(4984, -17800) and LIMITS.rail_problem(4984, -20) is None  # offset: a step below 0
    assert LIMITS.rail_problem(4984, 480) is None and LIMITS.rail_problem(30_000, 10)
    assert LIMITS.memory_problem(62841, 2371) is None and LIMITS.memory_problem(131072, 10)
    assert LIMITS.memory_problem(100, 200)
    assert log_gap_s(1.0) == 60.0 and log_gap_s(10.0) == 100.0


# --------------------------------------------------------------------------- import-sweep
@pytest.mark.parametrize("row, column, message", [
    ("bert-tiny,sst2,gpu+cpu,640,612,,2.5e12", "energy_j", "more than agx-orin-64gb can draw in a week"),
    ("bert-tiny,sst2,gpu+cpu,640,612,10,1e6", "energy_j", "above anything agx-orin-64gb draws"),
    ("bert-tiny,sst2,gpu+cpu,640,612,1e7,100", "time_s", "over a week"),
    ("bert-tiny,sst2,gpu+cpu,2_5,612,10,100", "samples", "without separators"),
    ("bert-tiny,sst2,gpu+cpu,1e12,612,10,100", "samples", "more than any run has"),
])
def test_import_sweep_refuses_what_the_board_cannot_have_measured(row: str, column: str, message: str,
                                                                  tmp_path: Path, db: Path, capsys) -> None:
    assert main(["import-sweep", _csv(tmp_path, row)]) == 2
    err = capsys.readouterr().err
    assert f"line 2, column {column}" in err and message in err and "nothing was stored" in err
    assert _stored(db) == 0


def test_a_power_column_of_17000_w_is_refused(tmp_path: Path, db: Path, capsys) -> None:
    path = _csv(tmp_path, "bert-tiny,sst2,gpu+cpu,640,612,10,17000", header=HEADER.replace("energy_j", "power_w"))
    assert main(["import-sweep", path]) == 2
    err = capsys.readouterr().err
    assert "line 2, column power_w" in err and "power_w 17000 W is above anything agx-orin-64gb draws" in err


def test_a_power_above_the_limit_but_possible_is_stored_with_a_warning(tmp_path: Path, db: Path, capsys) -> None:
    path = _csv(tmp_path, "bert-tiny,sst2,gpu+cpu,640,612,10,800", "bert-tiny,sst2,gpu+cpu,640,816,10,300")
    assert main(["import-sweep", path]) == 0
    out = capsys.readouterr().out
    assert "warning: line 2: average power 80 W is above agx-orin-64gb's 60 W power limit" in out
    assert "line 3" not in out and _stored(db) == 1
    assert main(["import-sweep", path, "--replace", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["warnings"] == [
        "line 2: average power 80 W is above agx-orin-64gb's 60 W power limit (kept: possible for a short point, "
        "unusual as an average)"]


@pytest.mark.parametrize("column, cell, message", [
    ("max_seq_len", "99999999", "more than any run has"),
    ("max_seq_len", "4096", "more than bert-tiny takes (512 positions)"),
    ("batch_size", "2_5", "without separators"),
    ("batch_size", "5000000", "cannot have run on agx-orin-64gb"),
])
def test_a_workload_the_board_could_not_run_is_refused(column: str, cell: str, message: str, tmp_path: Path,
                                                       db: Path, capsys) -> None:
    path = _csv(tmp_path, f"bert-tiny,sst2,gpu+cpu,640,612,10,100,{cell}", header=HEADER.rstrip() + f",{column}\n")
    assert main(["import-sweep", path]) == 2
    err = capsys.readouterr().err
    assert "line 2" in err and message in err
    assert _stored(db) == 0


def test_a_row_whose_model_contradicts_the_files_workload_is_refused(tmp_path: Path, db: Path, capsys) -> None:
    path = tmp_path / "m.json"
    path.write_text(json.dumps({
        "workload": {"model": "bert-tiny", "task": "sst2", "samples": 8, "rails": "all", "batch_size": 16},
        "rows": [{"gpu_mhz": 612, "energy_j": 1.0}, {"gpu_mhz": 816, "energy_j": 2.0, "model": "pythia-70m"}]}))
    assert main(["import-sweep", str(path)]) == 2
    err = capsys.readouterr().err
    assert "row 2, column model: model is 'pythia-70m' here but the file's workload says 'bert-tiny'" in err
    # the same value written another way is no contradiction; a point's own samples still win
    path.write_text(json.dumps({
        "workload": {"model": "bert-tiny", "task": "sst2", "samples": 8, "rails": "all", "batch_size": 16},
        "rows": [{"gpu_mhz": 612, "energy_j": 1.0, "batch_size": "16.0", "task": "SST2"},
                 {"gpu_mhz": 816, "energy_j": 2.0, "samples": 16}]}))
    assert main(["import-sweep", str(path), "--dry-run"]) == 0


# --------------------------------------------------------------------------- tegrastats
def _tegra_line(stamp: str, gpu_mw: str = "5000", ram: str = "2048/62841") -> str:
    return f"{stamp} RAM {ram}MB CPU [1%@729] VDD_GPU_SOC {gpu_mw}mW/5000mW VDD_CPU_CV 800mW/800mW"


def test_tegrastats_lines_a_board_cannot_write_are_skipped_saying_why(tmp_path: Path, db: Path, capsys,
                                                                      caplog) -> None:
    lines = [_tegra_line(f"12-01-2025 10:00:{s:02d}") for s in range(6)]
    lines[2] = _tegra_line("12-01-2025 10:00:02", gpu_mw="99999999999999999999")
    lines[3] = _tegra_line("12-01-2025 10:00:03", gpu_mw="999999999")
    lines[4] = _tegra_line("12-01-2025 10:00:04", ram="2048/131072")
    log = tmp_path / "t.log"
    log.write_text("\n".join(lines) + "\n")
    assert main(["import-tegrastats", str(log), "--label", "x"]) == 0
    warnings = "\n".join(r.getMessage() for r in caplog.records)
    assert "t.log:3: skipped: a number of 20 digits" in warnings
    assert "t.log:4: skipped: implausible: rail VDD_GPU_SOC 1e+06 W is above anything agx-orin-64gb draws" in warnings
    assert "t.log:5: skipped: implausible: RAM total 131072 MB is more than agx-orin-64gb has" in warnings
    run_id = int(capsys.readouterr().out.split()[-1])
    with Store(db) as store:
        run = store.get_run(run_id)
    # three good lines over 5 s at 5.8 W: nothing of the absurd ones summed
    assert run.energy_j == pytest.approx(5.8 * 5) and "3 lines skipped" in run.notes


@pytest.mark.parametrize("second_date, message", [
    ("12-01-2035", "pass between line 3 and line 4, longer than any gap in one recording (60 s"),
    ("12-01-2015", "the dates go backwards at line 4"),
])
def test_a_tegrastats_log_of_two_recordings_is_refused(second_date: str, message: str, tmp_path: Path, db: Path,
                                                       capsys) -> None:
    lines = [_tegra_line(f"12-01-2025 10:00:{s:02d}") for s in range(3)]
    lines += [_tegra_line(f"{second_date} 10:00:{s:02d}") for s in range(3)]
    log = tmp_path / "t.log"
    log.write_text("\n".join(lines) + "\n")
    assert main(["import-tegrastats", str(log), "--label", "x", "--interval-ms", "1000"]) == 2
    err = capsys.readouterr().err
    assert message in err and "split the log at line 4" in err
    if db.exists():
        with Store(db) as store:
            assert not store.list_runs()  # nothing stored


def test_a_log_with_a_long_interval_keeps_gaps_of_that_interval(tmp_path: Path, db: Path) -> None:
    log = tmp_path / "t.log"
    log.write_text("\n".join(_tegra_line(f"12-01-2025 10:{m:02d}:00") for m in range(0, 50, 5)) + "\n")
    assert main(["import-tegrastats", str(log), "--label", "x"]) == 0  # every 5 min: its own interval, no gap


# --------------------------------------------------------------------------- rails
def _set_rail_current(root: Path, layout, rail: str, ma: int) -> None:
    (root / layout.rails[rail][1]).write_text(f"{ma}\n")


def test_device_flags_a_negative_rail_and_leaves_it_out_of_the_total(r36_tree, isolated_env, capsys) -> None:
    root, layout = r36_tree
    _set_rail_current(root, layout, "VDD_GPU_SOC", -17800)
    assert main(["device", "--sysfs-root", str(root)]) == 0
    out = capsys.readouterr().out
    assert "VDD_GPU_SOC" in out and "implausible" in out
    assert "(without VDD_GPU_SOC)" in out and "-8" not in out.split("total", 1)[1].splitlines()[0]
    assert "implausible VDD_GPU_SOC: negative current -17800 mA" in out
    assert main(["device", "--sysfs-root", str(root), "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    gpu = next(r for r in rep["rails"] if r["name"] == "VDD_GPU_SOC")
    assert "negative current" in gpu["implausible"]
    assert rep["total_power_mw"] == pytest.approx(sum(r["power_mw"] for r in rep["rails"] if r is not gpu))
    assert rep["total_power_mw"] > 0


def test_a_snapshot_totals_only_plausible_rails(r36_tree, isolated_env) -> None:
    """What every dashboard totals (the TUI's poll reads this snapshot too)."""
    from engine.device.jetson import JetsonDevice
    from engine.device.snapshot import take_snapshot

    root, layout = r36_tree
    _set_rail_current(root, layout, "VDDQ_VDD2_1V8AO", -2000)
    snap = take_snapshot(JetsonDevice(root))
    assert set(snap.implausible) == {"VDDQ_VDD2_1V8AO"}
    assert snap.total_power_mw == pytest.approx(sum(r.power_mw for r in snap.rails if r.name != "VDDQ_VDD2_1V8AO"))


def test_monitor_refuses_an_implausible_rail_instead_of_summing_it(r36_tree, isolated_env, capsys) -> None:
    root, layout = r36_tree
    _set_rail_current(root, layout, "VDD_CPU_CV", 9_000_000)  # 45 kW at 5 V
    assert main(["monitor", "--sysfs-root", str(root), "--seconds", "0.5"]) == 2
    captured = capsys.readouterr()
    assert "rail VDD_CPU_CV reads" in captured.err and "implausible" in captured.err
    assert "total" not in captured.out


def test_monitor_bridges_a_brief_implausible_reading_and_stops_on_a_lasting_one(r36_tree, isolated_env) -> None:
    """A glitch mid-run costs one skipped sample (the trapezoid joins its neighbours), not the run;
    a rail that stays implausible past the grace stops the monitor with the rail named."""
    from engine.core.errors import ImplausibleReadingError
    from engine.device.jetson import JetsonDevice
    from engine.device.monitor import IMPLAUSIBLE_GRACE_S, PowerMonitor
    from engine.device.power import DeviceRailSource

    root, layout = r36_tree
    now = [0.0]
    source = DeviceRailSource(JetsonDevice(root), clock=lambda: now[0])
    source.min_interval_s = 0.0
    monitor = PowerMonitor(source, rate_hz=10.0)
    good = open(root / layout.rails["VDD_CPU_CV"][1]).read()
    assert monitor.sample_once() is not None
    first = monitor.energy_j()
    _set_rail_current(root, layout, "VDD_CPU_CV", -5000)
    now[0] = 0.1
    assert monitor.sample_once() is None and monitor.skipped == 1  # bridged
    (root / layout.rails["VDD_CPU_CV"][1]).write_text(good)
    now[0] = 0.2
    assert monitor.sample_once() is not None
    gained = monitor.energy_j()["VDD_CPU_CV"] - first["VDD_CPU_CV"]
    assert gained == pytest.approx(monitor.latest().rails_mw["VDD_CPU_CV"] * 0.2 / 1000.0)  # no negative power summed
    _set_rail_current(root, layout, "VDD_CPU_CV", -5000)
    now[0] = 0.3
    assert monitor.sample_once() is None
    now[0] = 0.3 + IMPLAUSIBLE_GRACE_S + 0.1
    with pytest.raises(ImplausibleReadingError) as err:
        monitor.sample_once()
    assert err.value.rail == "VDD_CPU_CV" and "negative current" in err.value.what


# --------------------------------------------------------------------------- CPU clusters
def test_a_cluster_without_cpufreq_is_unknown_never_pinned(r36_tree, isolated_env, capsys) -> None:
    root, layout = r36_tree
    cpu = root / "sys/devices/system/cpu"
    for policy in ("policy0", "policy8"):  # the clusters that are there are pinned...
        top = (cpu / "cpufreq" / policy / "scaling_max_freq").read_text()
        (cpu / "cpufreq" / policy / "scaling_min_freq").write_text(top)
    shutil.rmtree(cpu / "cpufreq" / "policy4")  # ...and cpu4-7's cpufreq folder is missing
    for n in range(4, 8):
        (cpu / f"cpu{n}" / "cpufreq").unlink()
    assert main(["device", "--sysfs-root", str(root)]) == 0
    out = capsys.readouterr().out
    cpu_line = next(line for line in out.splitlines() if line.startswith("  CPU "))
    assert "pinned" not in cpu_line
    assert "cpu4-7     unknown: no cpufreq policy covers them" in out
    assert "cpu0-3" in out and "cpu8-11" in out and "(pinned)" in out  # the known clusters say so, one by one
    assert main(["device", "--sysfs-root", str(root), "--json"]) == 0
    clocks = json.loads(capsys.readouterr().out)["clocks"]["cpu"]
    assert clocks["pinned"] is False
    assert [(c["label"], c["state"], c["pinned"]) for c in clocks["clusters"]] == [
        ("cpu0-3", "online", True), ("cpu4-7", "unknown", False), ("cpu8-11", "online", True)]


def test_an_offline_cluster_is_said_offline(r36_tree, isolated_env, capsys) -> None:
    root, _layout = r36_tree
    cpu = root / "sys/devices/system/cpu"
    for n in range(8, 12):
        (cpu / f"cpu{n}" / "online").write_text("0\n")
    assert main(["device", "--sysfs-root", str(root), "--json"]) == 0
    clusters = json.loads(capsys.readouterr().out)["clocks"]["cpu"]["clusters"]
    assert [(c["label"], c["state"]) for c in clusters] == [("cpu0-3", "online"), ("cpu4-7", "online"),
                                                             ("cpu8-11", "offline")]


def test_a_whole_board_of_like_clusters_prints_one_cpu_line(twin_session, capsys) -> None:
    assert main(["device", "--twin"]) == 0
    out = capsys.readouterr().out
    assert "cpu0-3" not in out  # nothing to tell apart: the one CPU line, as before

