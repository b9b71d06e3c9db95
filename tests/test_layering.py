"""The layers: the engine is a library first (no TUI, no textual), imports point down, one code path."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

_CHECK = """
import importlib, pkgutil, sys
import engine
names = [m.name for m in pkgutil.walk_packages(engine.__path__, "engine.")]
for name in names:
    if name == "engine.__main__":
        continue
    importlib.import_module(name)
bad = sorted(m for m in sys.modules if m == "textual" or m.startswith(("textual.", "tui")))
print(len(names))
print(",".join(bad))
"""


def test_engine_never_imports_textual() -> None:
    out = subprocess.run([sys.executable, "-c", _CHECK], capture_output=True, text=True, check=True).stdout
    count, bad = out.strip().split("\n") if "\n" in out.strip() else (out.strip(), "")
    assert int(count) > 30  # really walked the package
    assert bad == "", f"engine imported {bad}"


def test_import_contracts_hold() -> None:
    # The contracts live in pyproject.toml: engine never imports tui, tui never imports engine.cli,
    # the layers only point down (dvfs never imports selector, device and workload never import each
    # other), and no two sibling packages or modules import each other.
    root = Path(__file__).resolve().parent.parent
    lint = Path(sys.executable).with_name("lint-imports")
    proc = subprocess.run([str(lint) if lint.exists() else "lint-imports"], cwd=root, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "BROKEN" not in proc.stdout and proc.stdout.count("KEPT") >= 4


_TWIN_BRANCH = re.compile(r"twin (is|is not) None|session\.twin\b")


def test_nothing_outside_the_device_layer_asks_whether_the_board_is_a_twin() -> None:
    # One code path for board and twin: only engine/device/ (and UI policy in tui/) may branch on it.
    engine = Path(__file__).resolve().parent.parent / "engine"
    found = [f"{path.relative_to(engine.parent)}:{n}: {line.strip()}"
             for path in sorted(engine.rglob("*.py")) if "device" not in path.relative_to(engine).parts[:1]
             for n, line in enumerate(path.read_text().splitlines(), 1) if _TWIN_BRANCH.search(line)]
    assert found == [], "\n".join(found)


def test_the_cli_starts_without_torch() -> None:
    # `slm-dvfs --help` and every command's parser: torch (seconds to import, more on the Orin's
    # ARM cores) is imported only by the commands that train.
    code = "import sys, engine.cli; engine.cli.build_parser(); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_resolving_a_workload_and_predicting_import_nothing_heavy() -> None:
    # What `select`, `sweep --fast` and `run --simulate` use once a trace is cached: torch and
    # transformers are imported where a model is built or traced, scikit-learn where one is trained.
    modules = ("engine.workload.resolve", "engine.workload.models", "engine.workload.trace.trace_cache",
               "engine.selector.features", "engine.selector.selector", "engine.selector.persistence",
               "engine.selector.compact", "engine.run.harness", "engine.device.twin.fast")
    code = ("import importlib, sys\n"
            f"for name in {modules!r}: importlib.import_module(name)\n"
            "print(','.join(sorted({m.split('.')[0] for m in sys.modules}"
            " & {'torch', 'transformers', 'sklearn', 'scipy', 'pandas', 'pyarrow'})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == ""
