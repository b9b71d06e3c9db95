"""Rail sets that know their total (engine/device/rails.py), and tegrastats lines of JetPack 4 to 7.

The lines are tests/data/tegrastats_public.txt's, each quoted with its source there. On an Orin Nano/NX
VDD_IN is the module's input and the other two rails are parts of it: every total (a line's, an
imported log's, the monitor's `all` preset) is VDD_IN alone; on AGX Orin it is the sum of the rails.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import pytest

from engine.cli import main
from engine.core.errors import ConfigError
from engine.device.monitor import PowerMonitor, resolve_rails
from engine.device.power import PowerSample
from engine.device.rails import preset_rails, rail_set_of
from engine.device.tegra_parse import parse_line
from engine.device.tegrastats import TegrastatsSource

PUBLIC = Path(__file__).parent / "data" / "tegrastats_public.txt"
NANO_RAILS = ("VDD_IN", "VDD_CPU_GPU_CV", "VDD_SOC")
AGX_RAILS = ("VDD_GPU_SOC", "VDD_CPU_CV", "VIN_SYS_5V0", "VDDQ_VDD2_1V8AO")


def _public(name: str) -> str:
    for line in PUBLIC.read_text().splitlines():
        if line.startswith(f"[{name}] "):
            return line.split("] ", 1)[1]
    raise KeyError(name)


# --------------------------------------------------------------------------- lines of JetPack 4 to 7


def test_jetpack7_line_parses_with_peaks_and_paired_temperatures() -> None:
    s = parse_line(_public("jp7-agx-orin"))
    assert s.rails_mw() == {"VDD_GPU_SOC": 5139, "VDD_CPU_CV": 3268, "VIN_SYS_5V0": 5500}
    assert (s.rails["VDD_CPU_CV"].average_mw, s.rails["VDD_CPU_CV"].peak_mw) == (3268, 3268)
    assert s.temperatures_c == pytest.approx({"cpu": 52.968, "soc2": 48.406, "soc0": 49.531, "gpu": 47.625})
    assert (s.gr3d.load_pct, s.gr3d.freq_mhz) == (12, 1300)
    assert (s.emc.load_pct, s.emc.freq_mhz) == (3, 3199)
    assert len(s.cpus) == 12 and s.cpus[0].freq_mhz == 2201
    # AGX Orin has no input rail: its total is the sum of what it reports
    assert PowerSample(0.0, s.rails_mw()).total_mw == 5139 + 3268 + 5500


@pytest.mark.parametrize("name, rails, total_mw", [
    ("jp4-nano", {"POM_5V_IN": 933, "POM_5V_GPU": 0, "POM_5V_CPU": 84}, 933),  # the input rail
    ("jp4-tx2", {"VDD_IN": 1038, "VDD_CPU": 153, "VDD_GPU": 153, "VDD_SOC": 384, "VDD_WIFI": 38, "VDD_DDR": 192}, 1038),
    ("jp4-agx-xavier", {"GPU": 1155, "CPU": 385, "SOC": 2504, "CV": 0, "VDDRQ": 192, "SYS5V": 2692}, 6928),  # the sum
    ("jp6-orin-nano", {"VDD_IN": 14218, "VDD_CPU_GPU_CV": 6512, "VDD_SOC": 3297}, 14218),  # not 24027
    ("jp7-agx-orin", {"VDD_GPU_SOC": 5139, "VDD_CPU_CV": 3268, "VIN_SYS_5V0": 5500}, 13907),
])
def test_lines_of_every_jetpack_parse_with_the_right_rails_and_total(name: str, rails: dict[str, float],
                                                                      total_mw: float) -> None:
    s = parse_line(_public(name))
    assert s.rails_mw() == rails
    assert PowerSample(0.0, s.rails_mw()).total_mw == total_mw
    assert rail_set_of(rails).known


@pytest.mark.parametrize("torn", [
    "RAM 1/2MB VDD_GPU_SOC 5139mW/5139mW/51",
    "RAM 1/2MB VDD_GPU_SOC 5139mW/5139mW/5139",
])
def test_torn_jetpack7_fields_are_rejected(torn: str) -> None:
    from engine.device.tegra_parse import TegrastatsFormatError

    with pytest.raises(TegrastatsFormatError):
        parse_line(torn)


# --------------------------------------------------------------------------- presets and totals


def test_presets_name_each_modules_rails() -> None:
    assert resolve_rails("all", NANO_RAILS) == ("VDD_IN",)
    assert resolve_rails("gpu+cpu", NANO_RAILS) == ("VDD_CPU_GPU_CV", "VDD_SOC")
    assert resolve_rails("all", AGX_RAILS) == AGX_RAILS
    assert resolve_rails("gpu+cpu", AGX_RAILS) == ("VDD_GPU_SOC", "VDD_CPU_CV")
    assert resolve_rails("VDD_CPU_GPU_CV", NANO_RAILS) == ("VDD_CPU_GPU_CV",)
    assert rail_set_of(NANO_RAILS).parts == ("VDD_CPU_GPU_CV", "VDD_SOC")
    with pytest.raises(ConfigError, match="gpu\\+cpu preset is not known") as err:
        preset_rails("gpu+cpu", ("RAIL_A9", "RAIL_B9"))
    assert "--rails RAIL_A9,RAIL_B9" in err.value.remedy


def test_an_unknown_rail_set_is_summed_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="engine.device.rails"):
        assert PowerSample(0.0, {"RAIL_X1": 100.0, "RAIL_Y1": 50.0}).total_mw == 150.0
        assert PowerSample(0.0, {"VDD_IN": 900.0, "RAIL_Z1": 50.0}).total_mw == 900.0  # an input rail: the total
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "RAIL_X1, RAIL_Y1 is not one this project knows" in said and "sum of every rail" in said
    assert "taking VDD_IN, the module's input" in said


class _NanoMeter:
    """An Orin Nano's rails at a constant power, with the sensor's own clock."""

    source = "measured"
    min_interval_s = 0.0

    def __init__(self) -> None:
        self.t = 0.0

    def now(self) -> float:
        return self.t

    def read(self) -> PowerSample:
        return PowerSample(self.t, {"VDD_IN": 9000.0, "VDD_CPU_GPU_CV": 4000.0, "VDD_SOC": 2000.0})

    def energy_counter(self) -> None:
        return None


def test_the_monitor_totals_an_orin_nano_by_its_input_rail() -> None:
    meter = _NanoMeter()
    mon = PowerMonitor(meter, rails="all")
    mon.sample_once()
    mon.begin_window("w")
    meter.t = 2.0
    mon.sample_once()
    res = mon.end_window("w")
    assert res.rails == ("VDD_IN",)
    assert res.total_energy_j == pytest.approx(18.0)  # 9 W for 2 s, not (9 + 4 + 2) W
    assert res.energy_j["VDD_SOC"] == pytest.approx(4.0)  # every rail is still kept


# --------------------------------------------------------------------------- through the CLI


def _log(tmp_path: Path, line: str, seconds: int) -> Path:
    """A log of `line` once a second (its date moved on each time)."""
    body = line.split(" ", 2)[2]  # the line without its date
    log = tmp_path / "tegrastats.log"
    log.write_text("".join(f"07-25-2026 09:08:{s:02d} {body}\n" for s in range(seconds + 1)))
    return log


@pytest.mark.parametrize("name, watts", [("jp7-agx-orin", 13.907), ("jp6-orin-nano", 14.218)])
def test_import_tegrastats_stores_the_modules_energy(name: str, watts: float, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "r.sqlite")
    log = _log(tmp_path, _public(name), seconds=10)
    assert main(["import-tegrastats", str(log), "--label", name, "--db", db, "--model", "m", "--task", "sst2",
                 "--batch-size", "8", "--seq-len", "32", "--precision", "fp32"]) == 0
    run_id = capsys.readouterr().out.split()[-1]
    assert main(["show", run_id, "--db", db, "--json"]) == 0
    run = json.loads(capsys.readouterr().out)
    run = run.get("run", run)
    assert run["time_s"] == pytest.approx(10.0)
    assert run["energy_j"] == pytest.approx(10 * watts)
    assert run["source"] == "measured"


def test_live_tegrastats_reads_jetpack7_rails(tmp_path: Path) -> None:
    script = tmp_path / "tegrastats"
    script.write_text(f"#!{sys.executable}\nimport sys, time\nwhile True:\n"
                      f"    print({_public('jp7-agx-orin')!r}, flush=True)\n    time.sleep(0.02)\n")
    script.chmod(0o755)
    with TegrastatsSource(interval_ms=20, command=str(script)) as src:
        sample = src.read()
    assert sample.rails_mw == {"VDD_GPU_SOC": 5139, "VDD_CPU_CV": 3268, "VIN_SYS_5V0": 5500}
    assert src.skipped == 0


def test_jtop_source_keeps_the_input_rail() -> None:
    """jtop moves VDD_IN out of its rails into its total: the source puts it back, so the total is VDD_IN."""
    from engine.device.jtop_backend import JtopPowerSource

    class Jtop:
        power = {"rail": {"VDD_CPU_GPU_CV": {"online": True, "volt": 5000, "curr": 400, "power": 2000},
                          "VDD_SOC": {"online": True, "volt": 5000, "curr": 300, "power": 1500}},
                 "tot": {"online": True, "volt": 5000, "curr": 1800, "power": 9000, "name": "VDD_IN"}}

        def start(self) -> None: ...
        def close(self) -> None: ...

    src = JtopPowerSource(Jtop())
    sample = src.read()
    assert set(sample.rails_mw) == set(NANO_RAILS)
    assert sample.total_mw == pytest.approx(9000.0)


def _nano_rail_tree(tmp_path: Path) -> Path:
    """A board tree whose INA3221 reports an Orin Nano's three rails (9 W in, 4 W + 2 W of it in parts)."""
    from dataclasses import replace

    from engine.device.treegen import RailSpec, default_orin_spec, render_tree

    root = tmp_path / "board"
    rails = (RailSpec("VDD_IN", "1-0040", 1, 5000, 1800), RailSpec("VDD_CPU_GPU_CV", "1-0040", 2, 5000, 800),
             RailSpec("VDD_SOC", "1-0040", 3, 5000, 400))
    render_tree(root, replace(default_orin_spec("r36"), rails=rails))
    return root


