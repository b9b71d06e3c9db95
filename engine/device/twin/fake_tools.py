"""The twin's stand-ins for L4T's `nvpmodel` and `jetson_clocks`.

The logic lives in `engine.device.jetson.fake_l4t`, which `engine.device.jetson.l4t_tools` calls
in-process on a twin's tree: nothing under the tree is executed. `install` also writes two
small scripts at the tools' L4T paths, for a person who wants to run them by hand.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from engine.device.treefs import put_file
from engine.device.jetson.fake_l4t import (  # noqa: F401 - the twin's tools, by their old names
    DEFAULT_STORE,
    JETSON_CLOCKS_PATH,
    NVPMODEL_PATH,
    apply_mode,
    current_mode_id,
    jetson_clocks_main,
    nvpmodel_main,
)

_SCRIPT = """#!{python}
# slm-dvfs digital twin: a stand-in for L4T's {tool}, acting on the tree under {root!r}.
# slm-dvfs itself never runs this file: it calls the same function in-process.
import sys
sys.path.append({src!r})
from engine.device.jetson.fake_l4t import {func}
sys.exit({func}({root!r}, sys.argv[1:]))
"""


def install(root: str | os.PathLike[str]) -> tuple[Path, Path]:
    """Write the fake `nvpmodel` and `jetson_clocks` scripts under root (for use by hand)."""
    root = Path(root).resolve()
    src = str(Path(__file__).resolve().parents[3])  # the folder holding `engine/`
    out = []
    for rel, tool, func in (
        (NVPMODEL_PATH, "nvpmodel", "nvpmodel_main"),
        (JETSON_CLOCKS_PATH, "jetson_clocks", "jetson_clocks_main"),
    ):
        text = _SCRIPT.format(python=sys.executable, tool=tool, root=str(root), src=src, func=func)
        put_file(root, rel, text.encode(), mode=0o755)  # never through a link someone put in the tree
        out.append(root / rel)
    return out[0], out[1]
