"""The shipped zoo: architectures as published, parameter counts that match built models."""

from __future__ import annotations

import shutil

import pytest

from engine.core.constants import PRECISIONS
from engine.core.errors import ConfigError, ProfileError
from engine.workload import zoo
from engine.workload.glue import TASKS, get_task
from engine.workload.models import build_model

BERT = {  # name: (hub id, layers, hidden)
    "bert-tiny": ("prajjwal1/bert-tiny", 2, 128),
    "bert-mini": ("prajjwal1/bert-mini", 4, 256),
    "bert-small": ("prajjwal1/bert-small", 4, 512),
    "bert-medium": ("prajjwal1/bert-medium", 8, 512),
    "bert-base-uncased": ("bert-base-uncased", 12, 768),
}
PYTHIA = {  # name: (layers, hidden, heads, intermediate)
    "pythia-14m": (6, 128, 4, 512),
    "pythia-31m": (6, 256, 8, 1024),
    "pythia-70m": (6, 512, 8, 2048),
    "pythia-160m": (12, 768, 12, 3072),
    "pythia-410m": (24, 1024, 16, 4096),
}

OTHERS = {  # name: (hub id, family, model_type, layers, hidden, heads), as published
    "distilbert-base-uncased": ("distilbert/distilbert-base-uncased", "distilbert", "distilbert", 6, 768, 12),
    "roberta-base": ("FacebookAI/roberta-base", "roberta", "roberta", 12, 768, 12),
    "deberta-v3-small": ("microsoft/deberta-v3-small", "deberta", "deberta-v2", 6, 768, 12),
    "smollm2-135m": ("HuggingFaceTB/SmolLM2-135M", "llama", "llama", 30, 576, 9),
    "qwen2.5-0.5b": ("Qwen/Qwen2.5-0.5B", "qwen", "qwen2", 24, 896, 14),
    "deberta-v3-base": ("microsoft/deberta-v3-base", "deberta", "deberta-v2", 12, 768, 12),
    "smollm2-360m": ("HuggingFaceTB/SmolLM2-360M", "llama", "llama", 32, 960, 15),
    "llama-3.2-1b": ("meta-llama/Llama-3.2-1B", "llama", "llama", 16, 2048, 32),
    "gemma-2b": ("google/gemma-2b", "gemma", "gemma", 18, 2048, 8),
}
# Published totals of the backbones (the classification head adds hidden x 2 (+ bias) for
# the decoders; DistilBERT and RoBERTa add a hidden x hidden pre-classifier too).
PUBLISHED = {"smollm2-135m": 134_515_008, "smollm2-360m": 361_821_120, "qwen2.5-0.5b": 494_032_768,
             "llama-3.2-1b": 1_235_814_400, "gemma-2b": 2_506_172_416}


def test_zoo_lists_every_model_with_published_architecture():
    entries = zoo.load_zoo()
    assert set(entries) == set(BERT) | set(PYTHIA) | set(OTHERS)
    for name, (hub_id, family, model_type, layers, hidden, heads) in OTHERS.items():
        e = entries[name]
        assert (e.hub_id, e.family, e.model_type) == (hub_id, family, model_type)
        assert zoo.MODEL_TYPE_FAMILY[model_type] == family
        d = zoo.dims(e.config)
        assert (d["num_hidden_layers"], d["hidden_size"], d["num_attention_heads"]) == (layers, hidden, heads)
    for name, (hub_id, layers, hidden) in BERT.items():
        e = entries[name]
        c = e.config
        assert (e.hub_id, e.family, e.model_type) == (hub_id, "bert", "bert")
        assert (c["num_hidden_layers"], c["hidden_size"]) == (layers, hidden)
        assert c["num_attention_heads"] == hidden // 64
        assert c["intermediate_size"] == 4 * hidden
        assert (c["vocab_size"], c["max_position_embeddings"], c["type_vocab_size"]) == (
            30522, 512, 2)
    for name, (layers, hidden, heads, inter) in PYTHIA.items():
        e = entries[name]
        c = e.config
        assert (e.hub_id, e.family, e.model_type) == (f"EleutherAI/{name}", "pythia", "gpt_neox")
        assert (c["num_hidden_layers"], c["hidden_size"], c["num_attention_heads"],
                c["intermediate_size"]) == (layers, hidden, heads, inter)
        assert (c["vocab_size"], c["rotary_pct"], c["use_parallel_residual"],
                c["max_position_embeddings"]) == (50304, 0.25, True, 2048)
    for e in entries.values():
        assert e.batch_size > 0 and 0 < e.seq_len <= e.config["max_position_embeddings"]
        assert e.precision in PRECISIONS


