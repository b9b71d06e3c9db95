"""Explicit collaborators (issue 21): the run harness hands its clock guard and its policy factory to
what needs them; nothing is found through a process-global registry, so two harnesses in one process
never see each other's."""

from __future__ import annotations

from pathlib import Path

import pytest

from traces import bert_base_workload

from engine.core.errors import ConfigError
from engine.device.session import open_device
from engine.device.setting import MAXN_PINNED
from engine.dvfs.controller import DvfsController
from engine.dvfs.objectives import Objective
from engine.dvfs.policies import BUILTIN_POLICIES, FixedPolicy, PolicyContext, make_policy
from engine.results.store import Store
from engine.run.experiment import ExperimentSpec, run_experiment
from engine.run.harness import open_harness
from engine.workload.spec import WorkloadSpec

WORKLOAD = bert_base_workload()
TWIN = "agx-orin-64gb"

pytestmark = pytest.mark.usefixtures("isolated_env")


def _sim(policy: str) -> ExperimentSpec:
    return ExperimentSpec(WorkloadSpec("bert-base-like", "sst2"), policy=policy, twin=TWIN, simulate=True, steps=3)


def test_two_harnesses_with_different_factories_do_not_see_each_others_policies(tmp_path: Path) -> None:
    lab = BUILTIN_POLICIES.with_policy("lab", lambda arg, **o: FixedPolicy("lab", "lab", MAXN_PINNED, "the lab's"))
    with open_device(twin=TWIN, realtime=False, twin_dir=tmp_path / "a") as a, \
            open_device(twin=TWIN, realtime=False, twin_dir=tmp_path / "b") as b, \
            Store(tmp_path / "results.sqlite") as store:
        result = run_experiment(_sim("lab"), store=store, session=a, workload=WORKLOAD, policies=lab)
        assert result.run.policy == "lab" and result.run.setting == MAXN_PINNED
        with pytest.raises(ConfigError) as err:  # the same process, another factory: no such policy
            run_experiment(_sim("lab"), store=store, session=b, workload=WORKLOAD)
        assert err.value.what == "unknown policy 'lab'" and "maxn, maxn-pinned" in err.value.remedy
        with open_harness(session=a, policies=lab) as ha, open_harness(session=b) as hb:
            assert "lab" in ha.policies.names() and "lab" not in hb.policies.names()
    assert "lab" not in BUILTIN_POLICIES.names()  # with_policy made a new value


def test_two_harnesses_guarded_at_once_keep_their_own_clock_guards(tmp_path: Path) -> None:
    with open_device(twin=TWIN, realtime=False, twin_dir=tmp_path / "a") as a, \
            open_device(twin=TWIN, realtime=False, twin_dir=tmp_path / "b") as b, \
            open_harness(session=a) as ha, open_harness(session=b) as hb, ha.guarded(), hb.guarded():
        assert ha.clock_guard is not None and hb.clock_guard is not None and ha.clock_guard is not hb.clock_guard
        ctx = PolicyContext(ha.device, Objective())
        ha.controller(make_policy("maxn"), ctx).apply(MAXN_PINNED)  # jetson_clocks: its store noted in A's guard
        assert ha.clock_guard.jetson_clocks_store is not None and hb.clock_guard.jetson_clocks_store is None
        # A controller handed no guard looks none up, not even the one guarding its own device now.
        loose = DvfsController(hb.device, make_policy("maxn"), PolicyContext(hb.device, Objective()))
        loose.apply(MAXN_PINNED)
        assert loose.jetson_clocks_store is not None and hb.clock_guard.jetson_clocks_store is None
        loose.device.jetson_clocks_restore(loose.jetson_clocks_store)  # undo it ourselves: nobody was told
    assert ha.clock_guard is None and hb.clock_guard is None  # handed out only while guarded


# --------------------------------------------------------------------------- one Event union, named hooks
def test_every_event_of_a_run_is_in_the_one_union_and_has_a_named_hook() -> None:
    from typing import get_args

    from engine.run import events

    union = set(get_args(events.Event))
    assert {events.ExperimentPhase, events.SweepPointDone, events.ThermalWait, events.FleetEvent,
            events.ExperimentEvent, events.RunStarted, events.StepEnergy, events.RunCancelled} <= union
    listener = events.RunListener()
    assert isinstance(listener, events.Listener)
    hooks = {name for name in dir(events.Listener) if name.startswith("on_")}
    assert len(hooks) == len(union)  # one hook per event type
    # the modules that emit them still name them (one definition, re-exported)
    from engine.run.experiment import ExperimentPhase
    from engine.run.fleet.model import ExperimentEvent, FleetEvent
    from engine.run.sweep import SweepPointDone
    from engine.run.thermal import ThermalWait

    assert (ExperimentPhase, SweepPointDone, ThermalWait, FleetEvent, ExperimentEvent) == (
        events.ExperimentPhase, events.SweepPointDone, events.ThermalWait, events.FleetEvent, events.ExperimentEvent)


