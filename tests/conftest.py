"""Shared fixtures: an isolated environment (every location of engine.core.paths under the
test's tmp_path, the hub offline), and fake Jetson trees rendered by engine.device.treegen."""

from __future__ import annotations

import contextlib

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from engine.device.treegen import TreeLayout, default_orin_spec, render_tree

if TYPE_CHECKING:
    import sqlite3
    from engine.device.session import DeviceSession
    from engine.results.store import Store


@dataclass(frozen=True)
class IsolatedEnv:
    """Where the engine reads and writes during one test."""

    state_dir: Path  # journals, locks, the persistent twin tree
    data_dir: Path  # the default results store, user selectors, exports
    cache_dir: Path  # step traces


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A step-trace cache shared by one module's tests: traces are deterministic, so sharing them
    only saves tracing the same workload again."""
    return tmp_path_factory.mktemp("cache")


@pytest.fixture
def isolated_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, cache_dir: Path) -> IsolatedEnv:
    """Keeps a test off the user's state, data and cache directories and off the network:
    SLM_DVFS_STATE_DIR, SLM_DVFS_DATA_DIR and SLM_DVFS_TWIN_DIR under tmp_path, SLM_DVFS_CACHE_DIR the module's
    cache, HF_HUB_OFFLINE set, no SLM_DVFS_DB (the store is the data dir's)."""
    env = IsolatedEnv(tmp_path / "state", tmp_path / "data", cache_dir)
    monkeypatch.setenv("SLM_DVFS_STATE_DIR", str(env.state_dir))
    monkeypatch.setenv("SLM_DVFS_TWIN_DIR", str(env.state_dir / "twin"))  # not the default /dev/shm: removed with tmp_path
    monkeypatch.setenv("SLM_DVFS_DATA_DIR", str(env.data_dir))
    monkeypatch.setenv("SLM_DVFS_CACHE_DIR", str(env.cache_dir))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("SLM_DVFS_DB", raising=False)
    return env


@pytest.fixture
def twin_session(isolated_env: IsolatedEnv, tmp_path: Path) -> Iterator[DeviceSession]:
    """A session on the AGX Orin 64GB twin (not paced in real time), its tree under tmp_path."""
    from engine.device.session import open_device

    with open_device(twin="agx-orin-64gb", realtime=False, twin_dir=tmp_path / "twin") as session:
        yield session


@pytest.fixture(scope="module")
def offline_module(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A module's own cache (trained tokenizers, traces), state and data folders, torch on one
    thread (tiny models: threads only contend), and never the network."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    with pytest.MonkeyPatch.context() as mp:
        for var, name in (("SLM_DVFS_CACHE_DIR", "cache"), ("SLM_DVFS_STATE_DIR", "state"),
                          ("SLM_DVFS_DATA_DIR", "data"), ("SLM_DVFS_TWIN_DIR", "twin")):
            mp.setenv(var, str(tmp_path_factory.mktemp(name)))
        mp.setenv("HF_HUB_OFFLINE", "1")
        yield
    torch.set_num_threads(threads)


@contextlib.contextmanager
def fleet_isolation(base: Path) -> Iterator[None]:
    """For a module's local Ray fleet: state, data and cache folders under `base` (the twins' board
    actors inherit the environment), offline, no Ray token auth, no outside cluster."""
    with pytest.MonkeyPatch.context() as mp:
        for var, name in (("SLM_DVFS_CACHE_DIR", "cache"), ("SLM_DVFS_STATE_DIR", "state"),
                          ("SLM_DVFS_DATA_DIR", "data"), ("SLM_DVFS_TWIN_DIR", "twin")):
            mp.setenv(var, str(base / name))
        mp.setenv("HF_HUB_OFFLINE", "1")
        mp.setenv("RAY_AUTH_MODE", "disabled")
        mp.delenv("RAY_ADDRESS", raising=False)
        yield


def twin_gpu_files(folder: Path) -> dict[str, tuple[str, ...]]:
    """Each twin's GPU clock files (min, max, governor) under a fleet's twins folder: what a board's
    clock guard must leave as it found them."""
    out = {}
    for twin in sorted(folder.iterdir()):
        gpu = twin / "sys/class/devfreq/17000000.gpu"
        out[twin.name] = tuple((gpu / n).read_text().strip() for n in ("min_freq", "max_freq", "governor"))
    return out


@pytest.fixture(scope="module")
def selector_trace_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One trace cache for a module's tests (the selector tests trace the same zoo models),
    shared across the session: traces are keyed by everything they depend on."""
    path = tmp_path_factory.getbasetemp() / "selector-cache"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SLM_DVFS_CACHE_DIR", str(path))
        yield path


@pytest.fixture
def results_store(tmp_path: Path) -> Iterator[Store]:
    """An empty results store under tmp_path."""
    from engine.results.store import Store

    with Store(tmp_path / "results.sqlite") as store:
        yield store


@pytest.fixture(params=["r38", "r36", "r35", "r32"])
def orin_tree(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Path, TreeLayout]:
    """An AGX Orin 64GB tree in each L4T layout: (root, layout)."""
    root = tmp_path / f"root-{request.param}"
    return root, render_tree(root, default_orin_spec(request.param))


@pytest.fixture
def r36_tree(tmp_path: Path) -> tuple[Path, TreeLayout]:
    root = tmp_path / "root-r36"
    return root, render_tree(root, default_orin_spec("r36"))


@pytest.fixture
def fake_tools():
    """Marks a tree as a test tree whose nvpmodel / jetson_clocks run in-process (nothing under a
    handed root is executed); each call is logged in ROOT/<tool>.calls. Returns those logs."""
    from engine.device.sysfs import FAKE_L4T_MARKER

    def install(root: Path) -> tuple[Path, Path]:
        (root / FAKE_L4T_MARKER).write_text("test tree\n")
        (root / FAKE_L4T_MARKER).chmod(0o644)
        return root / "nvpmodel.calls", root / "jetson_clocks.calls"

    return install


def migrate(conn: "sqlite3.Connection", version: int) -> None:
    """Build a store's schema as version `version` left it (the first `version` migrations)."""
    from engine.results import migrations

    for step in migrations.MIGRATIONS[:version]:
        if callable(step):
            step(conn)
        else:
            for statement in step:
                conn.execute(statement)
