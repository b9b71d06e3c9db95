"""`slm-dvfs device | pin | restore | monitor` on the twin, as a user types them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.cli import main

ORIN_GPU_MHZ = [306, 408, 510, 612, 714, 816, 918, 1020, 1122, 1224, 1300.5]


pytestmark = pytest.mark.usefixtures("isolated_env")  # conftest: state, data and a module's trace cache in tmp


def test_device_twin_shows_the_orin_tables(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["device", "--twin", "agx-orin-64gb", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["twin"] is True and rep["source"] == "twin"
    assert [f / 1e6 for f in rep["clocks"]["gpu"]["table_hz"]] == ORIN_GPU_MHZ
    cpu = rep["clocks"]["cpu"]["table_hz"]
    assert len(cpu) == 29 and cpu[0] == 115_200_000 and cpu[-1] == 2_201_600_000
    assert rep["clocks"]["emc"]["table_hz"] == [204_000_000, 665_600_000, 2_133_000_000, 3_199_000_000]
    assert {r["name"] for r in rep["rails"]} == {"VDD_GPU_SOC", "VDD_CPU_CV", "VIN_SYS_5V0", "VDDQ_VDD2_1V8AO"}
    assert rep["nvpmodel"] == {"id": 0, "name": "MAXN"}
    assert rep["temperatures"]


def test_device_text_output_labels_its_source(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["device", "--twin"]) == 0
    out = capsys.readouterr().out
    assert "digital twin (agx-orin-64gb)" in out
    assert "Rails [twin]" in out and "Clocks [twin]" in out
    assert "1300.5" in out and "MAXN" in out


def test_pin_persists_on_the_twin_until_restore(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["pin", "--twin", "--gpu", "816", "--emc", "2133"]) == 0
    assert "GPU pinned at 816 MHz" in capsys.readouterr().out
    main(["device", "--twin", "--json"])
    rep = json.loads(capsys.readouterr().out)
    assert rep["clocks"]["gpu"]["min_hz"] == rep["clocks"]["gpu"]["max_hz"] == 816_000_000
    assert rep["clocks"]["gpu"]["pinned"]
    assert main(["restore"]) == 0
    assert "restored: pinned journal" in capsys.readouterr().out
    main(["device", "--twin", "--json"])
    rep = json.loads(capsys.readouterr().out)
    assert rep["clocks"]["gpu"]["max_hz"] == 1_300_500_000 and not rep["clocks"]["gpu"]["pinned"]


def test_pin_refuses_an_unlisted_clock_naming_the_nearest(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["pin", "--twin", "--gpu", "700"]) == 2
    err = capsys.readouterr().err
    assert "700 MHz" in err and "612 MHz" in err and "714 MHz" in err
    assert main(["restore"]) == 0
    assert "nothing to restore" in capsys.readouterr().out  # a refused pin leaves no journal


def test_pin_needs_a_clock(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["pin", "--twin"]) == 2
    assert "--gpu" in capsys.readouterr().err


def test_device_without_a_board_says_what_to_do(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["device", "--sysfs-root", str(tmp_path / "empty")]) == 2
    err = capsys.readouterr().err
    assert "no Jetson" in err and "--twin" in err


def test_monitor_reports_exact_twin_energy(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["monitor", "--twin", "--seconds", "1", "--rails", "gpu+cpu", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["source"] == "twin" and rep["exact"] is True
    assert set(rep["rails"]) == {"VDD_GPU_SOC", "VDD_CPU_CV"}
    # Idle GPU_SOC + CPU_CV on a 64GB board in MAXN: about 2.8 W.
    assert 2.0 < rep["avg_power_w"] < 3.6
    assert rep["total_energy_j"] == pytest.approx(rep["avg_power_w"] * rep["duration_s"], rel=1e-6)


def test_monitor_rejects_unknown_rails(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["monitor", "--twin", "--seconds", "0.2", "--rails", "VDD_NOPE"]) == 2
    assert "VDD_GPU_SOC" in capsys.readouterr().err  # names the rails that exist


def test_every_command_answers_help(capsys: pytest.CaptureFixture[str]) -> None:
    for cmd in ("device", "pin", "restore", "monitor"):
        with pytest.raises(SystemExit) as info:
            main([cmd, "--help"])
        assert info.value.code == 0
        assert cmd in capsys.readouterr().out


def _twin_in_mode(mode_id: int) -> None:
    from engine.device.session import open_device

    with open_device(twin="agx-orin-64gb", realtime=False) as session:
        session.device.set_power_mode(mode_id)


def _gpu_range(capsys: pytest.CaptureFixture[str]) -> tuple[int, int]:
    main(["device", "--twin", "--json"])
    gpu = json.loads(capsys.readouterr().out)["clocks"]["gpu"]
    return gpu["min_hz"], gpu["max_hz"]


def test_pin_refuses_a_clock_above_the_modes_cap_before_writing(capsys: pytest.CaptureFixture[str]) -> None:
    _twin_in_mode(2)  # MODE_30W: GPU capped at 612 MHz
    before = _gpu_range(capsys)
    assert main(["pin", "--twin", "--gpu", "1300.5"]) == 2
    captured = capsys.readouterr()
    assert "cap" in captured.err and "612 MHz" in captured.err and "MODE_30W" in captured.err
    assert "another tool" not in captured.err and "pinned" not in captured.out
    assert _gpu_range(capsys) == before
    assert main(["restore"]) == 0 and "nothing to restore" in capsys.readouterr().out


def test_pin_checks_every_clock_before_the_first_write(capsys: pytest.CaptureFixture[str]) -> None:
    before = _gpu_range(capsys)
    assert main(["pin", "--twin", "--gpu", "816", "--cpu", "1500"]) == 2
    captured = capsys.readouterr()
    assert "1500 MHz" in captured.err and "GPU pinned" not in captured.out
    assert _gpu_range(capsys) == before


# --- a twin's tree gone at reboot (issue 24: trees on tmpfs, journals on disk) -------------------
def _pin_then_reboot(capsys: pytest.CaptureFixture[str]) -> Path:
    """Pin the twin, then remove its tree as a reboot empties /dev/shm; the pin's journal path."""
    import shutil

    from engine.device.session import twin_root

    assert main(["pin", "--twin", "agx-orin-64gb", "--gpu", "612"]) == 0
    journal = Path(capsys.readouterr().out.split("journalled in ")[1].split(";")[0])
    assert journal.exists()
    shutil.rmtree(twin_root("agx-orin-64gb"))
    return journal


