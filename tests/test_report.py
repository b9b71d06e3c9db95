"""Reports: Markdown naming the optimum, PNG figures that hold a plot; and the CLI end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.cli import main
from engine.device.setting import MAXN, DvfsSetting
from engine.core.errors import ConfigError
from engine.device.power import PowerSample
from engine.core.provenance import Source
from engine.results.format import saving_text, slowdown_text
from engine.results.report import parse_report_id, write_report
from engine.results.store import DeviceRecord, Store, SweepPoint, WorkloadRecord
from engine.results.totals import RunTotals

MHZ = 1_000_000
PNG = b"\x89PNG\r\n\x1a\n"


pytestmark = pytest.mark.usefixtures("isolated_env")  # conftest: state, data and a module's trace cache in tmp


def assert_real_png(path: Path) -> None:
    from matplotlib.image import imread

    data = path.read_bytes()
    assert data.startswith(PNG) and len(data) > 10_000, path
    pixels = imread(path)
    assert pixels.shape[0] > 300 and pixels.shape[1] > 500
    assert pixels[..., :3].std() > 0.05  # not a blank canvas


def fill_sweep(store: Store) -> int:
    dev = store.ensure_device(DeviceRecord("Jetson AGX Orin", "P3701-0000 (AGX Orin 64GB)", profile="agx-orin-64gb",
                                           is_twin=True))
    wl = store.ensure_workload(WorkloadRecord("bert-base", "sst2", 16, 128, "fp16"))
    sweep = store.find_or_create_sweep(device=dev, workload=wl, space={"space": "gpu", "rails": "all"},
                                       warmup_steps=1, steps=5, repeats=3, source=Source.TWIN)
    # energy per sample is lowest at 816 MHz; MAXN costs 10 J/sample
    shape = {None: 10.0, 306: 11.0, 612: 8.6, 816: 8.0, 1020: 8.4, 1300: 10.0}
    for repeat, noise in enumerate((-0.2, 0.0, 0.3)):
        for mhz, jps in shape.items():
            setting = MAXN if mhz is None else DvfsSetting(gpu_hz=mhz * MHZ if mhz != 1300 else 1_300_500_000,
                                                            nvpmodel=0)
            time_s = 80.0 * (1300 / (mhz or 1300)) ** 0.5 * (1 + noise / 50)
            energy = (jps + noise) * 80
            store.add_point(SweepPoint(sweep.id, setting.to_json(), repeat, time_s, energy, 80,
                                       rail_energy_j={"VDD_GPU_SOC": energy * 0.6, "VDD_CPU_CV": energy * 0.4}))
    store.finish_sweep(sweep.id)
    return sweep.id


def test_report_ids() -> None:
    assert parse_report_id("s12") == ("sweep", 12)
    assert parse_report_id("12") == ("run", 12) == parse_report_id("r12")
    with pytest.raises(ConfigError, match="not a report id"):
        parse_report_id("sweep-12")


def test_sweep_report_names_the_optimum_and_draws_the_figures(tmp_path: Path) -> None:
    with Store(tmp_path / "db.sqlite") as store:
        sid = fill_sweep(store)
        report = write_report(store, f"s{sid}", tmp_path / "out")
    md = report.markdown.read_text()
    assert report.kind == "sweep" and len(report.figures) == 3
    for fig in report.figures:
        assert_real_png(fig)
        assert f"]({fig.name})" in md
    assert "The optimum for objective `energy` is **GPU 816 · CPU gov · EMC gov · mode 0**" in md
    assert "8.033 ± " in md  # mean J/sample at the optimum and its 95% interval (t, 2 dof)
    assert "**19.9% less energy**" in md and "[twin]" in md and "**twin**" in md
    assert md.count("(optimum)") == 1 and "(MAXN)" in md


@pytest.mark.parametrize(("weights", "synthetic", "metric_label"), [
    ("pretrained", False, "[measured (host)]"),  # the twin's runs train and evaluate on the host
    ("random", True, "not meaningful (random weights / generated data)"),
    ("pretrained", True, "not meaningful (generated data)"),
    (None, None, "meaning unknown (weights not recorded / data not recorded)"),  # a run stored before schema v5
])
def test_run_report_with_comparison_bars_and_power_trace(tmp_path: Path, weights: str | None,
                                                         synthetic: bool | None, metric_label: str) -> None:
    with Store(tmp_path / "db.sqlite") as store:
        dev = store.ensure_device(DeviceRecord("Jetson AGX Orin", "P3701-0000 (AGX Orin 64GB)", is_twin=True))
        wl = store.ensure_workload(WorkloadRecord("bert-base", "sst2", 16, 128, "fp16"))
        ids = []
        for policy, energy, time_s, gpu in (("online", 80.0, 12.0, 816 * MHZ), ("maxn", 100.0, 10.0, None)):
            rid = store.start_run(policy=policy, source=Source.TWIN, device=dev, workload=wl, seed=0, steps=10,
                                  rails="all")
            store.finish_run(rid, RunTotals(time_s=time_s, energy_j=energy, samples=160, rail_energy_j={"VDD_GPU_SOC": energy * 0.7, "VDD_CPU_CV": energy * 0.3}), metrics={"accuracy": 0.9}, setting={"gpu_hz": gpu, "nvpmodel": 0}, weights=weights, synthetic=synthetic)
            store.add_power_samples(rid, [PowerSample(t * 0.5, {"VDD_GPU_SOC": 5000.0 + 100 * (t % 7),
                                                                "VDD_CPU_CV": 2000.0}) for t in range(40)])
            ids.append(rid)
        store.compare_runs(ids[0], ids[1])
        report = write_report(store, str(ids[0]), tmp_path / "out")
    md = report.markdown.read_text()
    assert len(report.figures) == 2
    for fig in report.figures:
        assert_real_png(fig)
    assert "**20.0% less energy**, **20.0% slower** [twin]" in md
    assert "GPU 816 · CPU gov · EMC gov · mode 0" in md and f"| accuracy (eval) {metric_label} | 0.9000 | 0.9000 |" in md
    assert "| figure [twin] |" in md  # the energy figures keep their source


def test_cli_sweep_run_and_report_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "db.sqlite")
    common = ["--model", "bert-tiny", "--task", "sst2", "--batch-size", "8", "--max-seq-len", "32",
              "--twin", "agx-orin-64gb", "--db", db, "--json"]
    assert main(["sweep", *common, "--fast", "--steps", "3"]) == 0
    sweep = json.loads(capsys.readouterr().out)
    assert sweep["source"] == "twin" and len(sweep["points"]) == 12 and sweep["optimum_saving_vs_maxn_pct"] > 0
    assert main(["run", *common, "--simulate", "--policy", "oracle", "--compare", "maxn", "--steps", "20"]) == 0
    run = json.loads(capsys.readouterr().out)
    assert run["simulated"] and run["run"]["source"] == "twin" and run["run"]["metric"] is None
    assert run["run"]["setting"]["gpu_hz"] == sweep["optimum"]["setting"]["gpu_hz"]
    assert run["comparison"]["saving_pct"] == pytest.approx(sweep["optimum_saving_vs_maxn_pct"], rel=1e-9)
    assert run["energy_rails"]["preset"] == "all" and len(run["energy_rails"]["rails"]) == 4
    # text output labels every figure
    assert main(["run", *common[:-1], "--simulate", "--policy", "maxn", "--steps", "5"]) == 0
    text = capsys.readouterr().out
    assert "energy total over rails: all" in text and "none (simulated)" in text
    assert all(line.endswith("[twin]") for line in text.splitlines() if line.startswith(("time (s)", "energy (J)")))
    out = tmp_path / "report"
    assert main(["report", f"s{sweep['sweep_id']}", "--out", str(out), "--db", db]) == 0
    assert main(["report", str(run["run"]["run_id"]), "--out", str(out), "--db", db]) == 0
    assert (out / f"sweep-s{sweep['sweep_id']}.md").is_file() and (out / f"run-{run['run']['run_id']}-rails.png").is_file()
    assert main(["report", "s99", "--out", str(out), "--db", db]) == 2  # unknown sweep: a clear error
    assert "no sweep with id 99" in capsys.readouterr().err


def test_the_sweep_report_ranks_by_the_callers_objective(tmp_path: Path) -> None:
    """results sits below dvfs: the caller parses the objective; the optimum and its saving
    against MAXN are engine.results' (the sweep result and the TUI's heat map use the same)."""
    import ast

    import engine.results.report as report_module
    from engine.dvfs.objectives import parse_objective
    from engine.results.compare import optimum_vs_maxn
    from engine.results.sweeps import maxn_of, optimum, summarize_points

    objective = parse_objective("energy@5%")
    with Store(tmp_path / "db.sqlite") as store:
        sid = fill_sweep(store)
        summaries = summarize_points(store.sweep_points(sid))
        report = write_report(store, f"s{sid}", tmp_path / "out", objective=objective)
    best = optimum(summaries, objective)
    assert best is not None and best.setting != optimum(summaries).setting  # the slowdown cap moved it
    vs = optimum_vs_maxn(best, maxn_of(summaries))
    md = report.markdown.read_text()
    assert f"The optimum for objective `energy@5%` is **{best.setting.label()}**" in md
    assert (f"**{saving_text(vs.saving_pct, than=None)}**, **{slowdown_text(vs.slowdown_pct, than=None)}** [twin]"
            in md)
    imported = {n.module for n in ast.walk(ast.parse(Path(report_module.__file__).read_text()))
                if isinstance(n, ast.ImportFrom)}
    assert not any(m and m.startswith("engine.dvfs") for m in imported)


def test_a_report_without_out_goes_to_the_data_dir_and_says_where(
        tmp_path: Path, isolated_env: object, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Not into the current folder (the repo root, leaving untracked files): DATA_DIR/reports."""
    db = tmp_path / "db.sqlite"
    with Store(db) as store:
        sid = fill_sweep(store)
    here = tmp_path / "cwd"
    here.mkdir()
    monkeypatch.chdir(here)
    assert main(["report", f"s{sid}", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    # A --db other than the default gets its own folder: two stores' s1 do not collide.
    reports = isolated_env.data_dir / "reports" / "db"  # type: ignore[attr-defined]
    md = reports / f"sweep-s{sid}.md"
    assert md.is_file() and f"wrote {md}" in out
    assert list(here.iterdir()) == []
    monkeypatch.setenv("SLM_DVFS_DB", str(db))  # the default store: DATA_DIR/reports itself
    assert main(["report", f"s{sid}"]) == 0
    assert (isolated_env.data_dir / "reports" / f"sweep-s{sid}.md").is_file()  # type: ignore[attr-defined]
