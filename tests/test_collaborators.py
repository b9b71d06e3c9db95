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
