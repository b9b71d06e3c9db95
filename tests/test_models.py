"""Models and tokenizers: offline by default, random weights said out loud, heads per task."""

from __future__ import annotations

import json

import pytest
import torch

from engine.core.errors import ConfigError
from engine.workload import models, zoo
from engine.workload.data import tokenization
from engine.workload.data.text import encode, load_glue_text
from engine.workload.glue import get_task
from engine.workload.models import load_model, resolve_model

TINY_PYTHIA = {  # small enough to build in milliseconds
    "model_type": "gpt_neox", "vocab_size": 1024, "hidden_size": 32, "num_hidden_layers": 2,
    "num_attention_heads": 2, "intermediate_size": 64, "rotary_pct": 0.25,
    "max_position_embeddings": 128, "use_parallel_residual": True, "tie_word_embeddings": False,
}
TINY_BERT = {
    "model_type": "bert", "vocab_size": 1024, "hidden_size": 32, "num_hidden_layers": 2,
    "num_attention_heads": 2, "intermediate_size": 64, "max_position_embeddings": 128,
}


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SLM_DVFS_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # tests never reach the network


def _write_config(folder, config):
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "config.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    return path


def _skip_if_cached(hub_id):
    from huggingface_hub import try_to_load_from_cache

    if isinstance(try_to_load_from_cache(hub_id, "config.json"), str):
        pytest.skip(f"{hub_id} is in this machine's Hugging Face cache")


def test_zoo_model_without_checkpoint_is_built_with_random_weights():
    _skip_if_cached("prajjwal1/bert-tiny")
    model, info = load_model("bert-tiny", "SST-2")
    entry = zoo.get_entry("bert-tiny")
    assert info.weights == "random" and info.origin == "zoo:bert-tiny"
    assert (info.name, info.family, info.params) == ("bert-tiny", "bert", entry.params)
    assert (info.num_layers, info.hidden_size, info.num_heads, info.vocab_size) == (
        2, 128, 2, 30522)
    assert type(model).__name__ == "BertForSequenceClassification"
    assert model.config.num_labels == 2
    assert model.config.id2label == {0: "negative", 1: "positive"}
    assert all(p.dtype == torch.float32 for p in model.parameters())


def test_pythia_regression_head_with_pad_token():
    _skip_if_cached("EleutherAI/pythia-14m")
    model, info = load_model("pythia-14m", "STS-B")
    assert type(model).__name__ == "GPTNeoXForSequenceClassification"
    assert model.config.num_labels == 1 and model.config.problem_type == "regression"
    assert model.config.pad_token_id == models.PYTHIA_PAD_TOKEN_ID == info.config["pad_token_id"]
    ids = torch.randint(2, 500, (3, 10))
    ids[0, 6:] = models.PYTHIA_PAD_TOKEN_ID
    out = model(input_ids=ids, attention_mask=(ids != 1).long(),
                labels=torch.tensor([0.5, 2.0, 4.5]))
    assert out.logits.shape == (3, 1)
    expected = torch.nn.functional.mse_loss(out.logits.squeeze(-1), torch.tensor([0.5, 2.0, 4.5]))
    assert torch.allclose(out.loss, expected)


def test_same_seed_same_weights_other_seed_other_weights(tmp_path):
    spec = str(_write_config(tmp_path / "p", TINY_PYTHIA))
    a, _ = load_model(spec, "rte", seed=7)
    b, _ = load_model(spec, "rte", seed=7)
    c, _ = load_model(spec, "rte", seed=8)
    pa, pb, pc = (torch.cat([p.flatten() for p in m.parameters()]) for m in (a, b, c))
    assert torch.equal(pa, pb) and not torch.equal(pa, pc)


def test_checkpoint_folder_gives_pretrained_weights_even_for_another_head(tmp_path):
    spec = str(_write_config(tmp_path / "cfg", TINY_BERT))
    trained, _ = load_model(spec, "stsb", seed=1)
    with torch.no_grad():
        for p in trained.parameters():
            p.add_(0.5)  # weights no fresh initialisation could give
    trained.save_pretrained(tmp_path / "ckpt")
    model, info = load_model(str(tmp_path / "ckpt"), "mnli")
    assert info.weights == "pretrained"
    assert info.origin == f"dir:{(tmp_path / 'ckpt').resolve()}"
    assert model.config.num_labels == 3 and model.config.problem_type != "regression"
    saved = trained.state_dict()
    for name, tensor in model.state_dict().items():
        if not name.startswith("classifier"):
            assert torch.equal(tensor, saved[name]), name
    assert model.classifier.weight.shape == (3, 32)


