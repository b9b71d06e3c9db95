"""Sweeps: the fast twin mode, statistics, the store, and resuming after SIGKILL."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import replace
from pathlib import Path

import pytest
from traces import BERT_BASE_LIKE as TRACE
from traces import bert_base_workload

from engine.device.twin.governors import default_control, pin_gpu, resolve
from engine.device.twin.profile import load_profile
from engine.core.measurement import Measurement
from engine.device.setting import MAXN, MAXN_PINNED, DvfsSetting
from engine.core.errors import ConfigError, SlmDvfsError, UnsupportedFrequencyError
from engine.core.provenance import Source
from engine.results.store import DeviceRecord, Store, SweepPoint, WorkloadRecord
from engine.run.harness import open_session
from engine.run.sweep import SweepSpec, run_sweep
from engine.device.twin.fast import fast_points, fast_sweep, setting_control
from engine.results.sweeps import stored_points, summarize_points
from engine.core.stats import mean_ci
from engine.workload.spec import WorkloadSpec

MHZ = 1_000_000
PROFILE = load_profile("agx-orin-64gb")
WORKLOAD = bert_base_workload()
GPU_SETTINGS = (MAXN,) + tuple(DvfsSetting(gpu_hz=f, nvpmodel=0) for f in PROFILE.gpu.table_hz)
TINY_WORKLOAD = dict(model="bert-tiny", task="sst2", batch_size=4, seq_len=16)
TINY = dict(workload=WorkloadSpec(**TINY_WORKLOAD), train_samples=16, eval_samples=4)
FEW = (MAXN, DvfsSetting(gpu_hz=306 * MHZ, nvpmodel=0), DvfsSetting(gpu_hz=816 * MHZ, nvpmodel=0),
       DvfsSetting(gpu_hz=1_300_500_000, nvpmodel=0))


pytestmark = pytest.mark.usefixtures("isolated_env")  # conftest: state, data and a module's trace cache in tmp


# --------------------------------------------------------------------------- fast mode
def test_fast_sweep_is_the_twins_model_for_each_setting() -> None:
    points = fast_sweep(TRACE, PROFILE, GPU_SETTINGS, warmup_steps=2, steps=5)
    assert [s for s, _m in points] == list(GPU_SETTINGS)
    # MAXN: mode 0 with its dynamic governors, as the twin resolves them
    _clocks, est = resolve(TRACE, default_control(PROFILE, 0), PROFILE)
    maxn = points[0][1]
    assert maxn.time_s == pytest.approx(5 * est.time_s, rel=1e-12)
    assert maxn.energy_j == pytest.approx(5 * est.total_energy_j, rel=1e-12)
    assert maxn.samples == 5 * 32 and maxn.source is Source.TWIN
    # a pinned GPU point: the clocks the other governors settle on with the GPU pinned
    clocks, est612 = resolve(TRACE, pin_gpu(default_control(PROFILE, 0), 612 * MHZ), PROFILE)
    assert clocks.gpu_hz == 612 * MHZ
    m612 = dict(points)[DvfsSetting(gpu_hz=612 * MHZ, nvpmodel=0)]
    assert m612.energy_j == pytest.approx(5 * est612.total_energy_j, rel=1e-12)
    # slower clocks take longer; energy per sample has an interior optimum below MAXN's
    times = [m.time_s for s, m in points[1:]]
    assert times == sorted(times, reverse=True)
    best = min(points, key=lambda p: p[1].joules_per_sample)
    assert best[0].gpu_hz is not None and best[0].gpu_hz < PROFILE.gpu.table_hz[-1]
    assert best[1].joules_per_sample < maxn.joules_per_sample


def test_fast_sweep_rails_subset_and_per_rail_energy() -> None:
    (p,) = fast_points(TRACE, PROFILE, [MAXN], steps=3, rails=("VDD_GPU_SOC", "VDD_CPU_CV"))
    assert p.measurement.energy_j == pytest.approx(p.rail_energy_j["VDD_GPU_SOC"] + p.rail_energy_j["VDD_CPU_CV"])
    assert set(p.rail_energy_j) == set(PROFILE.rail_names)
    with pytest.raises(ConfigError, match="VDD_NOPE"):
        fast_sweep(TRACE, PROFILE, [MAXN], rails=("VDD_NOPE",))


def test_setting_control_maps_modes_pins_and_jetson_clocks() -> None:
    jc = setting_control(MAXN_PINNED, PROFILE)
    assert jc.gpu.min_hz == jc.gpu.max_hz == PROFILE.gpu.table_hz[-1]
    assert jc.cpu.min_hz == jc.cpu.max_hz == PROFILE.cpu.table_hz[-1]
    assert jc.emc.locked and jc.emc.cur_hz == PROFILE.emc.table_hz[-1]
    m2 = setting_control(DvfsSetting(nvpmodel=2), PROFILE)
    assert m2.mode_id == 2 and m2.gpu.max_hz == 612 * MHZ and m2.online_cpus == 8
    emc = setting_control(DvfsSetting(gpu_hz=816 * MHZ, emc_hz=2_133_000_000, nvpmodel=0), PROFILE)
    clocks, _est = resolve(TRACE, emc, PROFILE)
    assert (clocks.gpu_hz, clocks.emc_hz) == (816 * MHZ, 2_133_000_000)
    with pytest.raises(ConfigError, match="above the 612 MHz cap"):
        setting_control(DvfsSetting(gpu_hz=816 * MHZ, nvpmodel=2), PROFILE)
    with pytest.raises(UnsupportedFrequencyError):
        setting_control(DvfsSetting(gpu_hz=800 * MHZ, nvpmodel=0), PROFILE)


def test_fast_sweep_computes_thousands_of_points_a_second() -> None:
    cpu = PROFILE.cpu.table_hz[::4]
    settings = [DvfsSetting(gpu_hz=g, cpu_hz=c, emc_hz=e, nvpmodel=0)
                for g in PROFILE.gpu.table_hz for c in cpu for e in PROFILE.emc.table_hz]
    traces = [replace(TRACE, batch_size=b) for b in (8, 16, 32, 64)]
    t0 = time.perf_counter()
    n = sum(len(fast_sweep(t, PROFILE, settings, steps=5)) for t in traces)
    rate = n / (time.perf_counter() - t0)
    assert n == 4 * len(settings) > 1000
    assert rate > 1000, f"{rate:.0f} points/s"  # ~5000/s on one idle core


# --------------------------------------------------------------------------- statistics
def test_mean_and_95_percent_interval_from_t() -> None:
    s = mean_ci([1.0, 2.0, 3.0])
    assert s.mean == 2.0 and s.n == 3
    assert s.ci95 == pytest.approx(4.302652729911275 / 3 ** 0.5)  # t(0.975, 2) * sd / sqrt(n)
    assert mean_ci([5.0]).ci95 is None
    assert mean_ci([4.0, 4.0]).ci95 == 0.0
    with pytest.raises(ConfigError):
        mean_ci([])


def _store_with_sweep(tmp_path: Path, rails: str = "all") -> tuple[Store, int, int, int]:
    store = Store(tmp_path / "db.sqlite")
    dev = store.ensure_device(DeviceRecord("Orin", "P3701-0000 (AGX Orin 64GB)", profile="agx-orin-64gb", is_twin=True))
    wl = store.ensure_workload(WorkloadRecord("bert-tiny", "sst2", 32, 128, "fp32"))
    sweep = store.find_or_create_sweep(device=dev, workload=wl, space={"space": "gpu", "rails": rails},
                                       warmup_steps=1, steps=2, repeats=2, source=Source.TWIN)
    return store, dev, wl, sweep.id


def test_summaries_and_the_oracles_points_from_the_store(tmp_path: Path) -> None:
    store, dev, wl, sid = _store_with_sweep(tmp_path)
    s612 = DvfsSetting(gpu_hz=612 * MHZ, nvpmodel=0)
    for setting, energies in ((MAXN, (10.0, 12.0)), (s612, (8.0, 9.0))):
        for r, e in enumerate(energies):
            store.add_point(SweepPoint(sid, setting.to_json(), r, time_s=2.0 + r, energy_j=e, samples=64,
                                       rail_energy_j={"VDD_GPU_SOC": e * 0.6, "VDD_CPU_CV": e * 0.4}))
    summaries = summarize_points(store.sweep_points(sid))
    assert [s.setting for s in summaries] == [MAXN, s612]
    maxn = summaries[0]
    assert maxn.n == 2 and maxn.energy_j.mean == 11.0 and maxn.energy_j.ci95 == pytest.approx(12.706204736 * 1.0)
    assert maxn.joules_per_sample.mean == pytest.approx(11.0 / 64)
    assert maxn.rail_energy_j["VDD_GPU_SOC"] == pytest.approx(6.6)
    points = stored_points(store, dev, wl, source=Source.TWIN, rails="all")
    assert [s for s, _m in points] == [MAXN, s612]
    assert points[1][1] == Measurement(2.5, 8.5, 64, source=Source.TWIN)
    assert stored_points(store, dev, wl, rails="gpu+cpu") == []  # another rail preset's sweeps do not count
    assert stored_points(store, dev, wl + 1) == []
    store.close()


# --------------------------------------------------------------------------- run_sweep
def _fast_spec(**kw) -> SweepSpec:
    return SweepSpec(WorkloadSpec("bert-base-like", "sst2"), fast=True, twin="agx-orin-64gb", **kw)


def test_fast_sweep_through_the_store_and_resume_without_redoing(tmp_path: Path) -> None:
    with Store(tmp_path / "db.sqlite") as store:
        done: list = []
        result = run_sweep(_fast_spec(repeats=2, steps=3), store=store, workload=WORKLOAD, callbacks=[done.append])
        assert result.complete and result.measured == 24 and result.resumed == 0 and len(done) == 24
        assert result.optimum is not None and result.maxn is not None and result.optimum.setting != MAXN
        assert result.maxn.joules_per_sample.ci95 == 0.0  # the twin is deterministic
        expected = dict(fast_sweep(TRACE, PROFILE, GPU_SETTINGS, steps=3))
        for p in result.points:
            assert p.energy_j.mean == pytest.approx(expected[p.setting].energy_j, rel=1e-12)
        again = run_sweep(_fast_spec(repeats=2, steps=3), store=store, workload=WORKLOAD)
        assert again.sweep_id != result.sweep_id  # a finished sweep is not reopened: a new one starts
        assert len(store.list_sweeps()) == 2


def test_setting_control_refuses_as_a_device_does(tmp_path: Path) -> None:
    """The fast sweep and the device share one check: the same setting, the same error."""
    from engine.device.setting import check_setting

    with open_session(twin="agx-orin-64gb") as session:
        for bad in (DvfsSetting(gpu_hz=816 * MHZ, nvpmodel=2), DvfsSetting(gpu_hz=800 * MHZ, nvpmodel=0)):
            with pytest.raises(SlmDvfsError) as on_twin_model:
                setting_control(bad, PROFILE)
            with pytest.raises(SlmDvfsError) as on_device:
                check_setting(session.device, bad)
            assert type(on_twin_model.value) is type(on_device.value)
            assert str(on_twin_model.value) == str(on_device.value)


def test_sessions_open_the_persistent_twin_with_its_thermal_model(tmp_path: Path) -> None:
    from engine.device.session import twin_root

    with open_session(twin="agx-orin-64gb", thermal=True) as session:
        assert session.twin.thermal_enabled and session.twin.root == twin_root("agx-orin-64gb").absolute()
    with open_session(twin="agx-orin-64gb") as session:
        assert not session.twin.thermal_enabled


def test_sweep_help_prints_percent_signs_once(capsys: pytest.CaptureFixture[str]) -> None:
    from engine.cli import main

    with pytest.raises(SystemExit):
        main(["sweep", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "a 95% confidence interval" in out and "%%" not in out


def test_fast_needs_the_twin_and_sane_counts() -> None:
    with pytest.raises(ConfigError, match="--fast"):
        SweepSpec(WorkloadSpec("bert-tiny", "sst2"), fast=True).validate()
    with pytest.raises(ConfigError, match="measured steps"):
        SweepSpec(WorkloadSpec("bert-tiny", "sst2"), steps=0, twin="agx-orin-64gb").validate()
    with pytest.raises(ConfigError, match="space"):
        SweepSpec(WorkloadSpec("bert-tiny", "sst2"), space="cpu").validate()


def test_the_session_says_what_the_device_can_do() -> None:
    """Capabilities, not "is this a twin": a board has no model to compute fast points from,
    cannot simulate, warms up between runs and idles by waiting."""
    from engine.device.session import DeviceSession

    board = DeviceSession(device=None)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="--fast") as err:
        board.fast_model()
    assert "--twin" in err.value.remedy
    assert (board.can_simulate, board.warms_up, board.virtual_time, board.profile_name) == (False, True, False, None)
    slept: list[float] = []
    board.idle(3.0, sleep=slept.append)
    assert slept == [3.0] and board.thermal_guard_params() is None
    with open_session(twin="agx-orin-64gb") as twin:
        assert twin.fast_model().name == "agx-orin-64gb"
        assert (twin.can_simulate, twin.warms_up, twin.virtual_time, twin.profile_name) == \
            (True, False, True, "agx-orin-64gb")
        before = twin.twin.now()
        twin.idle(7.0, sleep=slept.append)
        assert twin.twin.now() == pytest.approx(before + 7.0) and slept == [3.0]  # twin time, no sleep
        assert twin.rail_names() == PROFILE.rail_names and twin.power_source().source is Source.TWIN
        assert twin.thermal_guard_params()[1] == "profile agx-orin-64gb"


KILL_FAST = """
import os, signal, sys
sys.path.insert(0, "tests")
from engine.results.store import Store
from engine.run.sweep import SweepPointDone, SweepSpec, run_sweep
from engine.core.trace import OpCost, StepTrace
from engine.workload.spec import WorkloadSpec
from traces import workload_of
trace = StepTrace.from_json({trace!r})
workload = workload_of(trace, total_params=110_000_000)
def die(event):
    if isinstance(event, SweepPointDone) and event.index == {kill_after}:
        os.kill(os.getpid(), signal.SIGKILL)
