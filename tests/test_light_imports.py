"""Light commands start without the heavy libraries: torch, transformers and scikit-learn take
seconds to import (more on the Orin's ARM cores), and a command that only reads the board or the
store must not pay for them. Each command runs end to end on the twin in a fresh interpreter,
which then says what it had imported."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import IsolatedEnv

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("torch", "transformers", "sklearn", "scipy", "pandas", "pyarrow")

# The command's exit code and the heavy top-level modules the interpreter holds afterwards.
_CLI = """
import json, sys
from engine.cli import main
try:
    code = main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
heavy = sorted({m.split(".")[0] for m in sys.modules} & set(%r))
print("\\n" + json.dumps({"code": code, "heavy": heavy}))
""" % (HEAVY,)

# The TUI's first screen: the app mounted on the twin, the device page showing its first reading.
_TUI = """
import asyncio, json, sys
sys.path.insert(0, %r)
from tests.tui_helpers import drive, make_app
from tui.messages import SnapshotTaken
from engine.device.session import open_device

async def first_screen(session):
    async with drive(make_app(session)) as ui:
        await ui.wait_for(SnapshotTaken, until=lambda: ui.app.last_snapshot is not None)
        page = getattr(ui.app.screen, "PAGE", type(ui.app.screen).__name__)
        await ui.press("q")
    return page

with open_device(twin="agx-orin-64gb", realtime=False, twin_dir=sys.argv[1]) as session:
    page = asyncio.run(first_screen(session))
heavy = sorted({m.split(".")[0] for m in sys.modules} & set(%r))
print("\\n" + json.dumps({"page": page, "heavy": heavy}))
""" % (str(ROOT), HEAVY)


def _run(code: str, *args: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def cli(*argv: str) -> dict:
    return _run(_CLI, *argv)


@pytest.fixture
def stored_run(isolated_env: IsolatedEnv) -> int:
    """One finished twin run with power samples in the data dir's store."""
    from engine.device.power import PowerSample
    from engine.results.records import DeviceRecord, WorkloadRecord
    from engine.results.store.db import default_db_path
    from engine.results.store import Store
    from engine.results.totals import RunTotals

    twin = DeviceRecord("NVIDIA Jetson AGX Orin Developer Kit", "P3701-0005", "36.3.0", "6.0", "agx-orin-64gb", True)
    with Store(default_db_path()) as store:
        run = store.start_run(policy="maxn", source="twin", device=twin,
                              workload=WorkloadRecord("bert-tiny", "sst2", 32, 128, "fp32"), rails="all",
                              setting={"nvpmodel": 0})
        store.finish_run(run, RunTotals(time_s=10.0, energy_j=100.0, samples=320))
        store.add_power_samples(run, [PowerSample(float(k), {"VDD_GPU_SOC": 5000.0}) for k in range(3)])
    return run


@pytest.mark.parametrize("argv", [
    ["--help"],
    ["device", "--twin"],
    ["device", "--twin", "--json"],
    ["monitor", "--twin", "--seconds", "0.2", "--json"],
    ["runs"],
], ids=lambda a: " ".join(a))
def test_a_light_command_imports_nothing_heavy(isolated_env: IsolatedEnv, argv: list[str]) -> None:
    assert cli(*argv) == {"code": 0, "heavy": []}


def test_pin_and_restore_import_nothing_heavy(isolated_env: IsolatedEnv) -> None:
    assert cli("pin", "--twin", "--gpu", "816") == {"code": 0, "heavy": []}
    assert cli("restore") == {"code": 0, "heavy": []}


def test_show_imports_nothing_heavy(stored_run: int) -> None:
    assert cli("runs") == {"code": 0, "heavy": []}
    assert cli("show", str(stored_run)) == {"code": 0, "heavy": []}
    assert cli("compare", str(stored_run)) == {"code": 2, "heavy": []}  # a MAXN run: refused, lightly


def test_import_sweep_and_show_of_a_sweep_import_nothing_heavy(isolated_env: IsolatedEnv) -> None:
    example = str(ROOT / "docs" / "examples" / "measured-sweep.csv")
    assert cli("import-sweep", example) == {"code": 0, "heavy": []}  # checked and stored without torch
    assert cli("show", "s1") == {"code": 0, "heavy": []}  # one repetition per setting: no interval to compute
    assert cli("sweeps") == {"code": 0, "heavy": []}
    assert cli("export", "s1", "--out", "-") == {"code": 0, "heavy": []}


def test_the_tuis_first_screen_imports_nothing_heavy(isolated_env: IsolatedEnv, tmp_path: Path) -> None:
    assert _run(_TUI, str(tmp_path / "twin")) == {"page": "device", "heavy": []}


def test_the_harness_sees_a_heavy_import() -> None:
    # The check itself: a command that does import torch is reported (else every test above passes vacuously).
    code = _CLI.replace("from engine.cli import main", "import torch\nfrom engine.cli import main")
    assert _run(code, "--help")["heavy"] == ["torch"]


def test_twin_commands_with_a_cached_trace_import_neither_torch_nor_transformers(isolated_env: IsolatedEnv) -> None:
    # The first `sweep --fast` traces the workload (model built on meta tensors); after that the
    # trace cache holds all that `sweep --fast`, `run --simulate` and `select` need, and the
    # shipped selector predicts from its compact form (no scikit-learn, scipy or pandas).
    workload = ["--twin", "--model", "bert-tiny", "--task", "sst2", "--batch-size", "4", "--max-seq-len", "32"]
    first = cli("sweep", *workload, "--fast", "--space", "gpu")
    assert first["code"] == 0 and {"torch", "transformers"} <= set(first["heavy"])
    for argv in (["sweep", *workload, "--fast", "--space", "gpu"], ["run", *workload, "--simulate", "--steps", "5"]):
        out = cli(*argv)
        assert out["code"] == 0
        assert not {"torch", "transformers", "sklearn"} & set(out["heavy"]), argv
    assert cli("select", *workload[1:], "--json") == {"code": 0, "heavy": []}  # no --twin: it takes no probes


_TUI_LAUNCH = """
import json, sys
import engine.cli.tui_launch as launch
launched = []
launch.launch_tui = lambda args: launched.append(bool(args.verbose)) or 0
from engine.cli import COMMAND_MODULES, main
codes = [main([]), main(["-v"])]
print(json.dumps({"codes": codes, "launched": launched,
                  "command_modules": sorted(m for m in COMMAND_MODULES if m in sys.modules)}))
"""


def test_opening_the_tui_imports_no_sub_command_module(isolated_env: IsolatedEnv) -> None:
    # `slm-dvfs` and `slm-dvfs -v` open the TUI: the sub-commands' parsers are not built for it.
    assert _run(_TUI_LAUNCH) == {"codes": [0, 0], "launched": [False, True], "command_modules": []}
    assert cli("--help")["code"] == 0  # while every other invocation still sees them all
