"""What `select` costs (issue 24): its interval's ensemble is computed once per workload, not once per process."""

from __future__ import annotations

import dataclasses
import json

import pytest

from engine.core.trace import StepMix
from engine.device.twin import ensemble as ensemble_module
from engine.device.twin.ensemble import ensemble
from engine.device.twin.ensemble_cache import ensemble_key, entry_path
from engine.device.twin.profile import load_profile
from traces import BERT_BASE_LIKE

SELECT = ["select", "--model", "bert-tiny", "--task", "sst2", "--pad", "max"]  # one length: one ensemble part


@pytest.fixture
def fresh_process(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """As a new process finds it: no ensemble in the per-process cache; counts the members simulated."""
    ensemble_module._cached.cache_clear()
    simulated: list[int] = []
    real = ensemble_module.sample_profiles

    def counting(profile, n, **kwargs):  # type: ignore[no-untyped-def]
        simulated.append(n)
        return real(profile, n, **kwargs)

    monkeypatch.setattr(ensemble_module, "sample_profiles", counting)
    yield simulated
    ensemble_module._cached.cache_clear()


def _mix():  # type: ignore[no-untyped-def]
    short = dataclasses.replace(BERT_BASE_LIKE, seq_len=64, host_cycles=5.1e7)
    return StepMix(((0.375, short), (0.625, BERT_BASE_LIKE)))


def test_a_second_select_reads_the_interval_the_first_computed(isolated_env, selector_trace_cache,
                                                               capsys, fresh_process) -> None:
    from engine.cli import main

    assert main([*SELECT, "--json"]) == 0
    first = capsys.readouterr().out
    assert fresh_process == [32]  # the first select simulates the ensemble's members
    ensemble_module._cached.cache_clear()  # the next `select` is a new process
    assert main([*SELECT, "--json"]) == 0
    assert capsys.readouterr().out == first  # the same choice and interval, to the last digit
    assert fresh_process == [32]  # and not one member simulated again


def test_a_stored_ensemble_reads_back_bit_identical_and_a_changed_input_is_computed(
        isolated_env, fresh_process) -> None:
    shipped = load_profile("agx-orin-64gb")
    from engine.selector.dataset import profile_settings

    settings = profile_settings(shipped, "gpu")[:5]
    computed = ensemble(_mix(), shipped, settings, members=6, seed=3)
    ensemble_module._cached.cache_clear()
    read = ensemble(_mix(), shipped, settings, members=6, seed=3)
    assert fresh_process == [6]
    assert read == computed and read.energy_ps is not computed.energy_ps  # equal floats, from disk
    # Anything the figures depend on is another entry: the seed, a profile value, the rails.
    ensemble_module._cached.cache_clear()
    ensemble(_mix(), shipped, settings, members=6, seed=4)
    hotter = dataclasses.replace(shipped, module_power_limit_mw=shipped.module_power_limit_mw - 1.0)
    ensemble(_mix(), hotter, settings, members=6, seed=3)
    ensemble(_mix(), shipped, settings, members=6, seed=3, rails=shipped.rail_names[:1])
    assert fresh_process == [6, 6, 6, 6]


def test_an_unreadable_stored_ensemble_is_computed_again(isolated_env, fresh_process, caplog) -> None:
    shipped = load_profile("agx-orin-64gb")
    good = ensemble(BERT_BASE_LIKE, shipped, [], members=3)
    settings = good.settings
    entry = entry_path(ensemble_key(BERT_BASE_LIKE, shipped, settings, 3, 0, None))
    body = json.loads(entry.read_text())
    for broken in ("{not json", json.dumps({**body, "energy_ps": body["energy_ps"][:1]})):
        entry.write_text(broken)
        ensemble_module._cached.cache_clear()
        assert ensemble(BERT_BASE_LIKE, shipped, settings, members=3) == good
    assert fresh_process == [3, 3, 3]  # computed once, then again for each broken entry
    assert "ignoring" in caplog.text
