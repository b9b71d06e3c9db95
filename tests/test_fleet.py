"""The fleet over a local Ray instance of twins (engine.run.fleet, `slm-dvfs fleet`).

One module-scoped local fleet of three twins serves the API tests; the CLI starts its own.
Ray's token auth is turned off for these local instances (nothing listens beyond localhost
that a test did not start), so nothing is written under ~/.ray."""

from __future__ import annotations

import builtins
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.core.errors import ConfigError
from engine.run.fleet import connect, parse_twins

ray = pytest.importorskip("ray")

MODELS = ("bert-tiny", "bert-mini")
TASKS = ("sst2", "mrpc")


@pytest.fixture(scope="module")
def fleet_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """State, data and cache folders of the module (the twins' actors inherit them), offline, no Ray auth."""
    base = tmp_path_factory.mktemp("fleet")
    with pytest.MonkeyPatch.context() as mp:
        for var, name in (("SLM_DVFS_CACHE_DIR", "cache"), ("SLM_DVFS_STATE_DIR", "state"),
                          ("SLM_DVFS_DATA_DIR", "data")):
            mp.setenv(var, str(base / name))
        mp.setenv("HF_HUB_OFFLINE", "1")
        mp.setenv("RAY_AUTH_MODE", "disabled")
        mp.delenv("RAY_ADDRESS", raising=False)
        yield base


@pytest.fixture(scope="module")
def fleet(fleet_env: Path) -> Iterator[object]:
    with connect(twins=3, folder=fleet_env / "twins") as f:
        yield f


def test_status_lists_three_twins_with_their_own_serials_and_roots(fleet, fleet_env: Path) -> None:
    boards = fleet.boards()
    assert sorted(b.serial for b in boards) == ["twin-0", "twin-1", "twin-2"]
    for b in boards:
        assert b.is_twin and b.profile == "agx-orin-64gb" and "P3701" in b.module and b.l4t
        assert not b.busy and b.running == ""
        assert b.power_w is not None and b.power_w > 0 and b.temps_c
    assert sorted(p.name for p in (fleet_env / "twins").iterdir()) == ["twin-0", "twin-1", "twin-2"]
    pids = {ray.get(fleet.actor(s).pid.remote()) for s in fleet.serials}
    assert len(pids) == 3 and os.getpid() not in pids  # each twin is driven by its own worker process


def test_no_ray_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    real_import = builtins.__import__

    def no_ray(name, *args, **kwargs):  # type: ignore[no-untyped-def]
        if name == "ray" or name.startswith("ray."):
            raise ImportError("No module named 'ray'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_ray)
    monkeypatch.delitem(sys.modules, "ray", raising=False)
    with pytest.raises(ConfigError) as err:
        connect(twins=2)
    assert "pip install -e '.[fleet]'" in err.value.remedy


def test_twins_syntax() -> None:
    assert parse_twins("3") == (3, "agx-orin-64gb")
    assert parse_twins("2:agx-orin-32gb") == (2, "agx-orin-32gb")
    for bad in ("0", "x", "-1:agx-orin-64gb"):
        with pytest.raises(ConfigError):
            parse_twins(bad)
