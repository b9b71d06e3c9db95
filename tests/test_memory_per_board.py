"""Memory fit per board (issue 23): the budget is the board's MemTotal (/proc/meminfo under its root;
a twin's rendered from its profile) less what the OS holds, and every command that builds a model
on a device is held to it before anything is built or stored."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from engine.device.meminfo import mem_total_bytes, parse_meminfo
from engine.device.treegen import default_orin_spec, render_tree
from engine.workload.sizing import DEFAULT_BUDGET_BYTES, GIB, ORIN_MEMTOTAL_BYTES, board_budget, estimate_memory
from engine.workload.zoo import get_entry

# MemTotal of an Orin Nano 8GB developer kit: tegrastats' RAM total (MemTotal / 1024) reads
# `RAM 929/7620MB` on such boards in public logs (JetPack 6); the kB figure is that x 1024, so its
# last digits are an estimate.
NANO_8GB_MEMTOTAL_KB = 7620 * 1024
NANO_8GB = NANO_8GB_MEMTOTAL_KB * 1024


def nano_tree(tmp_path: Path) -> Path:
    """A board tree whose /proc/meminfo is an Orin Nano 8GB's (the clocks are the AGX layout's:
    memory fit reads only MemTotal)."""
    root = tmp_path / "nano"
    render_tree(root, replace(default_orin_spec("r36"), mem_total_kb=NANO_8GB_MEMTOTAL_KB))
    return root


@pytest.fixture
def nothing_built(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fails the test if a model is built or loaded, or a step traced (on meta tensors)."""
    from engine.workload import models, resolve

    def no_build(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("something was built for a workload that does not fit the board")

    monkeypatch.setattr(models, "build_model", no_build)
    monkeypatch.setattr(models, "load_model", no_build)
    monkeypatch.setattr(resolve, "trace_workload", no_build)


def test_meminfo_is_read_under_the_root_and_the_twin_renders_its_profiles(tmp_path: Path, twin_session: Any) -> None:
    board = tmp_path / "agx"
    render_tree(board, default_orin_spec("r36"))
    assert mem_total_bytes(board) == ORIN_MEMTOTAL_BYTES  # 62,841 MiB: tegrastats' RAM total on the AGX 64GB
    assert twin_session.memory_total_bytes() == ORIN_MEMTOTAL_BYTES  # the profile's memory_total_mb
    assert mem_total_bytes(nano_tree(tmp_path)) == NANO_8GB
    assert mem_total_bytes(tmp_path / "empty") is None  # no meminfo: unknown, never a guess
    info = parse_meminfo("MemTotal:        7802880 kB\nMemFree:         6700000 kB\nMemAvailable:    6900000 kB\n")
    assert info is not None and info.total_bytes == NANO_8GB and info.available_bytes == 6_900_000 * 1024
    assert parse_meminfo("MemFree: 12 kB\n") is None


def test_the_agx_64gb_budget_is_unchanged_and_a_small_board_keeps_a_smaller_reserve() -> None:
    assert board_budget(ORIN_MEMTOTAL_BYTES) == board_budget() == DEFAULT_BUDGET_BYTES == ORIN_MEMTOTAL_BYTES - 3 * GIB
    nano = board_budget(NANO_8GB)
    assert NANO_8GB - 3 * GIB < nano < NANO_8GB - 1 * GIB  # a fifth of its memory for the OS, not 3 GiB
    assert board_budget(3 * GIB) == 2 * GIB  # at least 1 GiB for the OS on the smallest board


def test_an_orin_nano_8gb_refuses_a_full_gemma_2b_run_before_anything_is_built(
        isolated_env: Any, tmp_path: Path, nothing_built: None, capsys: pytest.CaptureFixture[str]) -> None:
    from engine.cli import main
    from engine.results.store import Store

    db = tmp_path / "r.sqlite"
    code = main(["run", "--sysfs-root", str(nano_tree(tmp_path)), "--model", "gemma-2b", "--task", "sst2",
                 "--steps", "2", "--db", str(db)])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err
    budget = board_budget(NANO_8GB)
    gemma = get_entry("gemma-2b").config
    full = estimate_memory(gemma, 4, 128, "bf16", "full")  # the zoo's defaults: batch 4, length 128, bf16
    assert f"gemma-2b at batch 4, length 128 (bf16, mode full) needs an estimated {full.total / GIB:,.1f} GiB" in err
    assert f"more than the {budget / GIB:,.1f} GiB the board leaves for training" in err
    assert "the board's MemTotal 7,620 MiB" in err and "CPU and GPU share it" in err
    # each remedy the issue names with its own estimate; LoRA fits or not as the estimate says
    lora = estimate_memory(gemma, 4, 128, "bf16", "lora")
    batch1 = estimate_memory(gemma, 1, 128, "bf16", "full")
    assert lora.total > budget and batch1.total > budget  # gemma-2b's fp32 master weights alone are 9.3 GiB
    assert f"--mode lora (LoRA rank 8: {lora.total / GIB:,.1f} GiB, {(lora.total - budget) / GIB:,.1f} GiB over)" in err
    assert f"--batch-size 1 ({batch1.total / GIB:,.1f} GiB, " in err
    assert "weights alone (9.3 GiB)" in err and "--model " in err  # what does fit: a smaller model
    if db.exists():  # nothing stored: no device, workload or run row
        with Store(db) as store:
            assert store.list_runs() == []


def test_an_orin_nano_8gb_sweep_with_fp32_names_bf16_with_its_estimate(
        isolated_env: Any, tmp_path: Path, nothing_built: None, capsys: pytest.CaptureFixture[str]) -> None:
    from engine.cli import main

    code = main(["sweep", "--sysfs-root", str(nano_tree(tmp_path)), "--model", "gemma-2b", "--task", "sst2",
                 "--precision", "fp32", "--db", str(tmp_path / "r.sqlite")])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err
    bf16 = estimate_memory(get_entry("gemma-2b").config, 4, 128, "bf16", "full")
    assert f"--precision bf16 ({bf16.total / GIB:,.1f} GiB, " in err


def test_lora_is_offered_where_the_estimate_fits_the_orin_nano(
        isolated_env: Any, tmp_path: Path, nothing_built: None, capsys: pytest.CaptureFixture[str]) -> None:
    """Qwen2.5-0.5B: full fine-tuning is over the Orin Nano 8GB's budget, LoRA under it."""
    from engine.cli import main

    config = get_entry("qwen2.5-0.5b").config
    budget = board_budget(NANO_8GB)
    full, lora = (estimate_memory(config, 4, 128, "bf16", mode) for mode in ("full", "lora"))
    assert full.total > budget >= lora.total
    code = main(["run", "--sysfs-root", str(nano_tree(tmp_path)), "--model", "qwen2.5-0.5b", "--task", "sst2",
                 "--steps", "2", "--db", str(tmp_path / "r.sqlite")])
    err = capsys.readouterr().err
    assert code == 2, err
    fits_with = err.split("it fits with, in the order to try: ", 1)[1].split("; estimated and still over", 1)[0]
    assert f"--mode lora (LoRA rank 8: {lora.total / GIB:,.1f} GiB)" in fits_with


@pytest.mark.slow  # traces Qwen2.5-0.5B's step on meta tensors (~15 s)
def test_the_agx_64gb_twin_still_takes_what_the_nano_refuses(isolated_env: Any, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """The same workload the Orin Nano 8GB refuses is within the AGX Orin 64GB twin's 58.4 GiB."""
    from engine.cli import main

    full = estimate_memory(get_entry("qwen2.5-0.5b").config, 4, 128, "bf16", "full")
    assert board_budget(NANO_8GB) < full.total <= DEFAULT_BUDGET_BYTES
    code = main(["run", "--twin", "agx-orin-64gb", "--simulate", "--model", "qwen2.5-0.5b", "--task", "sst2",
                 "--steps", "1", "--db", str(tmp_path / "r.sqlite")])
    out, err = capsys.readouterr()
    assert code == 0, err


async def test_setup_sets_the_estimate_against_the_boards_memory(isolated_env: Any, tmp_path: Path) -> None:
    """The TUI's Setup, started on an Orin Nano 8GB, shows gemma-2b over that board's budget."""
    from textual.widgets import Input, Static

    from engine.device.session import open_device
    from engine.results.store import Store
    from tui_helpers import drive, make_app

    with open_device(sysfs_root=nano_tree(tmp_path)) as session, Store(tmp_path / "r.sqlite") as store:
        app = make_app(session, store=store, poll=False)
        async with drive(app) as ui:
            await ui.press("2")
            setup = app.screen
            setup.query_one("#model", Input).value = "gemma-2b"
            await ui.settle()
            memory = setup.query_one("#memory", Static)
            budget = board_budget(NANO_8GB) / GIB
            assert "does not fit: " in str(memory.render()) and f" of {budget:,.1f} GiB" in str(memory.render())
            assert memory.has_class("-over")
