"""What `select` costs (issue 24): its interval's ensemble is computed once per workload, not once per process."""

from __future__ import annotations

import dataclasses
import json

import pytest

from engine.core.trace import StepMix
from engine.device.twin import ensemble as ensemble_module
from engine.device.twin.ensemble import ensemble
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
    from engine.device.twin.ensemble_cache import ensemble_key, entry_path

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


# --------------------------------------------------------------------------- the first trace of a workload
def _tiny(family: str, layers: int = 4, **shape):  # type: ignore[no-untyped-def]
    """A named workload of the family's tiny config (test_families) with `layers` layers."""
    from engine.workload.spec import WorkloadSpec
    from engine.workload.trace.derive import layer_key
    from test_families import TINY_CONFIGS

    config = dict(TINY_CONFIGS[family])
    key = layer_key(config)
    assert key is not None
    config[key] = layers
    return WorkloadSpec(family, "sst2", batch_size=4, seq_len=16, padding="max_length", name=f"tiny-{family}",
                        config=config, **{"precision": "fp32", **shape})


@pytest.fixture
def built_layers(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """The layer count of every model built from here on."""
    from engine.workload import models, zoo

    seen: list[int] = []
    real = models.build_model

    def spying(config, task, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(zoo.dims(config).get("num_hidden_layers", -1))
        return real(config, task, **kwargs)

    monkeypatch.setattr(models, "build_model", spying)
    return seen


FAMILIES = ("bert", "roberta", "distilbert", "electra", "deberta", "pythia", "gpt2", "opt", "llama", "qwen",
            "qwen3", "gemma", "phi")
VARIANTS = {"bert": [dict(mode="lora"), dict(grad_checkpointing=True), dict(precision="bf16")],
            "llama": [dict(mode="lora"), dict(precision="fp16", mode="bitfit")],
            "deberta": [dict(grad_checkpointing=True)], "pythia": [dict(mode="head")]}


@pytest.mark.parametrize("family,shape", [(f, {}) for f in FAMILIES]
                         + [(f, v) for f, vs in VARIANTS.items() for v in vs],
                         ids=lambda v: v if isinstance(v, str) else "-".join(f"{k}={x}" for k, x in v.items()) or "full")
def test_a_derived_trace_equals_the_built_models_bit_for_bit(isolated_env, built_layers, family, shape) -> None:
    from engine.workload.resolve import _trace_built, trace_workload

    spec = _tiny(family, **shape)
    derived = trace_workload(spec)
    assert built_layers == [1, 2]  # the four-layer model was never built
    built = _trace_built(spec, spec.config, 16, cache=False)
    assert (derived.trace, derived.total_params, derived.method) == built  # exact: == on every float


def test_a_family_whose_layers_differ_is_built_whole(isolated_env, built_layers) -> None:
    from engine.workload.resolve import trace_workload
    from engine.workload.trace.derive import derivable

    spec = _tiny("gemma2")  # sliding-window and global attention, layer by layer
    assert derivable(spec.config) is None
    trace_workload(spec)
    assert built_layers == [4]
    assert derivable({**_tiny("bert").config, "num_hidden_layers": 2}) is None  # nothing to save


def test_a_cold_select_does_not_build_the_full_model(isolated_env, built_layers, capsys, fresh_process) -> None:
    from engine.cli import main

    assert main(["select", "--model", "smollm2-135m", "--task", "sst2", "--pad", "max", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["setting"] and out["workload"]["layers"] == 30
    assert built_layers == [1, 2]  # its 30 layers derived from one and two
