"""tegrastats: line parser (r32 to r36), log import with energy, and the live source.

The logs in tests/data are written for these tests in the exact format of real tegrastats
output (field order and spelling as printed by L4T and as parsed by jetson-stats'
jtop/core/tegra_parse.py), not captured on a board:
- tegrastats_r35.log: JetPack 5.1 (L4T r35), AGX Orin 64GB, MAXN, run as root with
  `--interval 1000 --logfile`; idle, then a fine-tuning run starts. Dated lines, `NC`
  rails, `GR3D_FREQ N%@[MHz,MHz]`, -256C for powered-down zones.
- tegrastats_r36.log: JetPack 6.0 (L4T r36.3), AGX Orin 64GB, MODE_30W (4 cores off),
  not root, `--interval 500`: two dated lines per second, `GR3D_FREQ N%`, no EMC_FREQ,
  lower-case temperature names.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest

from engine.device.tegra_parse import TegrastatsFormatError, import_log, parse_line, parse_lines
from engine.device.tegrastats import TegrastatsSource
from engine.core.errors import ConfigError, DeviceError
from engine.device.monitor import PowerMonitor
from engine.core.provenance import Source

DATA = Path(__file__).parent / "data"
R35 = DATA / "tegrastats_r35.log"
R36 = DATA / "tegrastats_r36.log"
ORIN_RAILS = ("VDD_GPU_SOC", "VDD_CPU_CV", "VIN_SYS_5V0", "VDDQ_VDD2_1V8AO")


def _line(path: Path, n: int) -> str:
    return path.read_text().splitlines()[n - 1]


# ----------------------------------------------------------------------------- parser


def test_parse_r35_line_values() -> None:
    s = parse_line(_line(R35, 5))
    assert s.timestamp == datetime(2023, 11, 21, 10, 15, 5)
    assert (s.ram_used_mb, s.ram_total_mb) == (7012, 62841)
    assert len(s.cpus) == 12 and all(c.online for c in s.cpus)
    assert (s.cpus[0].load_pct, s.cpus[0].freq_mhz) == (96, 2201)
    assert (s.cpus[1].load_pct, s.cpus[1].freq_mhz) == (14, 2201)
    assert (s.emc.load_pct, s.emc.freq_mhz) == (31, 3199)
    assert (s.gr3d.load_pct, s.gr3d.freq_mhz, s.gr3d.freqs_mhz) == (97, 1300, (1300, 1300))
    assert s.temperatures_c["CPU"] == pytest.approx(45.812)
    assert s.temperatures_c["GPU"] == pytest.approx(46.5)
    assert s.temperatures_c["Tboard"] == 32.0
    assert "CV0" not in s.temperatures_c  # -256C: zone powered down
    assert tuple(s.rails) == ORIN_RAILS  # the two `NC 0mW/0mW` channels are dropped
    gpu = s.rails["VDD_GPU_SOC"]
    assert (gpu.instant_mw, gpu.average_mw) == (11993, 4557)
    assert s.rails_mw()["VDDQ_VDD2_1V8AO"] == 1203


def test_parse_r36_line_values() -> None:
    s = parse_line(_line(R36, 4))
    assert s.timestamp == datetime(2024, 5, 7, 14, 3, 34)
    assert (s.ram_used_mb, s.ram_total_mb) == (6998, 62841)
    assert [c.online for c in s.cpus] == [True] * 8 + [False] * 4
    assert (s.cpus[0].load_pct, s.cpus[0].freq_mhz) == (93, 1728)
    assert s.cpus[11].load_pct is None and s.cpus[11].freq_mhz is None
    assert s.emc is None  # not printed without root
    assert (s.gr3d.load_pct, s.gr3d.freq_mhz, s.gr3d.freqs_mhz) == (88, None, ())
    assert s.temperatures_c == pytest.approx(
        {"cpu": 45.656, "soc2": 43.25, "soc0": 44.25, "gpu": 43.875, "tj": 46.031, "soc1": 43.312}
    )
    assert tuple(s.rails) == ORIN_RAILS
    assert (s.rails["VDD_CPU_CV"].instant_mw, s.rails["VDD_CPU_CV"].average_mw) == (1998, 1199)
    assert "NVENC" not in s.rails and "APE" not in s.rails


def test_parse_other_variants() -> None:
    # r35 single-frequency GR3D, no date
    s = parse_line(
        "RAM 2371/62841MB (lfb 14629x4MB) SWAP 0/31421MB (cached 0MB) CPU [1%@729,0%@729] "
        "EMC_FREQ 0%@2133 GR3D_FREQ 0%@305 VIC_FREQ 729 APE 174 tj@47.1C VDD_GPU_SOC 2399mW/2399mW"
    )
    assert s.timestamp is None
    assert (s.gr3d.load_pct, s.gr3d.freq_mhz) == (0, 305)
    assert s.temperatures_c == {"tj": pytest.approx(47.1)}
    # r32 Nano: unitless POM_ rails, engines without frequency
    nano = parse_line(
        "RAM 1766/3964MB (lfb 197x4MB) SWAP 0/2048MB (cached 0MB) CPU [24%@1224,15%@1224,13%@1224,10%@1224] "
        "EMC_FREQ 0% GR3D_FREQ 0% PLL@21C CPU@25C PMIC@100C GPU@23.5C AO@33.5C thermal@24.5C "
        "POM_5V_IN 2545/2547 POM_5V_GPU 0/0 POM_5V_CPU 549/529"
    )
    assert nano.rails_mw() == {"POM_5V_IN": 2545, "POM_5V_GPU": 0, "POM_5V_CPU": 549}
    assert nano.rails["POM_5V_CPU"].average_mw == 529
    assert (nano.emc.load_pct, nano.emc.freq_mhz) == (0, None)
    # r28 shared CPU frequency and VDD_IN; ISO date with fractions
    old = parse_line(
        "2024-01-02 03:04:05.250 RAM 3468/3983MB (lfb 48x4MB) CPU [17%,off,29%,5%]@1734 "
        "EMC_FREQ 1%@1600 GR3D_FREQ 39%@76 VDD_IN 3044/3044 VDD_GPU 1.5W/1.2W"
    )
    assert old.timestamp == datetime(2024, 1, 2, 3, 4, 5, 250000)
    assert [(c.load_pct, c.freq_mhz) for c in old.cpus] == [(17, 1734), (None, None), (29, 1734), (5, 1734)]
    assert old.rails_mw() == {"VDD_IN": 3044, "VDD_GPU": 1500}


@pytest.mark.parametrize(
    "line",
    [
        "",
        "tegrastats: some error message",
        "SWAP 0/31421MB (cached 0MB) VDD_GPU_SOC 2399mW/2399mW",  # no RAM field
        "RAM 2371/62841MB (lfb 1x4MB) CPU [1%@729,0%@7",  # cut in the CPU list
        "RAM 2371/62841MB (lfb 1x4MB) CPU [1%@729] VDD_GPU_SOC 2399mW/2399mW VDD_CPU_CV 40",  # cut in a rail
        "RAM 2371/62841MB (lfb 1x4MB) CPU [1%@729] VDD_GPU_SOC 2399mW/23",
        "RAM 2371/62841MB (lfb 1x4MB) CPU [1%@7x9] VDD_GPU_SOC 2399mW/2399mW",
    ],
)
def test_malformed_lines_rejected(line: str) -> None:
    with pytest.raises(TegrastatsFormatError):
        parse_line(line)


def test_parse_lines_skips_and_counts(caplog: pytest.LogCaptureFixture) -> None:
    good = R35.read_text().splitlines()[:3]
    lines = [good[0], "garbage", "", good[1], good[2][:150], good[2]]
    with caplog.at_level(logging.WARNING, logger="engine.device.tegra_parse"):
        res = parse_lines(lines, origin="x.log")
    assert res.skipped == 2  # the blank line is not a malformed one
    assert len(res.samples) == 3
    assert res.line_numbers == (1, 4, 6)
    assert any("x.log:2" in r.getMessage() for r in caplog.records)
    assert any("x.log:5" in r.getMessage() for r in caplog.records)


# ----------------------------------------------------------------------------- log import


def test_import_r35_energy() -> None:
    lg = import_log(R35)
    assert lg.source is Source.MEASURED
    assert lg.rails == ORIN_RAILS
    assert len(lg.samples) == 12 and lg.skipped == 0
    assert lg.timing == "timestamps"
    assert lg.started_at == datetime(2023, 11, 21, 10, 15, 1)
    assert lg.times_s == tuple(float(i) for i in range(12))
    assert lg.duration_s == 11.0
    # hand sums of the instant column (trapezoid, 1 s spacing)
    assert lg.energy_j["VDD_GPU_SOC"] == pytest.approx(132.1225)
    assert lg.energy_j["VDD_CPU_CV"] == pytest.approx(17.984)
    assert lg.total_energy_j == pytest.approx(132.1225 + 17.984 + 59.429 + 12.4325)
    assert lg.avg_power_w == pytest.approx(lg.total_energy_j / 11.0)
    ps = lg.power_samples()
    assert ps[4].t == 4.0 and ps[4].rails_mw["VDD_GPU_SOC"] == 11993


def test_import_r36_subsecond_dates() -> None:
    spread = import_log(R36)  # two lines per dated second
    assert spread.timing == "timestamps+spread"
    assert spread.times_s == pytest.approx([0.5 * i for i in range(10)])
    assert spread.energy_j["VDD_GPU_SOC"] == pytest.approx(49.27325)
    by_interval = import_log(R36, interval_ms=500)
    assert by_interval.timing == "interval"
    assert by_interval.energy_j == pytest.approx(spread.energy_j)


def test_import_exact_energy_and_undated(tmp_path: Path) -> None:
    body = "RAM 1/2MB CPU [1%@729] VDD_GPU_SOC {p}mW/{p}mW VDD_CPU_CV 500mW/500mW\n"
    log_file = tmp_path / "plain.log"
    log_file.write_text("".join(body.format(p=p) for p in (1000, 3000, 3000)))
    with pytest.raises(ConfigError, match="interval_ms"):
        import_log(log_file)
    lg = import_log(log_file, interval_ms=1000)
    assert lg.started_at is None
    assert lg.energy_j["VDD_GPU_SOC"] == pytest.approx(2.0 + 3.0)
    assert lg.energy_j["VDD_CPU_CV"] == pytest.approx(1.0)
    assert import_log(log_file, interval_ms=250).energy_j["VDD_GPU_SOC"] == pytest.approx(1.25)


def test_import_skips_bad_lines(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    lines = R35.read_text().splitlines()
    torn_before_rails = lines[3].split(" VDD_GPU_SOC")[0]  # parses, but has no rails
    bad = [lines[0], lines[1], "###", torn_before_rails, lines[2], lines[3][:-20]]
    log_file = tmp_path / "bad.log"
    log_file.write_text("\n".join(bad) + "\n")
    with caplog.at_level(logging.WARNING):
        lg = import_log(log_file)
    assert lg.skipped == 3
    assert len(lg.samples) == 3
    assert lg.times_s == (0.0, 1.0, 2.0)
    assert lg.energy_j["VDD_GPU_SOC"] == pytest.approx(2 * 2.399)
    assert len([r for r in caplog.records if "skipped" in r.getMessage()]) >= 3


def test_import_errors(tmp_path: Path) -> None:
    junk = tmp_path / "junk.log"
    junk.write_text("hello\nworld\n")
    with pytest.raises(TegrastatsFormatError, match="no tegrastats line") as exc:
        import_log(junk)
    assert exc.value.remedy
    with pytest.raises(ConfigError, match="does not exist"):
        import_log(tmp_path / "missing.log")
    norails = tmp_path / "norails.log"
    norails.write_text("RAM 1/2MB CPU [1%@729] GR3D_FREQ 0%\n" * 3)
    with pytest.raises(TegrastatsFormatError, match="no power rails"):
        import_log(norails, interval_ms=100)


# ----------------------------------------------------------------------------- live source

_FAKE = """#!{python}
import os, sys, time
args = sys.argv[1:]
interval = int(args[args.index("--interval") + 1]) / 1000.0
with open({marker!r}, "w") as fh:
    fh.write(str(os.getpid()) + " " + " ".join(args))
