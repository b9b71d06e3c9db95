"""`--loop hf|lean`: the training loop a workload runs in, chosen on every command that describes one,
kept in the store (its key carries it) and read back, and told apart wherever a workload is listed. The
loop named is the loop that runs: a command that trains runs slm-dvfs's own (lean) and refuses hf; one the
twin alone computes defaults to hf; a key that names no loop (every row stored before) is lean."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from engine.cli import main, numbers
from engine.core.errors import ConfigError, UnknownChoiceError
from engine.results.errors import CorruptRowError
from engine.results.store import DeviceRecord, Store, WorkloadRecord
from engine.results.store.db import default_db_path
from engine.workload.spec import WorkloadSpec
from engine.workload.trace.loop import LOOPS, check_loop_for, default_loop, parse_loop

pytestmark = pytest.mark.usefixtures("isolated_env")  # conftest: state, data and a module's trace cache in tmp

BERT_TINY = ("--model", "bert-tiny", "--task", "sst2")
FIXED = ("--pad", "max")  # one traced length (dynamic padding traces several): quicker


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> object:
    code = main([*argv, "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    return json.loads(out.out)


# --------------------------------------------------------------------------- the choice
def test_parse_loop_names_the_choices() -> None:
    assert [parse_loop(name) for name in LOOPS] == ["hf", "lean"]
    with pytest.raises(UnknownChoiceError) as raised:
        parse_loop("trainer")
    assert raised.value.choices == ("hf", "lean")
    assert "hf, lean" in raised.value.remedy and "'trainer'" in raised.value.what


@pytest.mark.parametrize(("argv", "trains", "loop"), [([], True, "lean"), ([], False, "hf"),
                                                     (["--loop", "lean"], True, "lean"),
                                                     (["--loop", "hf"], False, "hf"), (["--loop", "lean"], False, "lean")])
def test_the_loop_flag(argv: list[str], trains: bool, loop: str) -> None:
    p = argparse.ArgumentParser()
    numbers.add_loop_argument(p)
    assert numbers.loop_of(p.parse_args(argv), trains=trains) == loop
    assert default_loop(trains) == ("lean" if trains else "hf")


def test_a_loop_that_trains_is_lean() -> None:
    check_loop_for(True, "lean")
    check_loop_for(False, "hf")
    with pytest.raises(ConfigError) as raised:
        check_loop_for(True, "hf")
    assert "slm-dvfs trains with its own loop" in raised.value.remedy
    assert "modelled by the twin only" in raised.value.remedy and "--simulate" in raised.value.remedy


@pytest.mark.parametrize("command", [["run", "--twin"], ["sweep", "--twin"], ["finetune"],
                                     ["fleet", "run", "--twins", "1", "--policy", "maxn"],
                                     ["fleet", "sweep", "--twins", "1"]])
def test_a_command_that_trains_refuses_the_trainer_loop(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*command, *BERT_TINY, "--loop", "hf"]) == 2
    err = capsys.readouterr().err
    assert "slm-dvfs trains with its own loop" in err and "modelled by the twin only" in err
    assert "Traceback" not in err
    assert not default_db_path().exists() or not Store(default_db_path()).list_runs()  # refused before any run


@pytest.mark.parametrize("command", [["run"], ["sweep"], ["select"], ["finetune"], ["import-sweep", "x.csv"],
                                     ["fleet", "sweep", "--twins", "1"], ["fleet", "run", "--twins", "1"]])
def test_every_workload_command_takes_loop_and_refuses_another(command: list[str],
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as raised:
        main([*command, *BERT_TINY, "--loop", "trainer"])
    assert raised.value.code == 2
    err = capsys.readouterr().err
    assert "--loop" in err and "'hf'" in err and "'lean'" in err and "Traceback" not in err


# --------------------------------------------------------------------------- through the CLI
@pytest.mark.slow  # traces bert-tiny (~5 s with torch's import); the store's round trip is tested below
def test_a_lean_sweep_is_a_workload_of_its_own_in_sweeps_and_show(capsys: pytest.CaptureFixture[str]) -> None:
    lean = _json(capsys, "sweep", *BERT_TINY, *FIXED, "--twin", "--fast", "--loop", "lean")
    assert isinstance(lean, dict) and lean["workload"]["loop"] == "lean"
    assert main(["sweep", *BERT_TINY, *FIXED, "--twin", "--fast"]) == 0
    (said,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("sweep s")]
    assert "bert-tiny on sst2" in said and "hf loop" in said  # a fast sweep's default, said all the same
    listed = _json(capsys, "sweeps")
    assert isinstance(listed, list) and len(listed) == 2  # another workload, another sweep
    by_id = {row["id"]: row["workload"] for row in listed}
    hf_id = next(i for i in by_id if i != f"s{lean['sweep_id']}")
    assert by_id[f"s{lean['sweep_id']}"]["loop"] == "lean"
    assert "loop=" not in by_id[f"s{lean['sweep_id']}"]["key"]  # lean: the key as before the loop was recorded
    assert by_id[hf_id]["loop"] == "hf" and by_id[hf_id]["key"].endswith("|loop=hf")
    # the lean loop leaves out the Trainer's serial host work: a small model's step costs less
    with Store(default_db_path()) as store:
        maxn = {sid: min(p.energy_j / p.samples for p in store.sweep_points(int(sid[1:])))
                for sid in by_id}
    assert maxn[f"s{lean['sweep_id']}"] < maxn[hf_id]
    assert main(["sweeps"]) == 0
    listing = capsys.readouterr().out  # a stored workload's label says its loop as its key does: hf only
    assert listing.count("hf loop") == 1 and "lean loop" not in listing
    assert main(["show", f"s{lean['sweep_id']}"]) == 0
    assert "loop lean" in capsys.readouterr().out


@pytest.mark.slow  # two selections, each costing the twin ensemble (~5 s)
def test_select_costs_the_loop_it_is_told(capsys: pytest.CaptureFixture[str]) -> None:
    common = ("select", *BERT_TINY, "--twin")
    hf = _json(capsys, *common)
    lean = _json(capsys, *common, "--loop", "lean")
    assert isinstance(hf, dict) and isinstance(lean, dict)
    assert hf["workload"]["loop"] == "hf" and lean["workload"]["loop"] == "lean"
    # the twin ensemble costs the steps as the loop runs them: other intervals for a host-bound model
    assert hf["uncertainty"] != lean["uncertainty"]
    assert main([*common, "--loop", "lean"]) == 0
    assert "lean loop" in capsys.readouterr().out


@pytest.mark.slow  # traces bert-tiny when it runs alone
def test_a_lean_run_is_stored_and_read_back_lean(capsys: pytest.CaptureFixture[str]) -> None:
    out = _json(capsys, "run", *BERT_TINY, *FIXED, "--twin", "--simulate", "--steps", "2", "--loop", "lean")
    assert isinstance(out, dict) and out["workload"]["loop"] == "lean"
    runs = _json(capsys, "runs")
    assert isinstance(runs, list) and runs
    with Store(default_db_path()) as store:  # a run's workload is read with the run (the workload's key joined)
        run = store.get_run(int(runs[0]["id"]))
    assert run.workload is not None and run.workload.loop == "lean" and run.workload.spec.loop == "lean"
    assert run.workload.key == WorkloadSpec(*BERT_TINY[1::2], padding="max_length", loop="lean").key


@pytest.mark.parametrize(("argv", "loop"), [([], "lean"), (["--loop", "hf"], "hf")])
def test_import_sweep_records_the_loop_it_is_given(argv: list[str], loop: str, capsys: pytest.CaptureFixture[str],
                                                   tmp_path: Path) -> None:
    """A board's measurements trained with slm-dvfs's own loop unless the file (or --loop) says otherwise."""
    example = Path(__file__).resolve().parent.parent / "docs" / "examples" / "measured-sweep.csv"
    out = _json(capsys, "import-sweep", str(example), *argv, "--db", str(tmp_path / "r.sqlite"))
    assert isinstance(out, dict)
    assert out["sweeps"][0]["workload"].endswith("|loop=hf") == (loop == "hf")
    with Store(tmp_path / "r.sqlite") as store:
        (sweep,) = store.list_sweeps()
        assert store.get_workload(sweep.workload_id).loop == loop


# --------------------------------------------------------------------------- the store
def test_a_stored_lean_workload_keeps_its_loop(tmp_path: Path) -> None:
    lean = WorkloadRecord("bert-tiny", "sst2", 32, 128, "fp32", padding="dynamic")
    hf = WorkloadRecord("bert-tiny", "sst2", 32, 128, "fp32", padding="dynamic", loop="hf")
    assert lean.key == WorkloadSpec("bert-tiny", "sst2", 32, 128, "fp32", padding="dynamic", loop="lean").key
    with Store(tmp_path / "r.sqlite") as store:
        lid, hid = store.ensure_workload(lean), store.ensure_workload(hf)
        assert lid != hid
        assert store.get_workload(lid).loop == "lean" and store.get_workload(hid).loop == "hf"
        found = store.find_workload(lean.key)
        assert found is not None and found[0] == lid and found[1].loop == "lean" and found[1].key == lean.key
        device = DeviceRecord("NVIDIA Jetson AGX Orin Developer Kit", "P3701-0005 (AGX Orin 64GB)",
                              profile="agx-orin-64gb", is_twin=True)
        run_id = store.start_run(policy="maxn", source="twin", device=device, workload=lean, steps=2)
        run = store.get_run(run_id)  # a run's workload is read with the run (the workload's key joined)
        assert run.workload is not None and run.workload.loop == "lean" and run.workload.key == lean.key
    assert "hf loop" in hf.label and "loop" not in lean.label  # as the keys say them
    assert "loop=" not in lean.key and hf.key == f"{lean.key}|loop=hf"


def test_a_stored_key_naming_no_loop_is_a_corrupt_row(tmp_path: Path) -> None:
    with Store(tmp_path / "r.sqlite") as store:
        wid = store.ensure_workload(WorkloadRecord("bert-tiny", "sst2", 32, 128, "fp32", loop="lean"))
        with store._tx("corrupting a key") as conn:
            conn.execute("UPDATE workloads SET key = 'bert-tiny|sst2|32|128|fp32|full|loop=trainer' WHERE id = ?",
                         (wid,))
        with pytest.raises(CorruptRowError) as raised:
            store.get_workload(wid)
    assert "trainer" in raised.value.what


# --------------------------------------------------------------------------- the loop that runs
TRAIN = ("--steps", "2", "--batch-size", "4", "--max-seq-len", "16", "--train-samples", "8", "--eval-samples", "8")


def test_a_trained_twin_run_is_lean_under_its_pre_loop_key(capsys: pytest.CaptureFixture[str]) -> None:
    """`run --twin` trains with slm-dvfs's own loop: stored lean, under the key a trained run had before the
    loop was recorded (its baselines are still found), and its line names the loop."""
    assert main(["run", *BERT_TINY, *FIXED, *TRAIN, "--twin"]) == 0
    assert "fp32, full, lean loop)" in capsys.readouterr().out
    with Store(default_db_path()) as store:
        (run,) = store.list_runs(limit=None)
        assert not run.simulated and run.workload is not None and run.workload.loop == "lean"
        assert run.workload.key == "bert-tiny|sst2|4|16|fp32|full"  # the pre-issue key form: no loop in it


def test_a_simulated_twin_run_is_hf(capsys: pytest.CaptureFixture[str]) -> None:
    """`run --twin --simulate`: the twin alone computes the steps, in the published runs' loop by default."""
    out = _json(capsys, "run", *BERT_TINY, *FIXED, "--twin", "--simulate", "--steps", "2", "--batch-size", "4",
                "--max-seq-len", "16")
    assert isinstance(out, dict) and out["workload"]["loop"] == "hf"
    with Store(default_db_path()) as store:
        (run,) = store.list_runs(limit=None)
        assert run.workload is not None and run.workload.loop == "hf"
        assert run.workload.key == "bert-tiny|sst2|4|16|fp32|full|loop=hf"