def test_config_json_alone_means_architecture_only(tmp_path):
    path = _write_config(tmp_path / "only-config", TINY_PYTHIA)
    model, info = load_model(str(path), "qnli")
    assert info.weights == "random" and info.origin == f"config:{path.resolve()}"
    assert info.family == "pythia" and info.name == "only-config"
    assert info.params == sum(p.numel() for p in model.parameters())
    # A folder with a config.json but no weights: random too, and says where it came from.
    model, info = load_model(str(path.parent), "qnli")
    assert info.weights == "random" and info.origin.startswith("dir:")


def test_hub_id_of_a_zoo_model_builds_from_the_zoo_offline():
    _skip_if_cached("EleutherAI/pythia-70m")
    resolved = resolve_model("EleutherAI/pythia-70m")
    assert resolved.origin == "hub:EleutherAI/pythia-70m" and resolved.entry.name == "pythia-70m"
    assert resolved.config["hidden_size"] == 512


def test_bad_specs_are_clear_errors(tmp_path):
    with pytest.raises(ConfigError, match="not in the model zoo") as err:
        load_model("bert-gigantic", "sst2")
    assert "bert-tiny" in str(err.value) and "hub id" in str(err.value)
    with pytest.raises(ConfigError, match="nor in the local Hugging Face cache") as err:
        load_model("nobody/no-such-model", "sst2")
    assert "download" in str(err.value)
    with pytest.raises(ConfigError, match="no such file or folder"):
        load_model(str(tmp_path / "missing" / "config.json"), "sst2")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="has no config.json"):
        load_model(str(tmp_path / "empty"), "sst2")
    t5 = _write_config(tmp_path / "t5", {"model_type": "t5", "vocab_size": 100})
    with pytest.raises(ConfigError, match="model_type 't5' is not supported"):
        load_model(str(t5), "sst2")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json", encoding="utf-8")
    with pytest.raises(ConfigError, match="cannot read the model configuration"):
        load_model(str(bad), "sst2")
    with pytest.raises(ConfigError, match="unknown GLUE task"):
        load_model("bert-tiny", "imdb")


@pytest.mark.parametrize("allow, offline_env, expect_local_only", [
    (False, None, True),
    (True, "1", True),  # HF_HUB_OFFLINE beats the caller's permission
    (True, None, False),
])
def test_downloads_only_when_allowed_and_not_offline(monkeypatch, allow, offline_env,
                                                     expect_local_only):
    from transformers import AutoModelForSequenceClassification

    calls = []

    def fake_from_pretrained(source, **kwargs):
        calls.append((source, kwargs["local_files_only"]))
        raise OSError("not cached")

    monkeypatch.setattr(AutoModelForSequenceClassification, "from_pretrained",
                        fake_from_pretrained)
    if offline_env is None:
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
        monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    else:
        monkeypatch.setenv("HF_HUB_OFFLINE", offline_env)
    _, info = load_model("bert-tiny", "sst2", allow_download=allow)
    assert calls == [("prajjwal1/bert-tiny", expect_local_only)]
    assert info.weights == "random"


def test_offline_loads_never_reach_the_network(monkeypatch, tmp_path):
    """Without permission nothing asks the hub, even where transformers forgets local_files_only
    (v5 looks for a peft adapter online): offline, each such call would retry before failing."""
    import huggingface_hub.constants
    import huggingface_hub.file_download

    asked = []

    def no_network(url, *args, **kwargs):
        asked.append(url)
        raise OSError("the test has no network")

    # the hub library read HF_HUB_OFFLINE when first imported: only the engine's own checks count here
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub.file_download, "get_hf_file_metadata", no_network)
    monkeypatch.setenv("SLM_DVFS_CACHE_DIR", str(tmp_path))
    _, info = load_model("bert-tiny", "sst2", allow_download=False)
    tokenization.load_tokenizer("bert-tiny", info, ["a short sentence", "another one"], task="sst2")
    assert info.weights == "random"
    assert asked == []


