"""The DVFS controller on the digital twin: each policy's setting lands in the board's
files, the online policy finds the twin's best GPU clock during a run."""

from __future__ import annotations

import weakref

import os
from pathlib import Path

import pytest
from traces import BERT_BASE_LIKE as BERT

from engine.device.base import ClockDomain
from engine.device.twin import default_control, pin_gpu, resolve
from engine.device.twin.orin import VirtualOrin
from engine.dvfs.controller import DvfsController
from engine.core.measurement import Measurement
from engine.dvfs.objectives import parse_objective
from engine.dvfs.policies import PolicyContext, make_policy
from engine.device.setting import MAXN, MAXN_PINNED, DvfsSetting
from engine.core.errors import ConfigError, UnsupportedFrequencyError
from engine.device.monitor import DeviceRailSource, PowerMonitor, TwinSource
from engine.core.provenance import Source
from engine.run.harness import StepMeter
from engine.workload.events import RunFinished, RunStarted, StepBegin, StepEnd, StepEnergy

MHZ = 1_000_000
GPU = "sys/class/devfreq/17000000.gpu"
CPU0 = "sys/devices/system/cpu/cpu0/cpufreq"
EMC = "sys/kernel/debug/bpmp/debug/clk/emc"
STATUS = "var/lib/nvpmodel/status"

# BERT-base-like fine-tuning step (fp32, batch 32, seq 128): about 6 x 85e6 params x 4096 tokens of matmul.


def read(root: Path, rel: str) -> str:
    return (root / rel).read_text().strip()


@pytest.fixture(autouse=True)
def isolated_state(isolated_env) -> Path:
    """jetson_clocks' stored state and any journal go to conftest's temporary state directory."""
    return isolated_env.state_dir


@pytest.fixture
def twin():
    with VirtualOrin() as t:
        yield t


def run_started() -> RunStarted:
    return RunStarted("bert-base", "sst2", "full", "fp32", "cpu", 32, 1000, 100, 0, 110_000_000, 110_000_000)


_METERS: "weakref.WeakKeyDictionary[DvfsController, StepMeter]" = weakref.WeakKeyDictionary()


def meter_for(twin, ctl, rails: str = "all") -> StepMeter:
    """The run harness's step meter over the twin's power source, feeding `ctl` (one per controller)."""
    meter = _METERS.get(ctl)
    if meter is None:
        meter = _METERS[ctl] = StepMeter(PowerMonitor(TwinSource(twin), rails=rails))
    return meter


def controller(twin, spec: str, objective: str = "energy", points=(), **options) -> DvfsController:
    device = twin.device()
    ctx = PolicyContext(device, parse_objective(objective), tuple(points))
    return DvfsController(device, make_policy(spec, **options), ctx)


def twin_step(twin, ctl, step: int):
    """One training step on the twin, as the harness reports it: the trainer's StepBegin and
    StepEnd, and the meter's StepEnergy from a monitor window in between. Returns the twin's step."""
    meter = meter_for(twin, ctl)
    begin = StepBegin(step, 0)
    meter.begin()
    ctl(begin)
    s = twin.run_step(BERT)
    end = StepEnd(step, 0, 1.0, BERT.batch_size, BERT.tokens, 1e-5, 0.01, 0.01 * step)
    energy = meter.end(end)  # the step's StepEnergy, delivered before its StepEnd as the harness does
    assert energy is not None
    ctl(energy)
    ctl(end)
    return s


def disturb(device) -> None:
    """Leave the board in a state no policy should keep: mode 2, GPU and EMC pinned."""
    device.set_power_mode(2)
    device.pin(ClockDomain.GPU, 510 * MHZ)
    device.pin(ClockDomain.EMC, 665_600_000)


# --------------------------------------------------------------------------- initial settings in the files


def test_maxn_leaves_governors_dynamic_in_mode_0(twin):
    ctl = controller(twin, "maxn")
    disturb(ctl.device)
    ctl(run_started())
    root = twin.root
    assert read(root, STATUS).startswith("pmode:0000")
    assert read(root, f"{GPU}/governor") == "nvhost_podgov"
    assert (read(root, f"{GPU}/min_freq"), read(root, f"{GPU}/max_freq")) == ("306000000", "1300500000")
    assert read(root, f"{CPU0}/scaling_governor") == "schedutil"
    assert read(root, f"{CPU0}/scaling_max_freq") == "2201600"
    assert read(root, f"{EMC}/mrq_rate_locked") == "0"
    assert ctl.history == [(1, MAXN)]