with Store({db!r}) as store:
    run_sweep(SweepSpec(WorkloadSpec("bert-base-like", "sst2"), fast=True, twin="agx-orin-64gb", repeats=2, steps=3),
              store=store, workload=workload, callbacks=[die])
"""


def _run_killed(script: str, tmp_path: Path) -> None:
    path = tmp_path / "killed_sweep.py"
    path.write_text(textwrap.dedent(script))
    proc = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=300,
                          cwd=Path(__file__).resolve().parent.parent)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]


def test_fast_sweep_killed_resumes_to_the_same_result(tmp_path: Path) -> None:
    db = tmp_path / "killed.sqlite"
    _run_killed(KILL_FAST.format(trace=TRACE.to_json(), kill_after=7, db=str(db)), tmp_path)
    with Store(db) as store:
        (sweep,) = store.list_sweeps()
        # its process died; a fast sweep's points are one batch, committed before their events (issue 24)
        assert sweep.status == "abandoned" and len(store.sweep_points(sweep.id)) == 24
        resumed = run_sweep(_fast_spec(repeats=2, steps=3), store=store, workload=WORKLOAD)
        assert resumed.sweep_id == sweep.id and resumed.resumed == 24 and resumed.measured == 0
        killed_points = [(p.setting, p.repeat, p.energy_j, p.time_s) for p in store.sweep_points(sweep.id)]
    with Store(tmp_path / "clean.sqlite") as store:
        clean = run_sweep(_fast_spec(repeats=2, steps=3), store=store, workload=WORKLOAD)
        clean_points = [(p.setting, p.repeat, p.energy_j, p.time_s) for p in store.sweep_points(clean.sweep_id)]
    assert sorted(killed_points, key=repr) == sorted(clean_points, key=repr)


KILL_RUN = """
import os, signal
from engine.device.setting import DvfsSetting
from engine.results.store import Store
from engine.run.sweep import SweepSpec, run_sweep
from engine.workload.events import StepEnd
from engine.workload.spec import WorkloadSpec
def die(event):
    if isinstance(event, StepEnd) and event.step == {kill_at}:
        os.kill(os.getpid(), signal.SIGKILL)  # in the middle of a point's measured steps