# --------------------------------------------------------------------------- tokenizers


def _info(tmp_path, config, task="sst2"):
    path = _write_config(tmp_path / f"m-{config['model_type']}", config)
    _, info = load_model(str(path), task)
    return str(path), info


def test_trained_bert_tokenizer_round_trips_and_is_cached(tmp_path, monkeypatch):
    text = load_glue_text("mrpc", train_samples=150, eval_samples=10)
    spec, info = _info(tmp_path, dict(TINY_BERT, vocab_size=30522), "mrpc")
    calls = []
    real_train = tokenization.train_tokenizer
    monkeypatch.setattr(tokenization, "train_tokenizer",
                        lambda *a, **k: calls.append(a) or real_train(*a, **k))
    tok = tokenization.load_tokenizer(spec, info, text.train_texts(), task=text.task)
    assert len(calls) == 1
    assert tok.pad_token == "[PAD]" and tok.pad_token_id == info.config["pad_token_id"] == 0
    assert (tok.cls_token, tok.sep_token, tok.mask_token) == ("[CLS]", "[SEP]", "[MASK]")
    assert "token_type_ids" in tok.model_input_names
    assert len(tok) <= info.vocab_size
    sentence = text.train[3].texts[0]
    ids = tok(sentence)["input_ids"]
    assert tok.unk_token_id not in ids
    assert tok.decode(ids, skip_special_tokens=True).replace(" ", "") == sentence.replace(" ", "")
    cached = list((tmp_path / "cache" / "tokenizers").iterdir())
    assert len(cached) == 1 and cached[0].name.startswith("bert-mrpc-")
    # Second call: read from the cache, not trained again, and identical.
    again = tokenization.load_tokenizer(spec, info, text.train_texts(), task="MRPC")
    assert len(calls) == 1
    assert again(sentence)["input_ids"] == ids
    # Other text: another tokenizer.
    other = load_glue_text("sst2", train_samples=50).train_texts()
    tokenization.load_tokenizer(spec, info, other, task="sst2")
    assert len(calls) == 2


def test_trained_pythia_tokenizer_is_byte_level_bpe_with_padding_token(tmp_path):
    text = load_glue_text("qnli", train_samples=120, eval_samples=10)
    spec, info = _info(tmp_path, dict(TINY_PYTHIA, vocab_size=50304), "qnli")
    tok = tokenization.load_tokenizer(spec, info, text.train_texts(), task="qnli")
    assert tok.pad_token == "<|padding|>" and tok.pad_token_id == models.PYTHIA_PAD_TOKEN_ID
    assert tok.eos_token == "<|endoftext|>" and tok.eos_token_id == 0
    assert tok.model_input_names == ["input_ids", "attention_mask"]
    unseen = "Zebra déjà-vu 42!"  # byte-level: even unseen characters round-trip exactly
    assert tok.decode(tok(unseen)["input_ids"]) == unseen
    assert len(tok) <= info.vocab_size


def test_tokenizer_and_model_work_together(tmp_path):
    text = load_glue_text("rte", train_samples=16, eval_samples=8)
    spec, info = _info(tmp_path, dict(TINY_PYTHIA, vocab_size=4096), "rte")
    model, _ = load_model(spec, "rte")
    tok = tokenization.load_tokenizer(spec, info, text.train_texts(), task="rte")
    enc = encode(text, tok, 48)
    batch = enc.collate([enc.train[i] for i in range(8)])
    out = model(**batch)
    out.loss.backward()
    assert out.logits.shape == (8, 2) and torch.isfinite(out.loss)


def test_tokenizer_shipped_in_a_checkpoint_folder_is_used_not_retrained(tmp_path, monkeypatch):
    texts = load_glue_text("cola", train_samples=60).train_texts()
    folder = tmp_path / "ckpt"
    _write_config(folder, dict(TINY_BERT, vocab_size=30522))
    tokenization.train_tokenizer("bert", texts, 30522, 128).save_pretrained(folder)
    _, info = load_model(str(folder), "cola")

    def no_training(*_a, **_k):
        raise AssertionError("trained although the folder has a tokenizer")

    monkeypatch.setattr(tokenization, "train_tokenizer", no_training)
    tok = tokenization.load_tokenizer(str(folder), info, texts, task="cola")
    assert tok.pad_token_id == 0 and tok(texts[0])["input_ids"][0] == tok.cls_token_id


