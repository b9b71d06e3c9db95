"""The memory estimate and fit: exact parameter counts for every family (against transformers
itself on meta tensors), what each mode, precision and checkpointing changes, remedies that do
fit, and a too-large workload refused by every command before any model is built."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from engine.core.errors import ConfigError
from engine.workload.sizing import arch as arch_mod
from engine.workload.lora import LoraSettings
from engine.workload.sizing import (DEFAULT_BUDGET_BYTES, GIB, ORIN_MEMTOTAL_BYTES, OS_RESERVE_BYTES,
                                    board_budget, check_memory, estimate_memory, estimate_params, memory_fit,
                                    trainable_params)
from engine.workload.zoo import get_entry, load_zoo

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_families import TINY_CONFIGS  # noqa: E402  (one set of tiny configs for every family)

# Variants of the tiny configs that switch on what the plain ones leave off.
VARIANTS = {
    "deberta-conv": dict(TINY_CONFIGS["deberta"], share_att_key=False, conv_kernel_size=3, conv_act="gelu",
                         position_biased_input=True, type_vocab_size=2, embedding_size=16),
    "opt-projected": dict(TINY_CONFIGS["opt"], word_embed_proj_dim=16),
    "gpt2-inner": dict(TINY_CONFIGS["gpt2"], n_inner=48),
    "llama-biases": dict(TINY_CONFIGS["llama"], attention_bias=True, mlp_bias=True, head_dim=16),
    "qwen3-bias": dict(TINY_CONFIGS["qwen3"], attention_bias=True),
    "electra-unfactorised": dict(TINY_CONFIGS["electra"], embedding_size=32),
    "llama-untied": dict(TINY_CONFIGS["llama"], tie_word_embeddings=False),
}


@pytest.fixture(scope="module")
def meta_models():
    """Each tiny config built by transformers on meta tensors (no allocation)."""
    from engine.workload.models import build_model

    return {name: build_model(cfg, "sst2", device="meta") for name, cfg in {**TINY_CONFIGS, **VARIANTS}.items()}


@pytest.mark.parametrize("name", sorted({**TINY_CONFIGS, **VARIANTS}))
def test_the_count_is_exact_for_every_family_and_mode(name, meta_models) -> None:
    from engine.workload.training.optim import apply_mode

    config = {**TINY_CONFIGS, **VARIANTS}[name]
    model = meta_models[name]
    assert estimate_params(config) == sum(p.numel() for p in model.parameters())
    for mode in ("bitfit", "full"):  # the trainer's own count of what trains
        assert trainable_params(config, mode) == apply_mode(model, mode), mode


@pytest.mark.parametrize("name", sorted(TINY_CONFIGS))
def test_lora_counts_match_peft(name, meta_models) -> None:
    """peft's own counts: the trainable A/B matrices and head, and every parameter (with the head's copy)."""
    import copy

    import warnings

    import peft  # the test extra installs it

    from engine.workload.lora import DEFAULT_TARGETS
    from engine.workload.zoo import MODEL_TYPE_FAMILY

    config = TINY_CONFIGS[name]
    family = MODEL_TYPE_FAMILY[config["model_type"]]
    lora = peft.LoraConfig(task_type="SEQ_CLS", r=4, lora_alpha=8, target_modules=list(DEFAULT_TARGETS[family]),
                           fan_in_fan_out=family == "gpt2")  # GPT-2's Conv1D holds its weight transposed
    with warnings.catch_warnings():  # peft reads a property transformers deprecated: not this test's concern
        warnings.simplefilter("ignore", FutureWarning)
        wrapped = peft.get_peft_model(copy.deepcopy(meta_models[name]), lora)
    est = estimate_memory(config, 1, 8, mode="lora", lora=LoraSettings(rank=4))
    assert est.trainable == sum(p.numel() for p in wrapped.parameters() if p.requires_grad)
    assert est.params == sum(p.numel() for p in wrapped.parameters())


def test_the_zoo_counts_are_exact_and_every_default_fits() -> None:
    for entry in load_zoo().values():
        assert estimate_params(entry.config) == entry.params, entry.name
        fit = memory_fit(estimate_memory(entry.config, entry.batch_size, entry.seq_len, entry.precision), entry.name)
        assert fit.fits and fit.summary().startswith("fits: "), (entry.name, fit.summary())


def test_lora_counts_the_target_matrices_from_their_widths() -> None:
    cfg = TINY_CONFIGS["llama"]  # q_proj 32 -> 32, v_proj 32 -> 16 (grouped-query: 2 KV heads of 8)
    a = arch_mod.architecture(cfg)
    assert a.lora_params(("q_proj", "v_proj"), 4) == 2 * 4 * ((32 + 32) + (32 + 16))
    assert trainable_params(cfg, "lora", lora=LoraSettings(rank=4)) == 2 * 4 * (64 + 48) + a.head_params
    assert trainable_params(cfg, "head") == a.head_params == 32 * 2  # score: hidden x labels, no bias
    phi = arch_mod.architecture(TINY_CONFIGS["phi"])  # the fused qkv_proj is adapted whole
    assert phi.lora_params(("qkv_proj",), 8) == 2 * 8 * (32 + 96)
    with pytest.raises(ConfigError, match="name no linear layer") as err:
        trainable_params(cfg, "lora", lora=LoraSettings(targets=("query",)))
    assert "q_proj" in err.value.remedy


def test_gqa_tied_and_gated_shapes() -> None:
    base = {**TINY_CONFIGS["llama"], "num_key_value_heads": 4}
    gqa = TINY_CONFIGS["llama"]  # 2 KV heads: K and V weights halve
    assert estimate_params(base) - estimate_params(gqa) == 2 * 2 * 32 * 16
    # Classification drops the LM head: tying changes nothing.
    assert estimate_params(VARIANTS["llama-untied"]) == estimate_params(TINY_CONFIGS["llama"])
    gated = arch_mod.architecture(TINY_CONFIGS["llama"])
    assert gated.gated and sum(1 for x in gated.linears if x.name in ("gate_proj", "up_proj", "down_proj")) == 3
    big_vocab = {**TINY_CONFIGS["qwen"], "vocab_size": 151_936}
    assert estimate_params(big_vocab) - estimate_params(TINY_CONFIGS["qwen"]) == (151_936 - 512) * 32


def test_modes_precision_and_checkpointing_change_the_parts_they_should() -> None:
    cfg = get_entry("smollm2-360m").config
    full = estimate_memory(cfg, 8, 256, "fp32", "full")
    assert full.gradients == 4 * full.params and full.optimizer == 8 * full.params
    assert full.activations == 8 * full.activations_per_sample
    for mode in ("bitfit", "head", "lora"):
        est = estimate_memory(cfg, 8, 256, "fp32", mode)
        assert 0 < est.trainable < full.trainable / 10 and est.gradients == 4 * est.trainable
        assert est.total < full.total
    lora = estimate_memory(cfg, 8, 256, "fp32", "lora")
    assert lora.params > full.params and lora.lora_rank == 8  # the adapters are extra weights
    head = estimate_memory(cfg, 8, 256, "fp32", "head")
    assert head.activations < full.activations / 10  # no graph in the frozen backbone
    half = estimate_memory(cfg, 8, 256, "bf16", "full")
    assert half.activations < full.activations and half.weights == full.weights  # fp32 master weights
    assert half.weight_copies == 2 * arch_mod.architecture(cfg).linear_weights and full.weight_copies == 0
    ckpt = estimate_memory(cfg, 8, 256, "fp32", "full", checkpointing=True)
    assert ckpt.activations < full.activations / 5
    exact = estimate_memory(cfg, 8, 256, params=full.params + 1000)
    assert exact.weights == full.weights + 4000 and exact.exact_params == full.params + 1000


def test_eager_attention_keeps_the_scores_and_sdpa_does_not() -> None:
    deberta, bert = get_entry("deberta-v3-base").config, get_entry("bert-base-uncased").config
    grow = {name: estimate_memory(cfg, 1, 512).activations_per_sample / estimate_memory(cfg, 1, 256).activations_per_sample
            for name, cfg in (("deberta", deberta), ("bert", bert))}
    assert grow["deberta"] > 2.5 > grow["bert"]  # heads x length^2 vs. linear in length


def test_the_budget_is_memtotal_less_the_reserve() -> None:
    assert DEFAULT_BUDGET_BYTES == ORIN_MEMTOTAL_BYTES - OS_RESERVE_BYTES == board_budget()
    assert board_budget(32 * GIB) == 32 * GIB - OS_RESERVE_BYTES
    tiny = estimate_memory(get_entry("bert-tiny").config, 32, 128)
    assert memory_fit(tiny).fits and not memory_fit(tiny, memory_bytes=tiny.total - 1).fits


def test_every_remedy_fits_and_they_come_in_order() -> None:
    gemma = get_entry("gemma-2b").config
    est = estimate_memory(gemma, 64, 512, "fp32", "full")
    fit = memory_fit(est, "gemma-2b")
    assert not fit.fits and fit.summary().startswith("does not fit: ")
    flags = [r.flags.split()[0] for r in fit.remedies]
    order = ["--batch-size", "--grad-checkpointing", "--precision", "--mode", "--max-seq-len", "--model"]
    assert flags == sorted(flags, key=order.index) and flags[0] == "--batch-size"
    for remedy in fit.remedies:
        assert remedy.estimate.total <= fit.budget, remedy
    batch = int(fit.remedies[0].flags.split()[1])
    assert estimate_memory(gemma, batch + 1, 512, "fp32").total > fit.budget  # the largest that fits
    # A workload where LoRA at the default rank is what fits, said so with the rank.
    lora_fit = memory_fit(estimate_memory(gemma, 1, 128, "fp32", "full"), "gemma-2b", memory_bytes=30 * GIB)
    assert [r.flags for r in lora_fit.remedies if r.flags.split()[0] == "--mode"] == ["--mode lora"]
    assert "LoRA rank 8" in lora_fit.refusal().remedy
    assert "--batch-size" not in lora_fit.refusal().remedy  # batch 1 cannot shrink
    assert "--precision bf16" not in " ".join(
        r.flags for r in memory_fit(est, "gemma-2b", cuda=False).remedies)  # not on a CPU


def test_a_combination_is_offered_when_no_single_change_fits() -> None:
    gemma = get_entry("gemma-2b").config
    est = estimate_memory(gemma, 8, 1024, "fp32", "full")
    fit = memory_fit(est, "gemma-2b", memory_bytes=20 * GIB, zoo=False)
    assert len(fit.remedies) == 1 and fit.remedies[0].flags.startswith("--grad-checkpointing --precision bf16 --mode lora")
    assert fit.remedies[0].estimate.total <= 20 * GIB
    with pytest.raises(ConfigError, match="needs an estimated"):
        check_memory(est, "gemma-2b", 8, 1024, memory_bytes=20 * GIB)


TOO_BIG = ["--model", "gemma-2b", "--task", "sst2", "--batch-size", "64", "--max-seq-len", "512",
           "--precision", "fp32"]


@pytest.mark.parametrize("argv", [
    ["run", *TOO_BIG, "--twin", "agx-orin-64gb", "--simulate", "--steps", "2"],
    ["run", *TOO_BIG, "--twin", "agx-orin-64gb", "--steps", "2"],
    ["sweep", *TOO_BIG, "--twin", "agx-orin-64gb", "--fast"],
    ["select", *TOO_BIG],
    ["finetune", *TOO_BIG, "--steps", "2"],
], ids=["run-simulate", "run", "sweep", "select", "finetune"])
def test_a_too_large_workload_is_refused_before_any_model_is_built(argv, monkeypatch, capsys, tmp_path) -> None:
    from engine.cli import main
    from engine.workload import models

    def no_build(*args, **kwargs):
        raise AssertionError("a model was built for a workload that does not fit")

    monkeypatch.setattr(models, "build_model", no_build)
    monkeypatch.setattr(models, "load_model", no_build)
    db = ["--db", str(tmp_path / "r.sqlite")] if argv[0] in ("run", "sweep") else []
    assert main([*argv, *db]) == 2
    err = capsys.readouterr().err
    assert "gemma-2b at batch 64, length 512 (fp32, mode full) needs an estimated" in err, err
    assert "[predicted], more than" in err
    assert "--batch-size 5" in err and "--grad-checkpointing" in err and "Traceback" not in err