def test_static_pins(twin):
    ctl = controller(twin, "static:gpu=816,emc=3199")
    ctl(run_started())
    root = twin.root
    assert read(root, f"{GPU}/min_freq") == read(root, f"{GPU}/max_freq") == "816000000"
    twin.sync()
    assert read(root, f"{GPU}/cur_freq") == "816000000"
    assert (read(root, f"{EMC}/mrq_rate_locked"), read(root, f"{EMC}/rate")) == ("1", "3199000000")
    assert read(root, f"{CPU0}/scaling_governor") == "schedutil"  # not listed: left to its governor
    assert read(root, f"{CPU0}/scaling_min_freq") != read(root, f"{CPU0}/scaling_max_freq")
    assert twin.run_step(BERT).gpu_hz == 816 * MHZ


def test_static_unlisted_clock_changes_nothing(twin):
    ctl = controller(twin, "static:gpu=800,emc=3199")
    before = read(twin.root, f"{EMC}/mrq_rate_locked")
    with pytest.raises(UnsupportedFrequencyError):
        ctl(run_started())
    assert read(twin.root, f"{EMC}/mrq_rate_locked") == before and ctl.history == []


def test_mode_1_switches_nvpmodel_and_caps_the_gpu(twin):
    ctl = controller(twin, "mode:1")
    ctl(run_started())
    root = twin.root
    assert read(root, STATUS).startswith("pmode:0001")  # through the twin's fake nvpmodel
    assert read(root, f"{GPU}/max_freq") == "408000000"
    assert read(root, f"{GPU}/governor") == "nvhost_podgov"
    assert ctl.device.power_mode().name == "MODE_15W"
    assert twin.run_step(BERT).gpu_hz <= 408 * MHZ


def test_maxn_pinned_runs_jetson_clocks(twin):
    ctl = controller(twin, "maxn-pinned")
    disturb(ctl.device)
    ctl(run_started())
    root = twin.root
    assert read(root, STATUS).startswith("pmode:0000")
    assert read(root, f"{GPU}/min_freq") == read(root, f"{GPU}/max_freq") == "1300500000"
    assert read(root, f"{CPU0}/scaling_min_freq") == read(root, f"{CPU0}/scaling_max_freq") == "2201600"
    assert (read(root, f"{EMC}/mrq_rate_locked"), read(root, f"{EMC}/rate")) == ("1", "3199000000")


def test_mode_switch_comes_before_the_clocks(twin):
    # From jetson_clocks in mode 0 to GPU 408 in mode 1: pinning first and switching after
    # would let nvpmodel rewrite the GPU range (min back to 306).
    ctl = controller(twin, "maxn-pinned")
    ctl(run_started())
    ctl.apply(DvfsSetting(gpu_hz=408 * MHZ, nvpmodel=1))
    root = twin.root
    assert read(root, STATUS).startswith("pmode:0001")
    assert read(root, f"{GPU}/min_freq") == read(root, f"{GPU}/max_freq") == "408000000"
    assert read(root, f"{EMC}/mrq_rate_locked") == "0"  # jetson_clocks' EMC lock handed back


def test_oracle_applies_the_best_sweep_point(twin):
    points = [
        (MAXN, Measurement(10.0, 200.0, 100)),
        (DvfsSetting(gpu_hz=612 * MHZ, nvpmodel=0), Measurement(13.0, 140.0, 100)),
        (DvfsSetting(gpu_hz=918 * MHZ, nvpmodel=0), Measurement(10.4, 165.0, 100)),
    ]
    ctl = controller(twin, "oracle", "energy@5%", points)
    ctl(run_started())
    assert read(twin.root, f"{GPU}/max_freq") == read(twin.root, f"{GPU}/min_freq") == "918000000"


def test_controller_never_restores(twin):
    ctl = controller(twin, "static:gpu=612")
    ctl(run_started())
    twin_step(twin, ctl, 1)
    ctl(RunFinished(1, 32, 0.01, 1.0))
    assert read(twin.root, f"{GPU}/max_freq") == "612000000"


# --------------------------------------------------------------------------- costs


def test_step_cost_from_the_twin(twin):
    ctl = controller(twin, "static:gpu=714")
    ctl(run_started())
    s = twin_step(twin, ctl, 1)
    cost = ctl.last_cost
    assert cost is not None and cost.source is Source.TWIN
    assert cost.energy_j == pytest.approx(s.total_energy_j, rel=1e-12) and cost.samples == 32
    assert cost.time_s == pytest.approx(s.time_s, rel=1e-12)