@pytest.mark.parametrize("args", [["restore"], ["restore", "--twin", "agx-orin-64gb"]])
def test_restore_drops_the_pin_of_a_twin_whose_tree_the_reboot_removed(
    args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    journal = _pin_then_reboot(capsys)
    assert main(args) == 0  # was 1, "delete <journal>" by hand
    out = capsys.readouterr().out
    assert f"dropped: {journal.name}" in out and "starts from its defaults" in out
    assert not journal.exists()
    assert main(["restore"]) == 0 and "nothing to restore" in capsys.readouterr().out


def test_a_twins_journal_is_known_by_its_marker_outside_the_twin_dir(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    journal = _pin_then_reboot(capsys)
    assert json.loads(journal.read_text())["twin"] is True  # recorded when the guard wrote it
    monkeypatch.setenv("SLM_DVFS_TWIN_DIR", str(tmp_path / "elsewhere"))  # the tree is no longer under it
    assert main(["restore"]) == 0 and f"dropped: {journal.name}" in capsys.readouterr().out
    assert not journal.exists()


def test_a_gone_non_twin_root_still_needs_the_user(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    journal = _pin_then_reboot(capsys)
    data = json.loads(journal.read_text())
    data["twin"] = False  # as a board's journal (or one from before the marker) ...
    data["device"]["root"] = str(tmp_path / "board-tree")  # ... naming a tree outside the twin dir, now gone
    journal.write_text(json.dumps(data))
    assert main(["restore"]) == 1
    err = capsys.readouterr().err
    assert "no longer exists" in err and f"delete {journal}" in err
    assert journal.exists()  # a board's journal is never dropped silently


def test_a_dead_sessions_journal_of_a_rebooted_twin_is_dropped_quietly_at_start_up(
    isolated_env: object, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    import logging

    journal = _pin_then_reboot(capsys)
    data = json.loads(journal.read_text())
    data.update(kind="session", twin=False)  # from before the marker: known by its root under the twin dir
    data["session_lock"] = str(Path(isolated_env.state_dir) / "sessions" / "1-1.lock")  # type: ignore[attr-defined]
    session = journal.with_name(journal.name.replace("pinned", "session-1-1"))
    journal.rename(session)
    session.write_text(json.dumps(data))
    with caplog.at_level(logging.INFO, logger="engine.device.guard"):
        # another board's command recovers every dead session first (board_notes, as the TUI's start-up)
        assert main(["device", "--twin", "orin-nano-8gb"]) == 0
    assert not session.exists()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]  # was "cannot restore ... kept"
    assert any("starts from its defaults" in r.getMessage() for r in caplog.records)
