"""JetPack's Python stack: a library installed but refusing this NumPy (pyarrow 26 under JetPack 6's NumPy 1)
is a clear error naming the numpy1 extra, through each command that needs one; every dependency imports in
the environment the tests run in (CI's numpy<2 step runs them there); NumPy 2's pickles of random
generators load under NumPy 1; the README's test command checks that the code runs on Python 3.10."""

from __future__ import annotations

import importlib
import shlex
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from engine.cli import main
from refusals import PYARROW_UNDER_NUMPY1, refuse_import

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 (JetPack 6)
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
FINETUNE = ["finetune", "--model", "bert-tiny", "--task", "sst2", "--steps", "1", "--batch-size", "2",
            "--max-seq-len", "8", "--train-samples", "4", "--eval-samples", "2"]


@pytest.fixture
def numpy1(monkeypatch: pytest.MonkeyPatch) -> str:
    """The installed NumPy reads as JetPack 6's (the engine reads its version from metadata)."""
    monkeypatch.setattr("engine.core.optional.numpy_version", lambda: "1.26.4")
    return "1.26.4"


def _refused(err: str, library: str) -> None:
    assert f"needs {library}, which is installed but does not import here: {PYARROW_UNDER_NUMPY1}" in err
    assert "NumPy 1.26.4 is installed" in err and "pip install -e '.[numpy1]'" in err
    assert "Traceback" not in err and "not installed" not in err


def test_glue_from_the_hub_with_datasets_refusing_numpy1(isolated_env: object, numpy1: str,
                                                         capsys: pytest.CaptureFixture[str],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    refuse_import(monkeypatch, "datasets")  # datasets imports pyarrow, which refuses NumPy 1
    assert main([*FINETUNE, "--data", "hub"]) == 2
    _refused(capsys.readouterr().err, "datasets")


def test_lora_with_peft_refusing_numpy1(isolated_env: object, numpy1: str, capsys: pytest.CaptureFixture[str],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    refuse_import(monkeypatch, "peft")
    assert main([*FINETUNE, "--mode", "lora"]) == 2
    _refused(capsys.readouterr().err, "peft")


def test_fleet_with_ray_refusing_numpy1(isolated_env: object, numpy1: str, capsys: pytest.CaptureFixture[str],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    refuse_import(monkeypatch, "ray")
    assert main(["fleet", "status", "--twins", "1"]) == 2
    _refused(capsys.readouterr().err, "ray")


def _declared() -> list[str]:
    """The distributions pyproject asks for here: the dependencies and the test extra (markers applied)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = [Requirement(r) for r in (*project["dependencies"], *project["optional-dependencies"]["test"])]
    return sorted({r.name for r in reqs if r.marker is None or r.marker.evaluate()})


def _modules(dist: str) -> list[str]:
    """The top-level modules a distribution installs (`scikit-learn` -> `sklearn`)."""
    return sorted(m for m, dists in metadata.packages_distributions().items()
                  if dist.lower().replace("_", "-") in {d.lower().replace("_", "-") for d in dists}
                  and m.isidentifier() and not m.startswith("_"))


@pytest.mark.parametrize("dist", _declared())
def test_every_dependency_imports_beside_the_installed_numpy(dist: str) -> None:
    """Under numpy<2 (CI's second step, a JetPack board) a release that needs NumPy 2 fails here by name:
    pyarrow 26, pulled in by datasets, did."""
    modules = _modules(dist)
    assert modules, f"{dist} is declared in pyproject but installs no module here"
    for module in modules:
        importlib.import_module(module)


def _readme_vermin() -> list[str]:
    """The Python 3.10 check in the README's test command (the one .ci/run runs), as argv."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    command = next(line for line in readme.splitlines()
                   if line.startswith("python3 -m venv .venv") and line.rstrip().endswith(".venv/bin/pytest"))
    step = next((s.strip() for s in command.split("&&") if s.strip().startswith(".venv/bin/vermin")), None)
    assert step is not None, "the README's test command does not run vermin"
    assert command in (ROOT / ".ci" / "run").read_text(encoding="utf-8"), ".ci/run does not run the README's command"
    argv = shlex.split(step)
    assert "-t=3.10-" in argv, f"{step}: not a Python 3.10 target"
    return argv


def test_the_readme_check_refuses_code_that_needs_python_311(tmp_path: Path) -> None:
    argv = _readme_vermin()
    paths = [a for a in argv[1:] if not a.startswith("-") and (ROOT / a).is_dir()]
    assert set(paths) >= {"engine", "tui", "tests", "bench"}, f"vermin checks {paths} only"
    flags = [a for a in argv[1:] if a not in paths]
    (tmp_path / "new.py").write_text("import tomllib\nfrom datetime import UTC\n\n\n"
                                     "def f() -> None:\n    try:\n        pass\n    except* ValueError:\n"
                                     "        pass\n")
    (tmp_path / "old.py").write_text("from __future__ import annotations\n\n\ndef f(x: int | None) -> list[int]:\n"
                                     "    match x:\n        case None:\n            return []\n"
                                     "    return [x]\n")
    vermin = str(Path(sys.executable).with_name("vermin"))
    new = subprocess.run([vermin, *flags, str(tmp_path / "new.py")], capture_output=True, text=True)
    assert new.returncode != 0
    assert all(f"{use} requires !2, 3.11" in new.stdout for use in ("'tomllib' module", "'datetime.UTC' member",
                                                                    "`except*`")), new.stdout
    old = subprocess.run([vermin, *flags, str(tmp_path / "old.py")], capture_output=True, text=True)
    assert old.returncode == 0, old.stdout + old.stderr


@pytest.mark.slow
def test_the_code_runs_on_python_310() -> None:
    """The README's check over the repository (the quick start runs it too; a plain `pytest -m slow` here)."""
    argv = _readme_vermin()
    proc = subprocess.run([str(Path(sys.executable).with_name("vermin")), *argv[1:]], cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_random_generators_pickled_under_numpy2_continue_their_streams_here() -> None:
    """scikit-learn's estimators keep random generators, so the shipped selector (saved under NumPy 2)
    carries NumPy 2's pickles of them; under NumPy 1 they must load and go on where they stopped.
    tests/data/numpy2-random.pkl was written by NumPy 2.4.6: a Generator (default_rng(7)) and a
    RandomState (11), each drawn from, and the next four draws of each."""
    import pickle

    from engine.core.numpy_pickles import read_numpy2_pickles

    read_numpy2_pickles()
    data = pickle.loads((ROOT / "tests" / "data" / "numpy2-random.pkl").read_bytes())
    assert data["numpy"].startswith("2.")
    assert data["generator"].random(4).tolist() == data["generator_next"]
    assert data["randomstate"].rand(4).tolist() == data["randomstate_next"]
    again = pickle.loads(pickle.dumps(data["generator"]))  # and saved again here, in this NumPy's form
    assert again.random(2).tolist() == data["generator"].random(2).tolist()
