"""Hostile input at the edge (issue 20): files that never end or block (/dev/zero, a FIFO), files too
large, JSON nested past Python's recursion, numbers of 5000 digits or written `2_5`, names of 5000
characters. Each is a clear error promptly (what was wrong, quoted short on one line, and what to
do), through the CLI a user types and at the parsers; never a traceback or a hang."""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from engine.cli import build_parser, main, numbers
from engine.core.errors import ConfigError
from engine.core.userinput import (MAX_JSON_DEPTH, check_name, load_json, number_value, parse_float, parse_int,
                                   read_user_file)

ROOT = Path(__file__).resolve().parent.parent
HUGE = "1" * 5000  # past Python's int-str limit (4300 digits)
LONG_NAME = "m" * 5000
DEEP = "[" * 100_000 + "]" * 100_000  # far past the json module's recursion limit
ROW = "gpu_mhz,energy_j,time_s,samples,rails,model,task\n"


def _err_lines_short(err: str, limit: int = 400) -> None:
    """An error quotes a user's text short: no line of it is a screenful."""
    assert "Traceback" not in err
    assert max(len(line) for line in err.splitlines()) < limit, err[:500]


def _limit_memory() -> None:  # the child may not eat the machine if it reads /dev/zero whole
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))


# --------------------------------------------------------------------------- files
@pytest.mark.parametrize("command", [["import-sweep"], ["import-tegrastats", "--label", "x"]])
def test_the_importers_refuse_a_device_and_a_fifo_promptly(command: list[str], tmp_path: Path) -> None:
    """In a child with bounded memory: a reader that took /dev/zero whole, or waited on the FIFO,
    fails here instead of taking the machine."""
    fifo = tmp_path / "points.csv"
    os.mkfifo(fifo)  # opening it for reading would wait for a writer forever
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SLM_DVFS_DB": str(tmp_path / "r.sqlite")}
    for path, kind in (("/dev/zero", "/dev/zero is a device, not a file"), (str(fifo), "is a FIFO")):
        done = subprocess.run([sys.executable, "-m", "engine", command[0], path, *command[1:]], env=env,
                              capture_output=True, text=True, timeout=60, preexec_fn=_limit_memory)
        assert done.returncode == 2, done.stderr[-2000:]
        assert kind in done.stderr and "What to do: give a regular file" in done.stderr
        _err_lines_short(done.stderr)


