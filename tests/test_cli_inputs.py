"""Bad input at the edge: every numeric flag checked where it is parsed, a closed stdout,
a clear error (what, and what to do) and never a traceback (issue 10, case 10)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.cli import build_parser, main, numbers

ROOT = Path(__file__).resolve().parent.parent


def _numeric_actions() -> list[tuple[str, argparse.Action]]:
    """(sub-command, action) for every argument of every sub-command that parses a number."""
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    found = []
    for name, p in sub.choices.items():
        for action in p._actions:
            if action.type is not None and action.type not in (str, Path) \
                    and not getattr(action.type, "is_name", False):
                found.append((name, action))
    return found


def test_every_numeric_flag_has_a_checked_type() -> None:
    """A sweep of the CLI: no sub-command parses a number with bare int/float (unchecked range)."""
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    bare = [f"{name} {a.option_strings or a.dest}" for name, p in sub.choices.items()
            for a in p._actions if a.type in (int, float)]
    assert bare == []
    assert len(_numeric_actions()) >= 40


@pytest.mark.parametrize("bad", ["nan", "inf", "-inf", "1e400", "abc", "", "0x10", "1e30", str(2**70), "-3"])
def test_every_numeric_flag_refuses_nonsense_with_a_message(bad: str) -> None:
    for name, action in _numeric_actions():
        try:
            value = action.type(bad)
        except argparse.ArgumentTypeError as exc:
            assert str(exc), (name, action.dest)  # numbers' types also say the range ("give ...")
            continue
        # accepted: then it is a sane, finite value (e.g. -3 for a temperature)
        assert isinstance(value, (int, float)) and abs(value) < 2**63, (name, action.dest, bad, value)


@pytest.mark.parametrize("argv, message", [
    (["finetune", "--model", "bert-tiny", "--task", "sst2", "--steps", "1e30"], "--steps: '1e30' is not a whole number"),
    (["finetune", "--model", "bert-tiny", "--task", "sst2", "--seed", str(2**70)], "--seed: 1180591620717411303424 is out"),
    (["finetune", "--model", "bert-tiny", "--task", "sst2", "--epochs", "nan"], "--epochs: 'nan' is not a finite"),
    (["finetune", "--model", "bert-tiny", "--task", "sst2", "--batch-size", "0"], "--batch-size: 0 is out of range"),
    (["finetune", "--model", "bert-tiny", "--task", "sst2", "--lr", "-1"], "--lr: -1 is out of range"),
    (["monitor", "--twin", "--seconds", "nan"], "--seconds: 'nan' is not a finite number"),
    (["monitor", "--twin", "--seconds", "inf"], "--seconds: 'inf' is not a finite number"),
    (["monitor", "--twin", "--seconds", "-1"], "--seconds: -1 is out of range"),
    (["monitor", "--twin", "--rate", "0"], "--rate: 0 is out of range"),
    (["import-tegrastats", "x.log", "--label", "l", "--steps", "-3"], "--steps: -3 is out of range"),
    (["import-tegrastats", "x.log", "--label", "l", "--interval-ms", "nan"], "--interval-ms: 'nan' is not a finite"),
    (["sweep", "--model", "bert-tiny", "--task", "sst2", "--repeats", "0"], "--repeats: 0 is out of range"),
    (["sweep", "--model", "bert-tiny", "--task", "sst2", "--thermal-abort-c", "inf"], "--thermal-abort-c: 'inf'"),
    (["runs", "--limit", "-5"], "--limit: -5 is out of range"),
    (["show", "0"], "id: 0 is out of range"),
    (["train-selector", "--splits", "1"], "--splits: 1 is out of range"),
])
def test_bad_numbers_are_usage_errors(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "give" in err and "Traceback" not in err


def test_ranges_accept_their_bounds() -> None:
    assert numbers.seed("0") == 0 and numbers.seed(str(2**32 - 1)) == 2**32 - 1
    assert numbers.steps(" 7 ") == 7 and numbers.interval_steps("0") == 0
    assert numbers.seconds("0.5") == 0.5 and numbers.celsius("-40") == -40.0
    with pytest.raises(argparse.ArgumentTypeError):
        numbers.seconds("0")


def _run_with_stdout_closed(*argv: str) -> subprocess.CompletedProcess[str]:
    """The command with its stdout a pipe whose reader has already gone (`| head` after its lines)."""
    read, write = os.pipe()
    os.close(read)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    try:
        return subprocess.run([sys.executable, "-m", "engine", *argv], stdout=write, stderr=subprocess.PIPE,
                              text=True, env=env, timeout=120)
    finally:
        os.close(write)


@pytest.mark.parametrize("argv", [["runs"], ["--help"], ["device", "--twin"]])
def test_a_closed_stdout_ends_quietly(argv: list[str], tmp_path: Path) -> None:
    extra = ["--db", str(tmp_path / "r.sqlite")] if argv[0] == "runs" else []
    done = _run_with_stdout_closed(*argv, *extra)
    assert done.returncode in (0, 141), done.stderr
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr and "Exception ignored" not in done.stderr


def test_labels_and_notes_are_printed_without_escape_sequences(tmp_path: Path, capsys) -> None:
    from engine.core.text import clean_text

    db = str(tmp_path / "r.sqlite")
    log = tmp_path / "t.log"
    log.write_text("".join(f"12-01-2025 10:00:{s:02d} RAM 1/2MB VDD_GPU_SOC 1000mW/1000mW VDD_CPU_CV 500mW/500mW\n"
                           for s in range(3)))
    evil = "ok\x1b[2J\x1b[H\x1b]0;pwned\x07label"
    # (a model name with controls is refused at the flag: see test_hostile_input.py)
    assert main(["import-tegrastats", str(log), "--label", evil, "--db", db, "--model", "mx", "--task", "sst2",
                 "--batch-size", "8", "--seq-len", "32", "--precision", "fp32"]) == 0
    run_id = capsys.readouterr().out.split()[-1]
    for argv in (["runs", "--db", db], ["show", run_id, "--db", db]):
        assert main(argv) == 0
        out = capsys.readouterr().out
        assert "mx" in out and "\x1b" not in out and "\x07" not in out
        assert argv[0] == "runs" or "oklabel" in out
    assert main(["show", run_id, "--db", db, "--json"]) == 0  # JSON escapes controls itself: kept as stored
    assert '"ok\\u001b[2J' in capsys.readouterr().out
    assert clean_text("plain text\n\twith tabs, é and 日本") == "plain text\n\twith tabs, é and 日本"


@pytest.mark.parametrize("extra, message", [
    (["--checkpoint-every", "1", "--checkpoint-dir", "/proc/nope"], "cannot create the checkpoint folder /proc/nope"),
    (["--resume", "GARBAGE"], "not an slm-dvfs checkpoint"),
    (["--resume", "EMPTY"], "no checkpoint in"),
])
def test_finetune_refuses_bad_checkpoint_paths_before_loading(extra: list[str], message: str, tmp_path: Path,
                                                               capsys, monkeypatch) -> None:
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"PK\x03\x04 not a checkpoint")
    (tmp_path / "empty").mkdir()
    extra = [{"GARBAGE": str(garbage), "EMPTY": str(tmp_path / "empty")}.get(a, a) for a in extra]

    def never(*args, **kwargs):
        raise AssertionError("the model was loaded before the checkpoint path was checked")

    monkeypatch.setattr("engine.workload.models.load_model", never)
    assert main(["finetune", "--model", "bert-tiny", "--task", "sst2", "--steps", "2", *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and "What to do" in err and "Traceback" not in err


def test_select_refuses_a_shape_the_board_cannot_hold(capsys) -> None:
    assert main(["select", "--model", "bert-tiny", "--task", "sst2", "--batch-size", "10000000"]) == 2
    err = capsys.readouterr().err
    assert "needs an estimated" in err and "--batch-size" in err


def _tree_state(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("seconds", ["nan", "inf", "-1", "0"])
def test_monitor_on_an_r36_tree_refuses_nonsense_durations(r36_tree, seconds: str, capsys,
                                                           isolated_env) -> None:
    root, _layout = r36_tree
    before = _tree_state(root)
    with pytest.raises(SystemExit) as exit_:
        main(["monitor", "--sysfs-root", str(root), "--seconds", seconds])
    assert exit_.value.code == 2 and "--seconds" in capsys.readouterr().err
    assert _tree_state(root) == before  # nothing opened, nothing written


@pytest.mark.parametrize("flag, value, message", [
    ("--batch-sizes", "99999999999", "above 2147483647"),
    ("--batch-sizes", "8,1e30", "not a comma-separated list"),
    ("--seq-lens", "0", "below 1"),
])
def test_train_selector_lists_are_checked(flag: str, value: str, message: str, capsys, tmp_path: Path) -> None:
    argv = ["train-selector", "--from-twin-zoo", "--models", "bert-tiny", flag, value, "--out", str(tmp_path / "s")]
    assert main(argv) == 2
    assert message in capsys.readouterr().err
