"""`slm-dvfs compare N [BASELINE]`, the report and the baseline lookup: one check of comparability
(engine.results.compare.mismatch), a workload's own MAXN run found by the store's one workload key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import IsolatedEnv
from engine.cli import main
from engine.results.store import DeviceRecord, Store, WorkloadRecord
from engine.workload.lora import LoraSettings
from engine.results.totals import RunTotals

TWIN = DeviceRecord("NVIDIA Jetson AGX Orin Developer Kit", "P3701-0005 (AGX Orin 64GB)", "36.3.0", "6.0",
                    "agx-orin-64gb", is_twin=True)
PYTHIA = WorkloadRecord("pythia-70m", "mrpc", 16, 128, "fp16")
TINY = WorkloadRecord("bert-tiny", "sst2", 32, 128, "fp32")
TINY_DYNAMIC = WorkloadRecord("bert-tiny", "sst2", 32, 128, "fp32", padding="dynamic")
TINY_LORA = WorkloadRecord("bert-tiny", "sst2", 32, 128, "fp32", mode="lora", lora=LoraSettings(rank=4))


@pytest.fixture
def db(isolated_env: IsolatedEnv) -> Path:
    return isolated_env.data_dir / "results.sqlite"


def _run(store: Store, workload: WorkloadRecord, policy: str, energy_j: float, *, time_s: float = 10.0,
         samples: int = 1600, steps: int = 100) -> int:
    rid = store.start_run(policy=policy, source="twin", device=TWIN, workload=workload, rails="all", seed=0,
                          steps=steps, simulated=True)
    store.finish_run(rid, RunTotals(time_s=time_s, energy_j=energy_j, rail_energy_j={"VDD_GPU_SOC": energy_j}, samples=samples, steps=steps))
    return rid


def test_compare_refuses_two_workloads_and_names_both(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with Store(db) as s:
        pythia = _run(s, PYTHIA, "static", 214.0)
        tiny_maxn = _run(s, TINY, "maxn", 10.0)  # the case: it said "saving -2139.4%"
    for extra in ([], ["--json"]):
        assert main(["compare", str(pythia), str(tiny_maxn), *extra]) == 2
        captured = capsys.readouterr()
        assert captured.out == "" and "Traceback" not in captured.err
        assert (f"run {pythia} fine-tuned pythia-70m/mrpc (batch 16, length 128, fp16, full) but run {tiny_maxn} "
                f"bert-tiny/sst2 (batch 32, length 128, fp32, full)") in captured.err
        assert "a MAXN run of its own workload" in captured.err and "--model pythia-70m --task mrpc" in captured.err
    with Store(db) as s:  # the store's comparison applies the same check
        from engine.core.errors import ConfigError

        with pytest.raises(ConfigError, match="a saving between two workloads"):
            s.compare_runs(pythia, tiny_maxn)


def test_compare_names_each_runs_workload_and_compares_per_sample(db: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    with Store(db) as s:
        maxn = _run(s, TINY, "maxn", 100.0, samples=800, steps=50, time_s=5.0)
        run = _run(s, TINY, "static", 170.0, samples=1600, time_s=12.0)
    assert main(["compare", str(run)]) == 0  # the baseline found as the Compare page finds it
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].startswith(f"run       run {run}") and "bert-tiny/sst2 (batch 32, length 128, fp32, full)" in lines[0]
    assert lines[1].startswith(f"baseline  run {maxn}") and "bert-tiny/sst2 (batch 32, length 128, fp32, full)" in lines[1]
    # 1600 samples against 800: per sample, 0.10625 J against 0.125 J
    assert "vs MAXN: 15.0% less energy, 20.0% slower per sample  [twin]" in out
    assert f"note: run {run} trained 1600 samples, MAXN run {maxn} 800: saving and slowdown are per sample" in out
    assert main(["compare", str(run), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["run"]["workload"]["label"] == data["baseline"]["workload"]["label"] == TINY.label
    assert data["per_sample"] and data["saving_pct"] == pytest.approx(15.0) and data["source"] == "twin"


def test_compare_without_a_baseline_says_how_to_get_one(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with Store(db) as s:
        run = _run(s, TINY, "static", 170.0)
        maxn = _run(s, TINY, "maxn", 170.0)
    assert main(["compare", str(run)]) == 0
    capsys.readouterr()
    assert main(["compare", str(maxn)]) == 2
    assert "is a MAXN run itself" in capsys.readouterr().err
    with Store(db) as s:
        lone = _run(s, PYTHIA, "static", 50.0)
    assert main(["compare", str(lone)]) == 2
    err = capsys.readouterr().err
    assert "no baseline run (policy maxn: the board's MAXN or MAXN_SUPER) of pythia-70m/mrpc" in err and "--policy maxn" in err


@pytest.mark.parametrize("workload", [TINY_DYNAMIC, TINY_LORA], ids=["dynamic-padding", "lora"])
def test_the_baseline_found_is_of_the_runs_own_workload(db: Path, capsys: pytest.CaptureFixture[str],
                                                        workload: WorkloadRecord) -> None:
    """find_baseline (the Compare page's fallback, and `compare N`) keys by the store's key: the MAXN run of
    the max-length, full fine-tuning workload is not a dynamically padded (or LoRA) run's baseline."""
    with Store(db) as s:
        own = _run(s, workload, "maxn", 90.0, steps=50, samples=800)  # of other steps: found by the fallback
        _run(s, TINY, "maxn", 300.0, steps=50, samples=800)  # newer, same model, task and shape: another workload
        run = _run(s, workload, "static", 75.0)
    assert main(["compare", str(run), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["baseline"]["run_id"] == own and data["baseline"]["workload"]["key"] == workload.key
    with Store(db) as s:
        from engine.results.baseline import find_baseline

        assert find_baseline(s, s.get_run(run)).id == own  # type: ignore[union-attr]


def test_a_report_does_not_give_a_saving_between_two_workloads(db: Path, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """A comparison stored before comparability was checked (an older store) is reported as refused."""
    from engine.results.records import ComparisonRecord
    from engine.results.report import write_report

    with Store(db) as s:
        pythia = _run(s, PYTHIA, "static", 214.0)
        tiny_maxn = _run(s, TINY, "maxn", 10.0)
        s.add_comparison(ComparisonRecord(pythia, tiny_maxn, -2040.0, 0.0, source="twin", rails="all"))
        same = _run(s, TINY, "static", 8.0)
        s.compare_runs(same, tiny_maxn)
        refused = write_report(s, pythia, out_dir=tmp_path / "a").markdown.read_text()
        kept = write_report(s, same, out_dir=tmp_path / "b").markdown.read_text()
    assert "-2040" not in refused and "Not compared with its stored baseline: run" in refused
    assert f"# Run {pythia}: pythia-70m/mrpc (batch 16, length 128, fp16, full), policy static [twin]" in refused
    assert f"Against MAXN (run {tiny_maxn}, of the same workload): **20.0% less energy**" in kept
    assert main(["show", str(pythia)]) == 0
    out = capsys.readouterr().out
    assert f"Comparison vs baseline run {tiny_maxn}: not comparable (run {pythia} fine-tuned pythia-70m/mrpc" in out
    assert "-2040" not in out


# --------------------------------------------------------------------------- words, MAXN-only baselines, fitting runs
def test_compare_says_its_figures_in_words_as_run_and_show_do(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The reviewer's `compare 1`: "energy saving +3.2%, slowdown -8.5%" and "VDD_GPU_SOC -0.5%" where `run`,
    `show`, the report and the TUI say "3.2% less energy, 8.5% faster" and "0.5% more"; signed only in --json."""
    with Store(db) as s:
        maxn = s.start_run(policy="maxn", source="twin", device=TWIN, workload=TINY, rails="all", seed=0, steps=40,
                           simulated=True)
        s.finish_run(maxn, RunTotals(time_s=0.363, energy_j=5.09, rail_energy_j={"VDD_GPU_SOC": 1.86, "VDD_CPU_CV": 0.64}, samples=1280, steps=40))
        run = s.start_run(policy="static", source="twin", device=TWIN, workload=TINY, rails="all", seed=0, steps=40,
                          simulated=True)
        s.finish_run(run, RunTotals(time_s=0.332, energy_j=4.927, rail_energy_j={"VDD_GPU_SOC": 1.869, "VDD_CPU_CV": 0.60}, samples=1280, steps=40))
    assert main(["compare", str(run)]) == 0
    out = capsys.readouterr().out
    assert "vs MAXN: 3.2% less energy, 8.5% faster  [twin]" in out
    assert "energy per rail vs MAXN: VDD_CPU_CV 6.3% less, VDD_GPU_SOC 0.5% more" in out
    assert "+" not in out and "-3" not in out and "-8" not in out and "-0" not in out
    assert main(["compare", str(run), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)  # the data keep their signs, and say how to read them
    assert data["saving_pct"] == pytest.approx(3.2, abs=0.05) and data["slowdown_pct"] == pytest.approx(-8.5, abs=0.1)
    assert data["rail_saving_pct"]["VDD_GPU_SOC"] < 0 and "positive saving" in data["sign_convention"]


def test_compare_refuses_a_baseline_that_is_not_maxn(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`compare 2 1` (the MAXN run against the static run) printed "-3.3% ... (positive saving = less energy
    than MAXN)" with notes about "MAXN run 1"; two static runs compared as if one were MAXN. Refused, with the
    MAXN runs that fit named; the store's comparison is refused by the same check."""
    with Store(db) as s:
        static = _run(s, TINY, "static", 4.93)
        maxn = _run(s, TINY, "maxn", 5.09)
        other = _run(s, TINY, "static", 4.60)
    assert main(["compare", str(maxn), str(static)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "Traceback" not in captured.err
    assert (f"run {static} ran policy static, not the baseline (policy maxn, the board's uncapped mode: MAXN or "
            "MAXN_SUPER): a saving is against the baseline only") in captured.err
    assert f"compare the other way round: slm-dvfs compare {static} {maxn}" in captured.err
    for extra in ([], ["--json"]):
        assert main(["compare", str(other), str(static), *extra]) == 2
        captured = capsys.readouterr()
        assert captured.out == "" and f"run {static} ran policy static, not the baseline (policy maxn" in captured.err
        assert f"the MAXN run that fits run {other}: {maxn} (`slm-dvfs compare {other} {maxn}`)" in captured.err
    with Store(db) as s:
        from engine.core.errors import ConfigError

        with pytest.raises(ConfigError, match="not the baseline"):
            s.compare_runs(other, static)
    assert main(["compare", str(other), str(maxn)]) == 0  # the MAXN run it names does compare
    capsys.readouterr()


def test_a_recorded_baseline_that_is_not_maxn_is_passed_over(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An older store may hold a comparison against another policy's run: `compare N` finds the MAXN run instead."""
    from engine.results.records import ComparisonRecord

    with Store(db) as s:
        maxn = _run(s, TINY, "maxn", 5.09)
        static = _run(s, TINY, "static", 4.93)
        run = _run(s, TINY, "static", 4.60)
        s.add_comparison(ComparisonRecord(run, static, 6.7, 0.0, source="twin", rails="all"))
    assert main(["compare", str(run), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["baseline"]["run_id"] == maxn


def test_a_refusal_names_the_maxn_runs_that_fit_or_the_command_that_makes_one(
        db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Pad max against pad dynamic: `slm-dvfs runs` shows no padding, so pointing at it could not tell the user
    which MAXN run fits. The refusal names the fitting runs' ids, or spells out the run that makes one."""
    with Store(db) as s:
        dyn_maxn = _run(s, TINY_DYNAMIC, "maxn", 90.0)
        dyn_maxn2 = _run(s, TINY_DYNAMIC, "maxn", 91.0, steps=50, samples=800)  # of other steps: fits, per sample
        max_maxn = _run(s, TINY, "maxn", 120.0)  # another workload (pad max): not named for a dynamic run
        dyn = _run(s, TINY_DYNAMIC, "static", 75.0)
        lora = _run(s, TINY_LORA, "static", 60.0)
    assert main(["compare", str(dyn), str(max_maxn)]) == 2
    err = capsys.readouterr().err
    assert "a saving between two workloads" in err and "runs --model" not in err
    assert f"the MAXN runs that fit run {dyn}: {dyn_maxn2}, {dyn_maxn} (`slm-dvfs compare {dyn} {dyn_maxn2}`)" in err
    assert main(["compare", str(lora), str(dyn_maxn)]) == 2
    err = capsys.readouterr().err
    assert f"no MAXN run in the store fits run {lora}: make one with `slm-dvfs run --model bert-tiny --task sst2 " \
           "--batch-size 32 --max-seq-len 128 --precision fp32 --mode lora --lora-rank 4 --pad max --loop lean " \
           "--twin agx-orin-64gb --simulate --steps 100 --seed 0 --rails all --policy maxn`" in " ".join(err.split())
    assert main(["compare", str(lora)]) == 2  # no baseline found: the same command
    assert "--mode lora --lora-rank 4 --pad max --loop lean --twin agx-orin-64gb --simulate" in " ".join(capsys.readouterr().err.split())