def test_device_and_monitor_total_an_orin_nano_by_vdd_in(tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    root = _nano_rail_tree(tmp_path)
    assert main(["device", "--sysfs-root", str(root), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["total_power_mw"] == pytest.approx(9000.0)  # not 15000
    assert main(["monitor", "--sysfs-root", str(root), "--seconds", "0.5", "--json"]) == 0
    window = json.loads(capsys.readouterr().out)
    assert window["rails"] == ["VDD_IN"]
    assert window["avg_power_w"] == pytest.approx(9.0)
    assert window["energy_j"]["VDD_SOC"] == pytest.approx(2.0 * window["duration_s"])


def test_import_sweep_rail_sets_name_the_modules_total() -> None:
    """import-sweep's `rails` cell on an Orin Nano's tables: `all` is VDD_IN, and naming VDD_IN is `all`.
    (No Orin Nano profile ships on this branch, so the tables are built here; the profiles part adds them.)"""
    from engine.results.imports.fields import BoardTables, rail_set

    nano = BoardTables("orin-nano-8gb", (), (), (), NANO_RAILS, ())
    assert rail_set("all", nano) == ("all", ("VDD_IN",))
    assert rail_set("VDD_IN", nano) == ("all", ("VDD_IN",))
    assert rail_set("gpu+cpu", nano) == ("gpu+cpu", ("VDD_CPU_GPU_CV", "VDD_SOC"))
    assert rail_set("VDD_IN+VDD_CPU_GPU_CV+VDD_SOC", nano) == ("VDD_IN,VDD_CPU_GPU_CV,VDD_SOC", NANO_RAILS)
    agx = BoardTables("agx-orin-64gb", (), (), (), AGX_RAILS, ())
    assert rail_set("VDD_GPU_SOC+VDD_CPU_CV+VIN_SYS_5V0+VDDQ_VDD2_1V8AO", agx) == ("all", AGX_RAILS)  # as before
