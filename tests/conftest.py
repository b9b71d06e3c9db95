"""Shared fixtures: an isolated environment (every location of engine.core.paths under the
test's tmp_path, the hub offline), and fake Jetson trees rendered by engine.device.treegen."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from engine.device.treegen import TreeLayout, default_orin_spec, render_tree

if TYPE_CHECKING:
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
    SLM_DVFS_STATE_DIR and SLM_DVFS_DATA_DIR under tmp_path, SLM_DVFS_CACHE_DIR the module's
    cache, HF_HUB_OFFLINE set, no SLM_DVFS_DB (the store is the data dir's)."""
    env = IsolatedEnv(tmp_path / "state", tmp_path / "data", cache_dir)
    monkeypatch.setenv("SLM_DVFS_STATE_DIR", str(env.state_dir))
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


@pytest.fixture
def results_store(tmp_path: Path) -> Iterator[Store]:
    """An empty results store under tmp_path."""
    from engine.results.store import Store

    with Store(tmp_path / "results.sqlite") as store:
        yield store


@pytest.fixture(params=["r36", "r35", "r32"])
def orin_tree(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Path, TreeLayout]:
    """An AGX Orin 64GB tree in each L4T layout: (root, layout)."""
    root = tmp_path / f"root-{request.param}"
    return root, render_tree(root, default_orin_spec(request.param))


@pytest.fixture
def r36_tree(tmp_path: Path) -> tuple[Path, TreeLayout]:
    root = tmp_path / "root-r36"
    return root, render_tree(root, default_orin_spec("r36"))


FAKE_NVPMODEL = '''#!{python}
"""A stand-in for L4T's nvpmodel: keeps var/lib/nvpmodel/status under its root."""
import pathlib, re, sys
root = pathlib.Path(__file__).resolve().parents[2]
with open(root / "nvpmodel.calls", "a") as fh:
    fh.write(" ".join(sys.argv[1:]) + "\\n")
status = root / "var/lib/nvpmodel/status"
conf = (root / "etc/nvpmodel.conf").read_text()
names = {{int(i): n for i, n in re.findall(r"<\\s*POWER_MODEL\\s+ID=(\\d+)\\s+NAME=(\\S+)\\s*>", conf)}}
args = sys.argv[1:]
if args[:1] == ["-q"]:
    mode = int(re.search(r"pmode:(\\d+)", status.read_text()).group(1))
    print("NV Fan Mode:quiet")
    print("NV Power Mode: " + names[mode])
    print(mode)
elif args[:1] == ["-m"] and len(args) > 1 and int(args[1]) in names:
    status.write_text("pmode:%04d fmode:quiet\\n" % int(args[1]))
else:
    print("NVPM ERROR: bad arguments " + " ".join(args), file=sys.stderr)
    sys.exit(1)
'''

FAKE_JETSON_CLOCKS = '''#!{python}
"""A stand-in for L4T's jetson_clocks: records its calls, writes --store files."""
import pathlib, sys
root = pathlib.Path(__file__).resolve().parents[2]
with open(root / "jetson_clocks.calls", "a") as fh:
    fh.write(" ".join(sys.argv[1:]) + "\\n")
if sys.argv[1:2] == ["--store"]:
    pathlib.Path(sys.argv[2]).write_text("stored\\n")
'''


def install_tool(root: Path, rel: str, template: str) -> Path:
    """Write an executable fake L4T tool at root/rel."""
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(template.format(python=sys.executable))
    path.chmod(0o755)
    return path


@pytest.fixture
def fake_tools():
    """Installs fake nvpmodel / jetson_clocks under a root at their L4T paths."""

    def install(root: Path) -> tuple[Path, Path]:
        return (
            install_tool(root, "usr/sbin/nvpmodel", FAKE_NVPMODEL),
            install_tool(root, "usr/bin/jetson_clocks", FAKE_JETSON_CLOCKS),
        )

    return install
