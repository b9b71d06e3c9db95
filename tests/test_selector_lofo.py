"""Leave-one-family-out evaluation: a family's workloads never reach the selector graded on them."""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import numpy as np
import pytest

from engine.core.errors import ConfigError
from engine.dvfs.objectives import Objective
from engine.selector import lofo
from engine.selector.candidates import CandidateSpec
from engine.selector.dataset import from_twin_zoo

TINY_LLAMA = dict(model_type="llama", vocab_size=512, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, intermediate_size=64, max_position_embeddings=64, bos_token_id=0,
                  eos_token_id=0, tie_word_embeddings=True)
SPEC = CandidateSpec("ridge-poly", "time+energy", small=True)


# traces of the zoo models, shared by the selector tests of a session (conftest)
pytestmark = pytest.mark.usefixtures("selector_trace_cache")


@pytest.fixture(scope="module")
def ds():
    # Three families, two models of BERT: a leak of a sibling model would show.
    return from_twin_zoo(models=["bert-tiny", "bert-mini", "pythia-14m"], configs={"tiny-llama": TINY_LLAMA},
                         tasks=["sst2"], batch_sizes=(8, 32), seq_lens=(32,), precisions=("fp32",),
                         modes=("full", "bitfit"))


def test_each_family_is_held_out_whole(ds):
    splits = lofo.family_splits(ds)
    assert [s.family for s in splits] == ["bert", "llama", "pythia"]
    for split in splits:
        train, test = set(split.train.tolist()), set(split.test.tolist())
        assert train | test == set(range(len(ds))) and not train & test
        assert {ds.workloads[i].family for i in test} == {split.family}
        assert split.family not in {ds.workloads[i].family for i in train}
        # nor any of its models, nor any of its workloads
        assert not {ds.workloads[i].model for i in train} & {ds.workloads[i].model for i in test}
    bert = next(s for s in splits if s.family == "bert")
    assert {ds.workloads[i].model for i in bert.test} == {"bert-tiny", "bert-mini"}
    assert len(ds.subset(bert.test).by_workload()) == 2 * 2 * 2 * 2  # models x batches x modes x loops
    with pytest.raises(ConfigError, match="no workload of family gemma"):
        lofo.family_splits(ds, ["gemma"])
    with pytest.raises(ConfigError, match="at least 2 families"):
        lofo.family_splits(ds.subset(bert.test))


def test_the_selector_graded_on_a_family_never_saw_it(ds, monkeypatch):
    seen: list[set[str]] = []
    fit = lofo.fit_selector

    def spy(train_ds, spec, objective=None, **kw):
        seen.append({w.family for w in train_ds.workloads})
        return fit(train_ds, spec, objective, **kw)

    monkeypatch.setattr(lofo, "fit_selector", spy)
    results = lofo.leave_one_family_out(ds, SPEC, Objective(), probes=(0, 1))
    assert seen == [{"llama", "pythia"}, {"bert", "pythia"}, {"bert", "llama"}]
    workloads = ds.by_workload()
    for k in (0, 1):
        got = [r for r in results if r.probes == k]
        assert sorted(r.workload for r in got) == sorted(workloads)  # every workload graded once per probe count
        for r in got:
            assert r.family == ds.workloads[workloads[r.workload][0]].family
            assert r.regret >= -1e-12  # nothing beats the oracle
            rows = workloads[r.workload]
            e = {ds.settings[i].label(): ds.energy_per_sample[i] for i in rows}
            assert r.regret == pytest.approx(e[r.chosen] / min(e.values()) - 1)

    summary = lofo.summarise(results)
    for k in (0, 1):
        block = summary[f"probes_{k}"]
        assert set(block["families"]) == {"bert", "llama", "pythia"}
        regrets = [r.regret for r in results if r.probes == k]
        assert block["overall"]["mean_regret"] == pytest.approx(statistics.fmean(regrets))
        assert block["overall"]["worst_regret"] == pytest.approx(max(regrets))
        bert = [r.regret for r in results if r.probes == k and r.family == "bert"]
        assert block["families"]["bert"]["worst_regret"] == pytest.approx(max(bert))
        assert block["families"]["bert"]["workloads"] == 16  # models x batches x modes x loops
        assert block["mean_of_family_means"] == pytest.approx(
            np.mean([v["mean_regret"] for v in block["families"].values()]))


@pytest.mark.slow
def test_bench_selector_quick_reports_lofo_and_held_out(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("SLM_DVFS_DATA_DIR", str(tmp_path / "data"))  # the shipped selector, not one of the user's
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
    try:
        import bench_selector
    finally:
        sys.path.pop(0)
    assert bench_selector.main(["--quick"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["source"] == {"truth": "twin", "choices": "predicted", "probes": "twin"}
    families = out["lofo"]["families"]
    assert {"bert", "pythia", "llama", "deberta", "electra", "gpt2", "opt"} <= set(families)
    for k in ("probes_0", "probes_1"):
        block = out["lofo"][k]
        assert set(block["families"]) == set(families)
        assert block["overall"]["worst_regret"] >= block["overall"]["mean_regret"] >= 0
    assert out["held_out"]["workloads"] > 0 and out["held_out"]["probes_3"]["regret"]["worst"] >= 0


@pytest.mark.slow
def test_bench_selector_grades_lofo_alone_on_another_modules_zoo(capsys, tmp_path, monkeypatch):
    """`--blocks lofo --lofo-profile`: the confirmation on a grid the candidates were not compared on."""
    monkeypatch.setenv("SLM_DVFS_DATA_DIR", str(tmp_path / "data"))
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
    try:
        import bench_selector
    finally:
        sys.path.pop(0)
    with pytest.raises(SystemExit) as bad:
        bench_selector.main(["--quick", "--blocks", "lofo,lmoo"])
    assert bad.value.code == 2 and "pick from lofo, lomo, held_out" in capsys.readouterr().err
    assert bench_selector.main(["--quick", "--blocks", "lofo", "--lofo-profile", "orin-nanoo"]) == 2
    err = capsys.readouterr().err
    assert "no device profile 'orin-nanoo'" in err and "orin-nano-8gb" in err and "Traceback" not in err
    assert bench_selector.main(["--quick", "--blocks", "lofo", "--lofo-profile", "orin-nano-8gb"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert "lomo" not in out and "held_out" not in out
    assert out["lofo"]["profile"] == "orin-nano-8gb"
    assert any("orin-nano-8gb" in note for note in out["lofo"]["notes"])
    assert out["lofo"]["probes_0"]["overall"]["workloads"] > 0