def test_a_file_over_the_cap_is_refused_before_it_is_read(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("SLM_DVFS_DB", str(tmp_path / "r.sqlite"))
    big = tmp_path / "big.csv"
    with open(big, "wb") as fh:  # sparse: 17 MiB on paper, nothing on disk
        fh.truncate(17 << 20)
    assert main(["import-sweep", str(big)]) == 2
    assert "larger than a measurements file can be (16 MiB at most)" in capsys.readouterr().err


def test_user_files_must_be_regular(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is a folder"):
        read_user_file(tmp_path, "log", max_bytes=10, remedy="r")
    with pytest.raises(ConfigError, match="does not exist"):
        read_user_file(tmp_path / "nope", "log", max_bytes=10, remedy="r")
    small = tmp_path / "ok.txt"
    small.write_bytes(b"12345")
    assert read_user_file(small, "log", max_bytes=5, remedy="r") == b"12345"
    with pytest.raises(ConfigError, match="larger than"):
        read_user_file(small, "log", max_bytes=4, remedy="r")


# --------------------------------------------------------------------------- JSON
def test_deeply_nested_json_is_a_clear_error_everywhere_a_user_hands_json(tmp_path: Path, capsys,
                                                                         monkeypatch) -> None:
    monkeypatch.setenv("SLM_DVFS_DB", str(tmp_path / "r.sqlite"))
    sweep = tmp_path / "deep.json"
    sweep.write_text(DEEP)
    assert main(["import-sweep", str(sweep)]) == 2
    err = capsys.readouterr().err
    assert f"nests deeper than {MAX_JSON_DEPTH} levels" in err and "nothing was stored" in err
    config = tmp_path / "config.json"
    config.write_text('{"model_type": "bert", "x": ' + DEEP + "}")
    assert main(["select", "--model", str(config), "--task", "sst2"]) == 2
    err = capsys.readouterr().err
    assert "cannot read the model configuration" in err and "nests deeper" in err
    _err_lines_short(err)


@pytest.mark.parametrize("text, message", [
    (DEEP, "nests deeper"), ("[" * 70 + "]" * 70, "nests deeper"), ("[" + HUGE + "]", "a JSON number of 5000 digits"),
    ("[NaN]", "NaN, which is no JSON number"), ("[1,", "is not valid JSON"), (b"\xff\xfe", "is not valid JSON"),
])
def test_load_json_refuses_with_its_own_error(text: str | bytes, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_json(text, "the file", "give good JSON")
    assert load_json("[" * 10 + "]" * 10, "f", "r") == [[[[[[[[[[]]]]]]]]]]


# --------------------------------------------------------------------------- numbers
@pytest.mark.parametrize("cell, message", [
    ("2_5", "without separators"), (HUGE, "too long for a number"), ("٣", "ASCII digits"), ("1e999", "beyond"),
    ("nan", "is not a number"), ("0x10", "is not a number"),
])
def test_a_sweep_cell_is_read_strictly(cell: str, message: str, tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("SLM_DVFS_DB", str(tmp_path / "r.sqlite"))
    path = tmp_path / "m.csv"
    path.write_text(ROW + f"612,{cell},1,640,gpu+cpu,bert-tiny,sst2\n")
    assert main(["import-sweep", str(path)]) == 2
    err = capsys.readouterr().err
    assert "line 2, column energy_j" in err and message in err
    _err_lines_short(err)


def test_a_5000_digit_json_number_in_a_sweep_is_a_clear_error(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("SLM_DVFS_DB", str(tmp_path / "r.sqlite"))
    for digits, message in ((5000, "a JSON number of 5000 digits"), (400, "a JSON number of 400 digits")):
        path = tmp_path / f"m{digits}.json"
        path.write_text('[{"gpu_mhz": 612, "energy_j": ' + "1" * digits + ', "samples": 8, "rails": "all", '
                        '"model": "bert-tiny", "task": "sst2"}]')
        assert main(["import-sweep", str(path)]) == 2
        err = capsys.readouterr().err
        assert message in err
        _err_lines_short(err)


@pytest.mark.parametrize("argv, message", [
    (["runs", "--limit", HUGE], "is not a whole number"),
    (["runs", "--limit", "2_5"], "without separators"),
    (["runs", "--limit", "٣"], "ASCII digits"),
    (["monitor", "--twin", "--seconds", "1_0"], "without separators"),
    (["monitor", "--twin", "--seconds", HUGE], "is not a number"),
])
def test_cli_numbers_are_strict_and_quoted_short(argv: list[str], message: str, capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert message in err
    _err_lines_short(err)


@pytest.mark.parametrize("argv, message", [
    (["report", "s" + HUGE], "is not a report id"),
    (["calibrate", "--sweeps", "s" + HUGE], "is not a sweep id"),
    (["select", "--model", "bert-tiny", "--task", "sst2", "--objective", "eta:" + HUGE], "is not a number"),
    (["select", "--model", "bert-tiny", "--task", "sst2", "--objective", "eta:0_5"], "is not a number"),
])
def test_numbers_inside_other_arguments_are_strict(argv: list[str], message: str, capsys, tmp_path: Path,
                                                    monkeypatch) -> None:
    from engine.results.store import Store

    monkeypatch.setenv("SLM_DVFS_DB", str(tmp_path / "r.sqlite"))
    with Store(tmp_path / "r.sqlite"):
        pass  # an empty store: the commands get as far as reading their ids
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err
    _err_lines_short(err)


def test_train_selector_lists_are_strict() -> None:
    """(`train-selector --batch-sizes`: the CLI path is test_cli_inputs' list test; it loads scikit-learn first.)"""
    from engine.cli.selector_cmds import _ints

    for text in (HUGE, "16,2_5", "٣"):
        with pytest.raises(ConfigError, match="not a comma-separated list of integers") as err:
            _ints(text, "batch-sizes")
        assert len(str(err.value).splitlines()[0]) < 200
    assert _ints("16, 32", "batch-sizes") == (16, 32)


@pytest.mark.parametrize("spec", ["mode:" + HUGE, "static:gpu=816,mode=" + HUGE, "static:gpu=" + HUGE,
                                  "static:gpu=٨١٦", "online:warmup=" + HUGE, "ml:probes=" + HUGE])
def test_policy_numbers_are_strict(spec: str) -> None:
    from engine.selector import policy_factory

    with pytest.raises(ConfigError) as err:
        policy_factory().make(spec)
    assert len(str(err.value).splitlines()[0]) < 300


@pytest.mark.parametrize("text", ["2_5", "2,5", "٢٥", "25 W", "+", ".", "1e", "inf", "-nan", HUGE, ""])
def test_the_strict_parsers_refuse(text: str) -> None:
    with pytest.raises(ConfigError):
        parse_float(text, "x")
    with pytest.raises(ConfigError):
        parse_int(text, "x")


def test_the_strict_parsers_read_plain_numbers() -> None:
    assert parse_float(" 1.5e3 ", "x") == 1500.0 and parse_float("-.5", "x") == -0.5 and parse_float("7.", "x") == 7
    assert parse_int("+42", "x") == 42 and parse_int("-0", "x") == 0
    with pytest.raises(ConfigError):
        parse_int("2.0", "x")
    assert number_value(25, "x") == 25.0 and number_value("25", "x") == 25.0
    with pytest.raises(ConfigError, match="over 300 digits"):
        number_value(10**400, "x")
    with pytest.raises(ConfigError, match="not a number"):
        number_value(True, "x")


# --------------------------------------------------------------------------- names
def _model_commands() -> list[str]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sorted(name for name, p in sub.choices.items()
                  if any("--model" in a.option_strings for a in p._actions))


def test_every_command_that_takes_a_model_bounds_it(capsys) -> None:
    commands = _model_commands()
    assert {"run", "sweep", "finetune", "select", "import-sweep", "import-tegrastats", "runs"} <= set(commands)
    for command in commands:
        with pytest.raises(SystemExit) as exit_:
            main([command, "--model", LONG_NAME])
        assert exit_.value.code == 2, command
        err = capsys.readouterr().err
        assert "argument --model: model 'mmm" in err and "(5000 characters)' is too long" in err, command
        _err_lines_short(err)
        with pytest.raises(SystemExit):
            main([command, "--model", "bert\n-tiny"])
        assert "holds a line break" in capsys.readouterr().err, command


def test_a_long_model_reaching_the_engine_is_a_clear_error(tmp_path: Path, capsys, monkeypatch) -> None:
    from engine.workload.models import resolve_model

    for name in (LONG_NAME, "a/" + "b" * 300, "x" * 255 + "/" + "y" * 256):
        with pytest.raises(ConfigError) as err:
            resolve_model(name)
        assert "Traceback" not in str(err.value) and len(str(err.value).splitlines()[0]) < 300
    monkeypatch.setenv("SLM_DVFS_DB", str(tmp_path / "r.sqlite"))
    path = tmp_path / "m.csv"
    path.write_text(ROW + f"612,1,1,640,gpu+cpu,{LONG_NAME},sst2\n")
    assert main(["import-sweep", str(path)]) == 2
    err = capsys.readouterr().err
    assert "line 2, column model" in err and "is too long" in err
    _err_lines_short(err)


def test_a_profile_name_or_file_of_any_kind_is_a_clear_error(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("SLM_DVFS_DB", str(tmp_path / "r.sqlite"))
    sweep = tmp_path / "m.csv"
    sweep.write_text(ROW + "612,1,1,640,gpu+cpu,bert-tiny,sst2\n")
    deep = tmp_path / "deep.toml"
    deep.write_text("a = " + "[" * 5000 + "]" * 5000 + "\n")
    for profile, message in ((LONG_NAME, "no device profile"), (str(deep), "nests too deeply"),
                             ("/dev/zero", "no device profile")):
        assert main(["import-sweep", str(sweep), "--profile", profile]) == 2
        err = capsys.readouterr().err
        assert message in err
        _err_lines_short(err)


def test_check_name() -> None:
    assert check_name("  bert-tiny ", "model") == "bert-tiny"
    for bad in ("a\nb", "a\x1b[2Jb", "x" * 1025, "d/" + "e" * 256):
        with pytest.raises(ConfigError):
            check_name(bad, "model")
    with pytest.raises(argparse.ArgumentTypeError, match="too long"):
        numbers.model("z" * 2000)


def test_an_import_with_a_long_value_quotes_it_short(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("SLM_DVFS_DB", str(tmp_path / "r.sqlite"))
    path = tmp_path / "m.json"
    path.write_text(json.dumps([{"gpu_mhz": 612, "energy_j": 1, "samples": 8, "rails": "all", "model": "bert-tiny",
                                 "task": "sst2", "precision": "p" * 5000}]))
    assert main(["import-sweep", str(path)]) == 2
    err = capsys.readouterr().err
    assert "unknown precision" in err and "(5000 characters)" in err
    _err_lines_short(err)