def test_the_policy_gets_its_costs_from_energy_windows_only(twin):
    """The controller reads no power itself: a StepEnd alone costs nothing; the StepEnergy of
    the step's window is what the policy's on_step_end sees."""
    ctl = controller(twin, "static:gpu=714")
    seen: list = []
    ctl.policy.on_step_end = lambda step, cost: seen.append((step, cost))  # type: ignore[method-assign]
    ctl(run_started())
    ctl(StepBegin(1, 0))
    twin.run_step(BERT)
    ctl(StepEnd(1, 0, 1.0, 32, 4096, 1e-5, 0.01, 0.01))
    assert seen == [] and ctl.last_cost is None
    window = StepEnergy(step=1, time_s=0.5, energy_j={"A": 4.0, "B": 1.0}, total_energy_j=4.0, avg_power_w=8.0,
                        rails=("A",), source=Source.MEASURED, samples=32, peak_power_w=9.5)
    ctl(window)
    ((step, cost),) = seen
    assert step == 1 and cost == ctl.last_cost
    assert (cost.time_s, cost.energy_j, cost.samples, cost.peak_power_w, cost.source) == \
        (0.5, 4.0, 32, 9.5, Source.MEASURED)
    ctl(StepEnergy(step=2, time_s=0.0, energy_j={}, total_energy_j=0.0, avg_power_w=0.0, rails=("A",),
                   source=Source.MEASURED, samples=32))
    assert seen[-1] == (2, None)  # an empty window is no cost


def test_step_cost_from_a_monitor_window_on_a_board_source(twin):
    """The same meter over a board's rails (here the twin's tree, read as a board): integrated."""
    device = twin.device()
    ctl = DvfsController(device, make_policy("static:gpu=714"), PolicyContext(device, parse_objective("energy")))
    with PowerMonitor(DeviceRailSource(device, clock=twin.now), rate_hz=50) as mon:
        meter = StepMeter(mon)
        ctl(run_started())
        with twin.driven():
            meter.begin()
            s = twin.run_step(BERT)
            twin.sync()
            energy = meter.end(StepEnd(1, 0, 1.0, 32, 4096, 1e-5, 0.01, 0.01))
            assert energy is not None
            ctl(energy)
    cost = ctl.last_cost
    assert cost is not None and cost.source is Source.TWIN  # the tree says twin; the path is the board's
    assert cost.time_s == pytest.approx(s.time_s)


class Recording:
    """A device proxy that records pin/unpin calls."""

    def __init__(self, device):
        self._d, self.calls = device, []

    def __getattr__(self, name):
        attr = getattr(self._d, name)
        if name in ("pin", "unpin", "set_power_mode", "jetson_clocks"):
            def wrapped(*args, **kw):
                self.calls.append((name, *args))
                return attr(*args, **kw)
            return wrapped
        return attr


def test_only_what_changed_is_touched(twin):
    dev = Recording(twin.device())
    ctl = DvfsController(dev, make_policy("maxn"), PolicyContext(dev, parse_objective("energy")))
    ctl(run_started())
    assert {c[1] for c in dev.calls if c[0] == "unpin"} == set(ClockDomain)  # first apply: every domain
    dev.calls.clear()
    ctl.apply(DvfsSetting(gpu_hz=816 * MHZ, nvpmodel=0))
    ctl.apply(DvfsSetting(gpu_hz=612 * MHZ, nvpmodel=0))
    assert dev.calls == [("pin", ClockDomain.GPU, 816 * MHZ), ("pin", ClockDomain.GPU, 612 * MHZ)]


# --------------------------------------------------------------------------- online on the twin


def brute_force(objective: str, twin) -> tuple[list[int], list[float], list[float], float]:
    """GPU table, per-sample cost and time at each pinned clock, and MAXN's time per
    sample, from the twin's model (governors settled for the other domains)."""
    prof = twin.profile
    base = default_control(prof, 0)
    obj = parse_objective(objective)
    table = list(prof.gpu.table_hz)
    costs, times = [], []
    for hz in table:
        _clk, est = resolve(BERT, pin_gpu(base, hz), prof)
        m = Measurement(est.time_s, est.total_energy_j, BERT.batch_size)
        costs.append(obj.cost(m))
        times.append(m.seconds_per_sample)
    _clk, est = resolve(BERT, base, prof)
    return table, costs, times, est.time_s / BERT.batch_size


def run_online(twin, objective: str, limit: int = 100):
    ctl = controller(twin, "online", objective)
    ctl(run_started())
    step = 0
    with twin.driven():
        while ctl.policy.profiling and step < limit:
            step += 1
            twin_step(twin, ctl, step)
        for _ in range(2):  # the run goes on at the chosen clock
            step += 1
            last = twin_step(twin, ctl, step)
    return ctl, step - 2, last


