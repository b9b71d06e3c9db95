"""jtop (jetson-stats) as an optional power source and mode switch, with a fake jtop object."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from engine.device import jtop_backend
from engine.device.jtop_backend import JtopControl, JtopPowerSource, jtop_available
from engine.core.errors import DeviceError


class FakeJtop:
    """The parts of jtop.jtop the backend uses, with jtop's data shapes."""

    def __init__(self, fail_start: Exception | None = None) -> None:
        self.fail_start = fail_start
        self.started = self.closed = False
        self.power = {
            "rail": {
                "VDD_GPU_SOC": {"online": True, "type": "INA3221", "volt": 4984, "curr": 480, "power": 2392, "avg": 2392},
                "VDD_CPU_CV": {"online": True, "type": "INA3221", "volt": 4984, "curr": 80, "power": 398, "avg": 398},
                "VIN_SYS_5V0": {"online": False, "type": "INA3221", "volt": 5040, "curr": 800, "power": 4032, "avg": 4032},
            },
            "tot": {"power": 6822, "avg": 6822, "name": "ALL"},
        }
        self._mode = SimpleNamespace(id=0, name="MAXN")
        self.jetson_clocks_set: list[bool] = []

    def start(self) -> None:
        if self.fail_start:
            raise self.fail_start
        self.started = True

    def close(self) -> None:
        self.closed = True

    @property
    def nvpmodel(self) -> Any:
        return self._mode

    @nvpmodel.setter
    def nvpmodel(self, value: int) -> None:
        if value not in (0, 1, 2, 3):
            raise RuntimeError(f"nvpmodel {value} does not exist")
        self._mode = SimpleNamespace(id=value, name=["MAXN", "MODE_15W", "MODE_30W", "MODE_50W"][value])

    @property
    def jetson_clocks(self) -> bool:
        return bool(self.jetson_clocks_set and self.jetson_clocks_set[-1])

    @jetson_clocks.setter
    def jetson_clocks(self, value: bool) -> None:
        self.jetson_clocks_set.append(value)


def test_rails_from_jtop_power() -> None:
    src = JtopPowerSource(FakeJtop())
    rails = {r.name: r for r in src.rails()}
    assert set(rails) == {"VDD_GPU_SOC", "VDD_CPU_CV"}  # offline rails are skipped
    assert rails["VDD_GPU_SOC"].power_mw == pytest.approx(4984 * 480 / 1000)
    assert src.total_mw() == 6822.0


def test_jtop_source_feeds_the_power_monitor() -> None:
    from engine.device.monitor import PowerMonitor
    from engine.device.power import PowerSource

    src = JtopPowerSource(FakeJtop(), interval_s=0.5)
    assert isinstance(src, PowerSource)
    assert src.source.value == "measured" and src.min_interval_s == 0.5
    sample = src.read()
    assert sample.rails_mw["VDD_GPU_SOC"] == pytest.approx(4984 * 480 / 1000)
    mon = PowerMonitor(src, rails="gpu+cpu")
    mon.sample_once()
    latest = mon.latest()
    assert latest is not None and set(latest.rails_mw) == {"VDD_GPU_SOC", "VDD_CPU_CV"}


def test_control_through_the_service() -> None:
    fake = FakeJtop()
    ctl = JtopControl(fake)
    assert ctl.power_mode() == (0, "MAXN")
    ctl.set_power_mode(2)
    assert ctl.power_mode() == (2, "MODE_30W")
    ctl.set_jetson_clocks(True)
    assert fake.jetson_clocks_set == [True]
    with pytest.raises(DeviceError) as err:
        ctl.set_power_mode(8)
    assert "switch to power mode 8" in str(err.value) and "jtop.service" in err.value.remedy


def test_an_absent_service_is_a_message_not_a_crash() -> None:
    fake = FakeJtop(fail_start=RuntimeError("The jtop.service is not active. Please run: sudo jtop --install-service"))
    src = JtopPowerSource(factory=lambda interval: fake)
    with pytest.raises(DeviceError) as err:
        src.rails()
    assert "cannot connect to the jtop service" in str(err.value) and "not active" in str(err.value)


def test_an_owned_session_is_closed() -> None:
    fake = FakeJtop()
    with JtopPowerSource(factory=lambda interval: fake, interval_s=0.25) as src:
        assert len(src.rails()) == 2 and fake.started
    assert fake.closed
    borrowed = FakeJtop()
    with JtopPowerSource(borrowed):
        pass
    assert not borrowed.closed  # not ours to close


def test_jtop_available_reasons(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ok, why = jtop_available(tmp_path)
    if importlib.util.find_spec("jtop") is not None:
        assert not ok and "jtop.sock" in why and "systemctl" in why
        (tmp_path / "run").mkdir()
        (tmp_path / "run/jtop.sock").write_text("")
        assert jtop_available(tmp_path) == (True, f"jtop service at {tmp_path / 'run/jtop.sock'}")
    monkeypatch.setattr(jtop_backend.importlib.util, "find_spec", lambda name: None)
    ok, why = jtop_available(tmp_path)
    assert not ok and "jetson-stats" in why
