"""The twin's figures of the commands users act on stay what they were (a restructuring of the run
pipeline must not move them): `run --compare maxn` simulated and trained, `sweep --fast`, `select`.

tests/data/golden_figures.json holds them as the code wrote them at commit 4f4911d (issue 20's
end); `python tests/test_figures_unchanged.py` writes them again (only when a change is meant to
move a twin figure: say which and why in its commit). Each command goes through the CLI with
`--json`; only the figures are compared (ids, times of day and wording are free to change).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any, Callable

import pytest

GOLDEN = Path(__file__).parent / "data" / "golden_figures.json"
REL = 1e-9  # the twin is deterministic: the same trace and profile give the same float, to rounding

SIMULATED = ["run", "--twin", "agx-orin-64gb", "--simulate", "--model", "bert-tiny", "--task", "sst2",
             "--policy", "static:gpu=612", "--compare", "maxn", "--steps", "20", "--json"]
TRAINED = ["run", "--twin", "agx-orin-64gb", "--model", "bert-tiny", "--task", "sst2", "--policy",
           "static:gpu=816", "--compare", "maxn", "--steps", "3", "--batch-size", "4", "--max-seq-len", "16",
           "--train-samples", "16", "--eval-samples", "8", "--json"]
SWEEP = ["sweep", "--fast", "--model", "bert-tiny", "--task", "sst2", "--twin", "agx-orin-64gb", "--json"]
SELECT = ["select", "--model", "bert-small", "--task", "mnli", "--twin", "agx-orin-64gb", "--json"]


def _run_figures(out: dict[str, Any]) -> dict[str, Any]:
    def side(r: dict[str, Any]) -> dict[str, Any]:
        return {"time_s": r["time_s"], "energy_j": r["energy_j"], "rail_energy_j": r["rail_energy_j"],
                "samples": r["samples"], "steps": r["steps"], "setting": r["setting"]["label"]}

    c = out["comparison"]
    return {"run": side(out["run"]), "baseline": side(out["baseline"]),
            "saving_pct": c["saving_pct"], "slowdown_pct": c["slowdown_pct"], "rail_saving_pct": c["rail_saving_pct"]}


def _sweep_figures(out: dict[str, Any]) -> dict[str, Any]:
    return {"points": {p["label"]: [p["time_s"]["mean"], p["energy_j"]["mean"], p["samples"]] for p in out["points"]},
            "optimum": out["optimum"]["label"], "saving_pct": out["optimum_saving_vs_maxn_pct"]}


def _select_figures(out: dict[str, Any]) -> dict[str, Any]:
    iv = out["expected_saving_interval"]
    return {"setting": out["label"], "saving": out["expected_saving"], "slowdown": out["expected_slowdown"],
            "interval": [iv["low"], iv["high"]], "maxn_about_optimal": bool(out["maxn_about_optimal"])}


CASES: dict[str, tuple[list[str], Callable[[dict[str, Any]], dict[str, Any]]]] = {
    "run_simulated": (SIMULATED, _run_figures),
    "run_trained": (TRAINED, _run_figures),
    "sweep_fast": (SWEEP, _sweep_figures),
    "select": (SELECT, _select_figures),
}


def figures(case: str, capsys: Any = None) -> dict[str, Any]:
    """The case's figures from its command's `--json` (stdout captured by `capsys`, or redirected)."""
    from engine.cli import main

    argv, extract = CASES[case]
    if capsys is None:
        import contextlib
        import io

        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            assert main(argv) == 0
        text = buf.getvalue()
    else:
        capsys.readouterr()
        assert main(argv) == 0
        text = capsys.readouterr().out
    return extract(json.loads(text))


def _same(got: Any, want: Any, where: str) -> None:
    if isinstance(want, dict):
        assert isinstance(got, dict) and set(got) == set(want), f"{where}: keys {sorted(got)} != {sorted(want)}"
        for key in want:
            _same(got[key], want[key], f"{where}.{key}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), f"{where}: {got} != {want}"
        for i, (g, w) in enumerate(zip(got, want)):
            _same(g, w, f"{where}[{i}]")
    elif isinstance(want, float) and not isinstance(want, bool):
        assert math.isclose(got, want, rel_tol=REL, abs_tol=1e-12), f"{where}: {got!r} != {want!r}"
    else:
        assert got == want, f"{where}: {got!r} != {want!r}"


@pytest.mark.parametrize("case", [pytest.param(c, marks=pytest.mark.slow) if c == "run_trained" else c
                                  for c in CASES])
def test_the_twins_figures_are_unchanged(case: str, isolated_env: Any, capsys: pytest.CaptureFixture[str]) -> None:
    _same(figures(case, capsys), json.loads(GOLDEN.read_text())[case], case)


if __name__ == "__main__":  # write the golden file from this checkout's code (a fresh, isolated environment)
    import os
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        for var in ("STATE", "DATA", "CACHE"):
            os.environ[f"SLM_DVFS_{var}_DIR"] = os.path.join(tmp, var.lower())
        os.environ["HF_HUB_OFFLINE"] = "1"
        os.environ.pop("SLM_DVFS_DB", None)
        GOLDEN.write_text(json.dumps({case: figures(case) for case in CASES}, indent=1, sort_keys=True) + "\n")
    print(f"wrote {GOLDEN}", file=sys.stderr)