@pytest.mark.parametrize("name", list(BERT) + list(PYTHIA) + list(OTHERS))
def test_param_count_matches_a_model_built_with_random_weights(name):
    entry = zoo.get_entry(name)
    # Built on the meta device: no memory, so even pythia-410m takes a fraction of a second.
    model = build_model(entry.config, "sst2", device="meta")
    built = sum(p.numel() for p in model.parameters())
    assert built == entry.params
    for task in (get_task("mnli"), get_task("stsb")):  # other heads: within 1%
        other = sum(p.numel() for p in build_model(entry.config, task, device="meta").parameters())
        assert abs(other - entry.params) / entry.params < 0.01


def test_decoder_counts_match_the_published_sizes():
    for name, total in PUBLISHED.items():  # tied embeddings: the backbone is the whole LM
        e = zoo.get_entry(name)
        assert e.params - 2 * e.config["hidden_size"] == total


def test_pythia_counts_match_the_published_causal_lm_sizes():
    """Classification drops Pythia's untied LM head; adding it back gives the known totals."""
    known = {"pythia-70m": 70_426_624, "pythia-160m": 162_322_944, "pythia-410m": 405_334_016}
    for name, total in known.items():
        e = zoo.get_entry(name)
        head = e.config["vocab_size"] * e.config["hidden_size"]
        assert e.params - 2 * e.config["hidden_size"] + head == total


def test_get_entry_is_case_insensitive_and_finds_hub_ids():
    assert zoo.get_entry("BERT-Tiny").name == "bert-tiny"
    assert zoo.find_by_hub_id("eleutherai/pythia-70m").name == "pythia-70m"
    assert zoo.find_by_hub_id("nobody/nothing") is None


def test_unknown_model_lists_the_zoo_and_other_accepted_specs():
    with pytest.raises(ConfigError) as err:
        zoo.get_entry("bert-huge")
    text = str(err.value)
    assert "'bert-huge' is not in the model zoo" in text
    assert "pythia-410m" in text and "bert-tiny" in text
    assert "hub id" in text and "config.json" in text and "folder" in text


def _copy_zoo(tmp_path):
    path = tmp_path / "models.toml"
    shutil.copy(zoo.zoo_path(), path)
    return path


def test_corrupt_toml_is_a_profile_error(tmp_path):
    path = _copy_zoo(tmp_path)
    path.write_text(path.read_text() + "\n[models.broken\nhub_id = ", encoding="utf-8")
    with pytest.raises(ProfileError, match="not valid TOML") as err:
        zoo.load_zoo(path)
    assert "restore profiles/models.toml" in str(err.value)


@pytest.mark.parametrize("edit, message", [
    (('params = 4_386_178', 'params = "many"'), "'params' is missing or not a int"),
    (('family = "bert"\nparams = 4_386_178', 'family = "t5"\nparams = 4_386_178'),
     "family 't5'"),
    (('precision = "fp32"', 'precision = "int3"'), "precision 'int3'"),
    (('num_hidden_layers = 2\n', ''), "config.num_hidden_layers"),
])
def test_incomplete_entries_are_profile_errors(tmp_path, edit, message):
    path = _copy_zoo(tmp_path)
    old, new = edit
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1), encoding="utf-8")
    with pytest.raises(ProfileError, match=message):
        zoo.load_zoo(path)


def test_missing_or_empty_zoo(tmp_path):
    with pytest.raises(ProfileError, match="missing"):
        zoo.load_zoo(tmp_path / "nope.toml")
    (tmp_path / "empty.toml").write_text("schema = 1\n")
    with pytest.raises(ProfileError, match="no \\[models"):
        zoo.load_zoo(tmp_path / "empty.toml")


def test_downloads_need_both_permission_and_no_offline_flag(monkeypatch):
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    assert zoo.downloads_allowed(True)
    assert not zoo.downloads_allowed(False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert not zoo.downloads_allowed(True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    assert zoo.downloads_allowed(True)


def test_glue_task_names_resolve():
    assert get_task("SST-2") is get_task("sst2") is get_task("sst-2") is TASKS["sst2"]
    assert get_task("STS-B").is_regression and get_task("stsb").num_labels == 1
    assert get_task("mnli").eval_splits == ("validation_matched", "validation_mismatched")
    with pytest.raises(ConfigError, match="unknown GLUE task") as err:
        get_task("squad")
    assert "SST-2" in str(err.value)
