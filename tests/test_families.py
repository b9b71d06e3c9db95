"""Every supported architecture family: a tiny config of each loads, traces on meta tensors,
and takes real CPU training steps through the fine-tune path, offline."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from engine.core.errors import ConfigError
from engine.workload import zoo
from engine.workload.finetune import FinetuneSpec, run_finetune
from engine.workload.models import build_model, resolve_model
from engine.workload.data.tokenization import tokenizer_kind
from engine.workload.trace.tracer import capture_step_trace
from engine.workload.spec import WorkloadSpec

VOCAB = 512  # above the 256 bytes + specials a trained byte-level BPE needs
_DECODER = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                intermediate_size=64, max_position_embeddings=64)
# Two layers, hidden 32; each as its config.json would say it (model_type and its own key names).
TINY_CONFIGS: dict[str, dict[str, Any]] = {
    "bert": dict(model_type="bert", vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
                 num_attention_heads=4, intermediate_size=64, max_position_embeddings=64),
    "roberta": dict(model_type="roberta", vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
                    num_attention_heads=4, intermediate_size=64, max_position_embeddings=66,
                    pad_token_id=1, bos_token_id=0, eos_token_id=2, type_vocab_size=1),
    "distilbert": dict(model_type="distilbert", vocab_size=VOCAB, dim=32, n_layers=2, n_heads=4,
                       hidden_dim=64, max_position_embeddings=64),
    "electra": dict(model_type="electra", vocab_size=VOCAB, embedding_size=16, hidden_size=32,
                    num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                    max_position_embeddings=64),
    "deberta": dict(model_type="deberta-v2", vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
                    num_attention_heads=4, intermediate_size=64, max_position_embeddings=64,
                    relative_attention=True, position_buckets=16, max_relative_positions=-1,
                    pos_att_type=["p2c", "c2p"], position_biased_input=False, type_vocab_size=0,
                    norm_rel_ebd="layer_norm", share_att_key=True),
    "pythia": dict(model_type="gpt_neox", vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
                   num_attention_heads=4, intermediate_size=64, max_position_embeddings=64,
                   rotary_pct=0.25, bos_token_id=0, eos_token_id=0),
    "gpt2": dict(model_type="gpt2", vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=64,
                 bos_token_id=0, eos_token_id=0),
    "opt": dict(model_type="opt", vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
                num_attention_heads=4, ffn_dim=64, word_embed_proj_dim=32, max_position_embeddings=64,
                pad_token_id=1, bos_token_id=2, eos_token_id=2),
    "llama": dict(model_type="llama", num_key_value_heads=2, bos_token_id=0, eos_token_id=[0, 2],
                  tie_word_embeddings=True, **_DECODER),
    "qwen": dict(model_type="qwen2", num_key_value_heads=2, bos_token_id=0, eos_token_id=0,
                 tie_word_embeddings=True, **_DECODER),
    "qwen3": dict(model_type="qwen3", num_key_value_heads=2, head_dim=8, bos_token_id=0, eos_token_id=0,
                  **_DECODER),
    "gemma": dict(model_type="gemma", num_key_value_heads=1, head_dim=8, pad_token_id=0,
                  bos_token_id=2, eos_token_id=1, **_DECODER),
    "gemma2": dict(model_type="gemma2", num_key_value_heads=2, head_dim=8, pad_token_id=0,
                   bos_token_id=2, eos_token_id=1, sliding_window=32, **_DECODER),
    "phi": dict(model_type="phi3", num_key_value_heads=4, pad_token_id=0, bos_token_id=1,
                eos_token_id=2, **_DECODER),
}


# one cache (trained tokenizers, traces) for the module, one thread, never the network (conftest)
pytestmark = pytest.mark.usefixtures("offline_module")


def _config_file(tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(TINY_CONFIGS[name]))
    return path


def test_every_family_has_a_tiny_config() -> None:
    covered = {zoo.MODEL_TYPE_FAMILY[c["model_type"]] for c in TINY_CONFIGS.values()}
    assert covered == set(zoo.FAMILIES)
    assert set(zoo.MODEL_TYPE_FAMILY.values()) == set(zoo.FAMILIES)
    assert {c["model_type"] for c in TINY_CONFIGS.values()} == set(zoo.MODEL_TYPE_FAMILY)


def test_bert_and_pythia_keep_their_family_names() -> None:
    assert zoo.MODEL_TYPE_FAMILY["bert"] == "bert" and zoo.MODEL_TYPE_FAMILY["gpt_neox"] == "pythia"
    assert not zoo.is_decoder("bert") and zoo.is_decoder("pythia")


def test_an_unknown_model_type_is_refused_with_the_supported_ones(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "t5", "d_model": 32}))
    with pytest.raises(ConfigError) as err:
        resolve_model(str(path))
    assert "'t5' is not supported" in str(err.value) and "deberta-v2" in err.value.remedy


def test_dims_read_each_architectures_own_key_names() -> None:
    assert zoo.dims(TINY_CONFIGS["gpt2"]) == {"hidden_size": 32, "num_hidden_layers": 2,
                                              "num_attention_heads": 4}
    assert zoo.dims(TINY_CONFIGS["distilbert"]) == {"hidden_size": 32, "num_hidden_layers": 2,
                                                    "num_attention_heads": 4, "intermediate_size": 64}


@pytest.mark.parametrize("name", sorted(TINY_CONFIGS))
def test_family_traces_on_meta_tensors(name: str, tmp_path: Path) -> None:
    resolved = resolve_model(str(_config_file(tmp_path, name)))
    assert resolved.family == zoo.MODEL_TYPE_FAMILY[TINY_CONFIGS[name]["model_type"]]
    model = build_model(resolved.config, "sst2", device="meta")
    assert all(p.device.type == "meta" for p in model.parameters())
    if zoo.is_decoder(resolved.family):  # the head needs a pad token to find the last real one
        assert isinstance(model.config.pad_token_id, int)
    record = capture_step_trace(model, name=name, batch_size=4, seq_len=32)
    assert record.method == "meta", record.notes
    ops = {op.kind: op for op in record.trace.ops}
    assert ops["matmul"].flops > 0 and ops["matmul"].kernels > 0
    assert ops["attention"].flops > 0, "no attention counted"
    assert ops["optimizer"].bytes > 0 and ops["embedding"].bytes > 0
    assert record.trace.params == sum(p.numel() for p in model.parameters())
    # a rough check of the matmul count: at least 6 FLOPs per weight per token (fwd + bwd)
    body = sum(p.numel() for n, p in model.named_parameters() if p.dim() == 2 and "embed" not in n
               and "wte" not in n and "wpe" not in n)
    assert ops["matmul"].flops >= 0.5 * 6 * body * 4 * 32


@pytest.mark.parametrize("name", sorted(TINY_CONFIGS))
def test_family_takes_real_cpu_steps(name: str, tmp_path: Path) -> None:
    config = _config_file(tmp_path, name)
    result = run_finetune(FinetuneSpec(WorkloadSpec(str(config), "sst2", batch_size=4, seq_len=16, padding="dynamic"),
                                       steps=2, train_samples=24, eval_samples=8))
    assert result.steps == 2 and result.weights == "random" and result.synthetic
    assert all(torch.isfinite(torch.tensor(loss)) for loss in result.losses)
    assert result.trainable_params == result.params > 0


def test_decoder_pad_token_comes_from_eos_when_missing() -> None:
    from engine.workload.models import decoder_pad_token_id

    assert decoder_pad_token_id({"eos_token_id": [7, 9]}, "llama") == 7
    assert decoder_pad_token_id({"eos_token_id": 5}, "qwen") == 5
    assert decoder_pad_token_id({"pad_token_id": 3, "eos_token_id": 5}, "gemma") == 3
    assert decoder_pad_token_id({"eos_token_id": 0}, "pythia") == 1  # Pythia's <|padding|>


def test_tokenizer_kinds() -> None:
    assert {f for f in zoo.FAMILIES if tokenizer_kind(f) == "wordpiece"} == {
        "bert", "distilbert", "electra", "deberta"}
    with pytest.raises(ConfigError):
        tokenizer_kind("t5")


def test_the_model_pads_with_the_tokenizers_pad_id() -> None:
    from types import SimpleNamespace

    from engine.workload.finetune import align_pad_token

    model = SimpleNamespace(config=SimpleNamespace(pad_token_id=0))
    align_pad_token(model, SimpleNamespace(pad_token_id=1))
    assert model.config.pad_token_id == 1
    align_pad_token(model, SimpleNamespace(pad_token_id=None))  # nothing to align with
    assert model.config.pad_token_id == 1


@pytest.mark.parametrize("name", sorted(TINY_CONFIGS))
def test_selector_features_of_every_family(name: str, tmp_path: Path) -> None:
    from engine.selector.features import WORKLOAD_COLUMNS, describe_workload

    feats, trace = describe_workload(str(_config_file(tmp_path, name)), "sst2", batch_size=4, seq_len=32)
    row = dict(zip((n for n, _ in WORKLOAD_COLUMNS), feats.row()))  # the step's costs: no family column
    assert row["flops"] == trace.flops > 0 and row["trainable_fraction"] == 1.0
    assert (feats.layers, feats.hidden) == (2, 32) and trace.params == feats.params


@pytest.mark.parametrize("name", sorted(TINY_CONFIGS))
def test_cli_select_sweep_and_simulated_run_on_every_family(name: str, tmp_path: Path, isolated_env: Any,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    from engine.cli import main

    # one config of each family, as the done-when asks: offline, through the CLI
    config = str(_config_file(tmp_path, name))
    assert main(["select", "--model", config, "--task", "sst2", "--batch-size", "4",
                 "--max-seq-len", "32"]) == 0, capsys.readouterr().err
    assert "[predicted]" in capsys.readouterr().out
    assert main(["sweep", "--model", config, "--task", "sst2", "--twin", "--fast",
                 "--batch-size", "4", "--max-seq-len", "32"]) == 0, capsys.readouterr().err
    assert "[twin]" in capsys.readouterr().out
    assert main(["run", "--model", config, "--task", "sst2", "--twin", "--simulate", "--steps", "3",
                 "--batch-size", "4", "--max-seq-len", "32"]) == 0, capsys.readouterr().err
    assert "[twin]" in capsys.readouterr().out