def test_tokenizer_larger_than_the_model_vocab_is_refused(tmp_path):
    spec, info = _info(tmp_path, dict(TINY_PYTHIA, vocab_size=128))  # < 256 byte symbols
    with pytest.raises(ConfigError, match="embeds only 128"):
        tokenization.load_tokenizer(spec, info, ["some text"] * 5, task="sst2")


def test_no_text_and_no_tokenizer_is_a_clear_error(tmp_path):
    spec, info = _info(tmp_path, TINY_BERT)
    with pytest.raises(ConfigError, match="no text to train one on"):
        tokenization.load_tokenizer(spec, info, [], task=get_task("sst2"))


# -- issue 10: impossible configurations and steps that cannot fit, refused before allocating


@pytest.mark.parametrize("change, message", [
    ({"hidden_size": -128}, "hidden_size -128 is out of range"),
    ({"num_hidden_layers": 0}, "num_hidden_layers 0 is out of range"),
    ({"num_attention_heads": 3}, "3 attention heads do not divide the hidden size 128"),
    ({"vocab_size": 10**12}, "vocab_size 1000000000000 is out of range"),
    ({"hidden_size": "128"}, "hidden_size must be a whole number"),
    ({"intermediate_size": True}, "intermediate_size must be a whole number"),
])
def test_impossible_configs_are_config_errors(tmp_path, change, message) -> None:
    import json

    from engine.workload.models import resolve_model
    from engine.workload.zoo import get_entry

    cfg = {**get_entry("bert-tiny").config, **change}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(ConfigError, match=message) as err:
        resolve_model(str(path))
    assert err.value.remedy


def test_memory_estimate_matches_the_zoo_and_refuses_what_cannot_fit() -> None:
    from engine.workload.sizing import GIB, check_memory, estimate_memory, estimate_params
    from engine.workload.zoo import load_zoo

    for entry in load_zoo().values():  # every family: the analytic count is within 0.1% of the zoo's
        assert estimate_params(entry.config) == pytest.approx(entry.params, rel=1e-3), entry.name
        est = estimate_memory(entry.config, entry.batch_size, entry.seq_len, entry.precision)
        check_memory(est, entry.name, entry.batch_size, entry.seq_len)  # every zoo default fits
    tiny = load_zoo()["bert-tiny"].config
    huge = estimate_memory(tiny, 10_000_000, 128)
    with pytest.raises(ConfigError) as err:
        check_memory(huge, "bert-tiny", 10_000_000, 128)
    assert "needs an estimated" in err.value.what and "GiB" in err.value.what and "58.4 GiB" in err.value.what
    fits = int(err.value.remedy.split("--batch-size ")[1].split()[0])
    check_memory(estimate_memory(tiny, fits, 128), "bert-tiny", fits, 128)  # the suggestion does fit
    with pytest.raises(ConfigError):
        check_memory(estimate_memory(tiny, fits + 1, 128), "bert-tiny", fits + 1, 128)
    big = {**tiny, "hidden_size": 65_536, "num_hidden_layers": 200, "num_attention_heads": 64,
           "intermediate_size": 262_144}
    with pytest.raises(ConfigError, match="needs an estimated") as err:
        check_memory(estimate_memory(big, 1, 8), "big", 1, 8, memory_bytes=64 * GIB)
    assert "smaller model" in err.value.remedy


def test_simulate_with_a_huge_batch_is_refused_with_the_estimate(capsys, tmp_path) -> None:
    from engine.cli import main

    argv = ["run", "--model", "bert-tiny", "--task", "sst2", "--twin", "agx-orin-64gb", "--simulate",
            "--batch-size", "10000000", "--steps", "2", "--db", str(tmp_path / "r.sqlite")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "needs an estimated" in err and "--batch-size" in err and "Traceback" not in err
