"""Shared fixtures: fake Jetson trees rendered by engine.device.treegen."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from engine.device.treegen import TreeLayout, default_orin_spec, render_tree


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