settings = tuple(DvfsSetting.from_json(s) for s in {settings!r})
with Store({db!r}) as store:
    run_sweep(SweepSpec(WorkloadSpec(**{tiny!r}), twin="agx-orin-64gb", warmup_steps=1, steps=2, settings=settings,
                        train_samples=16, eval_samples=4),
              store=store, callbacks=[die])
"""


def _gpu_files(state: Path) -> tuple[str, str, str]:
    g = state / "twin" / "agx-orin-64gb" / "sys/class/devfreq/17000000.gpu"
    return tuple((g / n).read_text().strip() for n in ("min_freq", "max_freq", "governor"))  # type: ignore[return-value]


@pytest.mark.slow  # three fine-tuning runs, one in a fresh interpreter: ~25-45 s on two busy cores
def test_training_sweep_killed_mid_point_resumes_to_the_uninterrupted_result(tmp_path: Path) -> None:
    """The real fine-tuning loop, split into points, SIGKILLed in the middle of point 3."""
    db = tmp_path / "killed.sqlite"
    spec = SweepSpec(twin="agx-orin-64gb", warmup_steps=1, steps=2, settings=FEW, **TINY)
    _run_killed(KILL_RUN.format(kill_at=8, settings=[s.to_json() for s in FEW], db=str(db), tiny=TINY_WORKLOAD), tmp_path)
    state = tmp_path / "state"
    assert _gpu_files(state)[:2] == ("816000000", "816000000")  # killed while pinned: the journal remains
    with Store(db) as store:
        (sweep,) = store.list_sweeps()
        assert len(store.sweep_points(sweep.id)) == 2  # points 1 and 2; point 3 was cut short
        resumed = run_sweep(spec, store=store)
        assert resumed.complete and resumed.resumed == 2 and resumed.measured == 2
        killed = {(repr(p.setting), p.repeat): (p.energy_j, p.time_s, p.samples) for p in store.sweep_points(sweep.id)}
    # the resumed run's guard restored the clocks the killed one left pinned, then its own
    assert _gpu_files(state) == (str(306 * MHZ), str(1_300_500_000), "nvhost_podgov")
    with Store(tmp_path / "clean.sqlite") as store:
        clean_result = run_sweep(spec, store=store)
        clean = {(repr(p.setting), p.repeat): (p.energy_j, p.time_s, p.samples)
                 for p in store.sweep_points(clean_result.sweep_id)}
    assert killed.keys() == clean.keys() and len(clean) == 4
    for key, (energy, t, samples) in clean.items():
        assert killed[key][0] == pytest.approx(energy, rel=1e-12)
        assert killed[key][1] == pytest.approx(t, rel=1e-12)
        assert killed[key][2] == samples == 8
    # and the training loop's points are exactly what the fast mode computes from the trace
    fast = {s: m for s, m in fast_sweep(clean_result.workload.trace, PROFILE, FEW, steps=2)}
    for p in clean_result.points:
        assert p.energy_j.mean == pytest.approx(fast[p.setting].energy_j, rel=1e-9)
        assert p.time_s.mean == pytest.approx(fast[p.setting].time_s, rel=1e-9)