def test_a_listener_overrides_only_its_hooks_and_a_plain_callable_still_works(tmp_path: Path) -> None:
    from engine.run.events import ExperimentPhase, RunListener, StepBegin, StepEnd, StepEnergy

    class Energy(RunListener):
        def __init__(self) -> None:
            self.steps: list[int] = []
            self.phases: list[str] = []

        def on_step_energy(self, event: StepEnergy):
            self.steps.append(event.step)
            return None

        def on_phase(self, event: ExperimentPhase):
            self.phases.append(event.role)
            return None

    energy, seen = Energy(), []
    spec = ExperimentSpec(WorkloadSpec("bert-base-like", "sst2"), policy="maxn", compare="maxn", twin=TWIN,
                          simulate=True, steps=3)
    with Store(tmp_path / "results.sqlite") as store:
        run_experiment(spec, store=store, workload=WORKLOAD, callbacks=[energy, seen.append])
    assert energy.phases == ["policy", "baseline"] and energy.steps == [1, 2, 3, 1, 2, 3]
    kinds = [type(e).__name__ for e in seen]
    # the step meter's energy comes between the step's begin and its end, once, to every listener
    first = kinds[kinds.index("StepBegin"):kinds.index("StepBegin") + 3]
    assert first == ["StepBegin", "StepEnergy", "StepEnd"] and kinds.count("StepEnergy") == 6
    assert isinstance(seen[0], ExperimentPhase) and not any(isinstance(e, StepBegin) and e.step > 3 for e in seen)
    assert [e.step for e in seen if isinstance(e, StepEnd)] == [1, 2, 3, 1, 2, 3]


# --------------------------------------------------------------------------- a hook stops a run by its answer
@pytest.mark.parametrize("plain", [False, True])
def test_a_hook_that_answers_stop_ends_the_run_cancelled_with_its_reason(tmp_path: Path, plain: bool) -> None:
    from engine.run.events import Event, RunCancelled, RunControl, RunListener, StepEnd

    cancelled: list[RunCancelled] = []

    def answer(event: Event):
        if isinstance(event, RunCancelled):
            cancelled.append(event)
        if isinstance(event, StepEnd) and event.step == 2:
            return RunControl.stop("enough for this test")
        return None

    class Stopper(RunListener):
        def on_event(self, event: Event):
            return answer(event)

    spec = ExperimentSpec(WorkloadSpec("bert-base-like", "sst2"), policy="maxn", twin=TWIN, simulate=True, steps=5)
    with Store(tmp_path / "results.sqlite") as store:
        result = run_experiment(spec, store=store, workload=WORKLOAD, callbacks=[answer if plain else Stopper()])
        (run,) = store.list_runs()
    assert result.cancelled and result.run.totals.steps == 2
    assert [(e.step, e.reason) for e in cancelled] == [(2, "enough for this test")]
    assert run.status == "cancelled"


def test_the_thermal_abort_is_the_runs_answer_then_its_error(isolated_env, capsys: pytest.CaptureFixture[str]) -> None:
    """The thermal check answers the step with a stop carrying the abort: the run winds down through
    RunCancelled (the progress line says why), then the error is raised, the run stored as failed."""
    from engine.cli import main

    # The lean loop keeps the GPU busy (no Trainer-style host gaps), so the twin heats within the run.
    assert main(["run", "--twin", "--simulate", "--model", "bert-tiny", "--task", "sst2", "--policy", "maxn-pinned",
                 "--loop", "lean", "--steps", "400", "--thermal", "--thermal-cooldown-c", "40", "--thermal-wait-c", "43",
                 "--thermal-abort-c", "44"]) == 2
    err = capsys.readouterr().err
    stopped = [line for line in err.splitlines() if line.startswith("stopped after step")]
    assert len(stopped) == 1 and "over the 44 degC abort limit" in stopped[0]
    assert "error: " in err and err.count("over the 44 degC abort limit") == 2


def test_the_thermal_guard_answers_instead_of_raising() -> None:
    from engine.device.base import TemperatureReading
    from engine.run.events import StepEnd
    from engine.run.thermal import ThermalAbortError, ThermalCheck, ThermalGuard, ThermalLimits

    class Hot:
        def temperatures(self):
            return [TemperatureReading("gpu-thermal", 90.0)]

    guard = ThermalGuard(Hot(), ThermalLimits())  # type: ignore[arg-type]
    answer = ThermalCheck(guard)(StepEnd(1, 0, 0.0, 1, 1, 0.0, 0.1, 0.1))
    assert answer is not None and answer.should_stop and isinstance(answer.error, ThermalAbortError)
    assert answer.reason == answer.error.what and "over the 85 degC abort limit" in answer.reason
    stop = guard.point_control("a point")
    assert stop is not None and stop.should_stop
    with pytest.raises(ThermalAbortError):  # outside a run (before it starts) it still raises
        guard.before_point("the policy run")