def test_online_finds_the_twins_best_gpu_clock(twin):
    table, costs, _times, _maxn = brute_force("energy", twin)
    best = min(range(len(table)), key=costs.__getitem__)
    ctl, steps, _last = run_online(twin, "energy")
    policy = ctl.policy
    # 11 clocks, stride 2: 6 coarse windows, then the best's 2 neighbours (1 at an edge); 3 steps each.
    fine = 2 if 0 < best < len(table) - 1 else 1
    assert steps == policy.profiling_steps == (6 + fine) * 3
    chosen = policy.chosen.gpu_hz
    assert abs(table.index(chosen) - best) <= 1
    assert read(twin.root, f"{GPU}/min_freq") == read(twin.root, f"{GPU}/max_freq") == str(chosen)
    assert twin.run_step(BERT).gpu_hz == chosen
    assert ctl.history[0] == (1, DvfsSetting(gpu_hz=table[-1], nvpmodel=0))
    assert ctl.history[-1] == (steps + 1, policy.chosen)


def test_online_with_a_slowdown_limit(twin):
    table, costs, times, maxn_s = brute_force("energy", twin)
    feasible = [i for i in range(len(table)) if times[i] <= maxn_s * 1.05]
    best = min(feasible, key=costs.__getitem__)
    assert best != min(range(len(table)), key=costs.__getitem__)  # the limit matters for this trace
    ctl, steps, _last = run_online(twin, "energy@5%")
    assert ctl.history[0] == (1, MAXN)  # the reference comes first
    chosen = ctl.policy.chosen
    assert chosen.gpu_hz is not None and abs(table.index(chosen.gpu_hz) - best) <= 1
    assert times[table.index(chosen.gpu_hz)] <= maxn_s * 1.05 + 1e-12
    assert steps == ctl.policy.profiling_steps


# --------------------------------------------------------------------------- rails, jetson_clocks state


def test_twin_step_cost_sums_only_the_chosen_rails(twin):
    ctl = controller(twin, "static:gpu=714")
    meter_for(twin, ctl, rails="gpu+cpu")
    ctl(run_started())
    s = twin_step(twin, ctl, 1)
    rails = ("VDD_GPU_SOC", "VDD_CPU_CV")
    assert ctl.last_cost is not None and ctl.last_cost.source is Source.TWIN
    assert ctl.last_cost.energy_j == pytest.approx(sum(s.energy_j[r] for r in rails))
    assert ctl.last_cost.energy_j < 0.95 * s.total_energy_j  # SYS5V0 and VDDQ left out
    with pytest.raises(ConfigError, match="VDD_NOPE"):
        PowerMonitor(TwinSource(twin), rails="VDD_NOPE").begin_window("step")


def test_jetson_clocks_state_is_stored_and_the_guard_restores_it(twin, isolated_state, monkeypatch):
    from engine.device.jetson import JetsonDevice
    from engine.device.guard.guard import ClockGuard, list_journals

    calls = []
    real = JetsonDevice.jetson_clocks_restore
    monkeypatch.setattr(JetsonDevice, "jetson_clocks_restore",
                        lambda self, store: (calls.append(Path(store)), real(self, store))[1])
    root = twin.root
    before = {f: read(root, f) for f in (f"{GPU}/min_freq", f"{CPU0}/scaling_min_freq", f"{EMC}/mrq_rate_locked")}
    store = isolated_state / f"jetson_clocks-{os.getpid()}.store"
    loose = controller(twin, "maxn-pinned")
    with ClockGuard(loose.device, handle_signals=False) as guard:
        ctl = DvfsController(loose.device, loose.policy, loose.ctx, guard=guard)  # the run hands its guard over
        ctl(run_started())
        assert store.is_file() and guard.jetson_clocks_store == str(store)
        assert list_journals()[0].jetson_clocks_store == str(store)  # known after a SIGKILL too
        stored = store.read_text()
        assert "mrq_rate_locked:0" in stored  # the state from before jetson_clocks
        ctl.apply(DvfsSetting(gpu_hz=612 * MHZ, nvpmodel=0))
        ctl.apply(MAXN_PINNED)  # again: the first store is kept, not overwritten with pinned clocks
        assert store.read_text() == stored
        # A second controller in the same guard (e.g. the baseline run) keeps it too.
        other = DvfsController(ctl.device, make_policy("maxn-pinned"), ctl.ctx, guard=guard)
        other(run_started())
        assert store.read_text() == stored
    assert calls == [store] and not store.exists()
    assert {f: read(root, f) for f in before} == before
