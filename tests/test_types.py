"""The type check: mypy, with pyproject's [tool.mypy] (strict on engine.core, the default level on
the rest), over the packages that are clean so far. A package joins CHECKED once mypy passes on it;
when the list is "engine", "tui" the README's test command runs mypy on its own."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

# At module level, where vermin (the README's Python 3.10 check) sees the version guard.
if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 (JetPack 6)
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
# engine/device holds the digital twin (engine/device/twin).
CHECKED = (
    "engine/cli",
    "engine/core",
    "engine/device",
    "engine/dvfs",
    "engine/results",
    "engine/run",
    "engine/selector",
    "engine/workload",
    "tui",
)


def test_checked_packages_type_check_clean() -> None:
    proc = subprocess.run([sys.executable, "-m", "mypy", *CHECKED], cwd=ROOT, capture_output=True, text=True)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "Success: no issues found" in output, f"mypy found problems:\n{output}"


def test_config_checks_what_the_test_does() -> None:
    """`python -m mypy` without arguments (the command docs/architecture.md gives) checks the same
    packages: pyproject's `files` and CHECKED say one thing."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    assert tuple(config["files"]) == CHECKED
    assert config["python_version"] == "3.10"