sys.stderr.write({stderr!r})
if {fail!r}:
    sys.exit(3)
line = {line!r}
sys.stdout.write("garbage line\\n")
sys.stdout.flush()
while True:
    sys.stdout.write(line + "\\n")
    sys.stdout.flush()
    time.sleep(interval)
"""


def _fake_tegrastats(tmp_path: Path, line: str, fail: bool = False, stderr: str = "") -> tuple[Path, Path]:
    marker = tmp_path / "fake.args"
    script = tmp_path / "tegrastats"
    script.write_text(_FAKE.format(python=sys.executable, marker=str(marker), line=line, fail=fail, stderr=stderr))
    script.chmod(0o755)
    return script, marker


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_live_source_reads_and_stops(tmp_path: Path) -> None:
    script, marker = _fake_tegrastats(tmp_path, _line(R36, 6))
    src = TegrastatsSource(interval_ms=20, command=str(script))
    assert src.min_interval_s == pytest.approx(0.02)
    assert src.source is Source.MEASURED
    with src:
        sample = src.read()
        assert sample.rails_mw == {"VDD_GPU_SOC": 15192, "VDD_CPU_CV": 1598, "VIN_SYS_5V0": 5913, "VDDQ_VDD2_1V8AO": 1303}
        t0 = sample.t
        deadline = time.monotonic() + 5
        while src.read().t == t0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert src.read().t > t0  # new lines keep arriving
        assert src.skipped == 1  # the garbage line
        pid, args = marker.read_text().split(" ", 1)
        assert args == "--interval 20"
        assert _pid_alive(int(pid))
    assert not _pid_alive(int(pid))


def test_live_source_missing_command() -> None:
    src = TegrastatsSource(command="/nonexistent/tegrastats")
    with pytest.raises(DeviceError, match="not found") as exc:
        src.read()
    assert "L4T" in exc.value.remedy


def test_live_source_reports_child_failure(tmp_path: Path) -> None:
    script, _ = _fake_tegrastats(tmp_path, "", fail=True, stderr="tegrastats: permission denied")
    with TegrastatsSource(interval_ms=20, command=str(script)) as src:
        with pytest.raises(DeviceError, match="permission denied"):
            src.read()


def test_monitor_over_live_tegrastats(tmp_path: Path) -> None:
    """End to end: the monitor clamps to tegrastats' interval and integrates its constant power."""
    script, _ = _fake_tegrastats(tmp_path, _line(R36, 6))
    with TegrastatsSource(interval_ms=25, command=str(script)) as src:
        with PowerMonitor(src, rate_hz=200, rails="gpu+cpu") as mon:
            assert mon.interval_s == pytest.approx(0.025)
            mon.begin_window("w")
            time.sleep(0.3)
            res = mon.end_window("w")
    assert res.source is Source.MEASURED and not res.exact
    assert res.rails == ("VDD_GPU_SOC", "VDD_CPU_CV")
    assert res.avg_power_w == pytest.approx(15.192 + 1.598, rel=1e-9)
    assert res.total_energy_j == pytest.approx((15.192 + 1.598) * res.duration_s, rel=1e-9)
    assert res.samples >= 3


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), 0.0, -5.0])
def test_a_nonsense_interval_is_a_config_error_not_a_disk_error(bad: float) -> None:
    with pytest.raises(ConfigError, match="positive, finite") as err:
        import_log(R36, interval_ms=bad)
    assert "--interval" in err.value.remedy
