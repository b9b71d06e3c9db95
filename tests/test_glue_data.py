"""GLUE text from the three sources, the original file layout, and encoding."""

from __future__ import annotations

import csv
import math

import pytest
import torch
from torch.utils.data import DataLoader

from engine.core.errors import ConfigError
from engine.workload.data import text as data
from engine.workload.data.text import encode, load_glue_text
from engine.workload.glue import TASKS, Example, get_task
from engine.workload.data.glue_folder import generate_glue_folder
from engine.workload.data.tokenization import train_tokenizer

TRAIN, DEV = 24, 12


@pytest.fixture(scope="module")
def glue_dir(tmp_path_factory):
    return generate_glue_folder(tmp_path_factory.mktemp("glue"), train_size=TRAIN, dev_size=DEV,
                                seed=5)


def _check_examples(task, examples):
    assert examples
    for ex in examples:
        assert isinstance(ex, Example)
        assert len(ex.texts) == len(task.text_fields)
        assert all(isinstance(t, str) and t.strip() and "\t" not in t for t in ex.texts)
        if task.is_regression:
            assert isinstance(ex.label, float) and 0.0 <= ex.label <= 5.0
        else:
            assert isinstance(ex.label, int) and 0 <= ex.label < task.num_labels


@pytest.mark.parametrize("name", list(TASKS))
def test_every_task_loads_from_a_glue_folder(glue_dir, name):
    task = TASKS[name]
    text = load_glue_text(name, glue_dir)
    assert text.task is task
    assert text.source == f"dir:{(glue_dir / task.display).resolve()}"
    assert text.synthetic  # the generated folder says so, and loading keeps the label
    assert len(text.train) == TRAIN
    assert tuple(text.eval) == task.eval_splits
    assert all(len(split) == DEV for split in text.eval.values())
    _check_examples(task, text.train)
    for split in text.eval.values():
        _check_examples(task, split)
    # The folder holds exactly what synthetic generation gives for the same sizes and seed.
    same = load_glue_text(name, "synthetic", train_samples=TRAIN, eval_samples=DEV, seed=5)
    assert same.train == text.train and dict(same.eval) == dict(text.eval)


@pytest.mark.parametrize("name", list(TASKS))
def test_every_task_has_synthetic_data_with_all_labels(name):
    task = TASKS[name]
    text = load_glue_text(task, train_samples=200, eval_samples=60, seed=1)
    assert text.synthetic and text.source == "synthetic"
    assert len(text.train) == 200 and tuple(text.eval) == task.eval_splits
    _check_examples(task, text.train)
    if not task.is_regression:
        assert {ex.label for ex in text.train} == set(range(task.num_labels))
    again = load_glue_text(task, train_samples=200, eval_samples=60, seed=1)
    other = load_glue_text(task, train_samples=200, eval_samples=60, seed=2)
    assert again.train == text.train and other.train != text.train
    assert text.train[:60] != text.eval[task.eval_splits[0]]  # eval is not a copy of train


def test_synthetic_default_sizes_follow_the_real_splits():
    wnli = load_glue_text("wnli")
    assert len(wnli.train) == 635 and len(wnli.eval["validation"]) == 71
    sst2 = load_glue_text("sst2")
    assert len(sst2.train) == data.SYNTHETIC_TRAIN_MAX
    assert len(sst2.eval["validation"]) == data.SYNTHETIC_EVAL_MAX


def test_mnli_mismatched_eval_uses_other_genres():
    text = load_glue_text("mnli", train_samples=300, eval_samples=100)
    words = lambda exs: {w for ex in exs for w in ex.texts[0].split()}  # noqa: E731
    train, matched = words(text.train), words(text.eval["validation_matched"])
    mismatched = words(text.eval["validation_mismatched"])
    assert len(mismatched - train) > len(matched - train)


def test_files_have_the_original_glue_columns(glue_dir):
    def rows(path):
        with open(path, encoding="utf-8", newline="") as f:
            return list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))

    cola = rows(glue_dir / "CoLA" / "train.tsv")  # no header, 4 columns
    assert len(cola) == TRAIN and all(len(r) == 4 for r in cola)
    assert all(r[1] in "01" and r[2] == ("" if r[1] == "1" else "*") for r in cola)
    assert rows(glue_dir / "SST-2" / "dev.tsv")[0] == ["sentence", "label"]
    assert rows(glue_dir / "MRPC" / "train.tsv")[0] == [
        "Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"]
    assert rows(glue_dir / "QQP" / "train.tsv")[0] == [
        "id", "qid1", "qid2", "question1", "question2", "is_duplicate"]
    stsb = rows(glue_dir / "STS-B" / "train.tsv")
    assert len(stsb[0]) == 10 and stsb[0][-3:] == ["sentence1", "sentence2", "score"]
    mnli_train = rows(glue_dir / "MNLI" / "train.tsv")
    assert len(mnli_train[0]) == 12 and mnli_train[0][8:10] == ["sentence1", "sentence2"]
    assert mnli_train[0][-1] == "gold_label"
    assert mnli_train[1][-1] in ("entailment", "neutral", "contradiction")
    for dev in ("dev_matched.tsv", "dev_mismatched.tsv"):
        header = rows(glue_dir / "MNLI" / dev)[0]
        assert header[-1] == "gold_label" and header[8:10] == ["sentence1", "sentence2"]
    assert rows(glue_dir / "QNLI" / "dev.tsv")[0] == ["index", "question", "sentence", "label"]
    assert rows(glue_dir / "RTE" / "train.tsv")[1][-1] in ("entailment", "not_entailment")
    assert rows(glue_dir / "WNLI" / "train.tsv")[0] == ["index", "sentence1", "sentence2",
                                                        "label"]


def test_reads_quotes_literally_and_skips_broken_rows(tmp_path):
    folder = tmp_path / "QQP"
    folder.mkdir()
    header = "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n"
    (folder / "train.tsv").write_text(
        header + '0\t1\t2\tis "this" ok?\tis it "ok"?\t1\n'
        "1\t3\t4\ta broken line with too few columns\n"
        "2\t5\t6\twhy?\thow?\t0\n", encoding="utf-8")
    (folder / "dev.tsv").write_text(header + "0\t1\t2\ta?\tb?\t1\n", encoding="utf-8")
    text = load_glue_text("qqp", tmp_path)  # root that holds QQP/
    assert text.train == (Example(('is "this" ok?', 'is it "ok"?'), 1),
                          Example(("why?", "how?"), 0))
    assert not text.synthetic
    direct = load_glue_text("qqp", folder)  # or the task folder itself
    assert direct.train == text.train


def test_subsetting_is_seeded_and_keeps_file_order(glue_dir):
    a = load_glue_text("sst2", glue_dir, train_samples=10, eval_samples=5, seed=3)
    b = load_glue_text("sst2", glue_dir, train_samples=10, eval_samples=5, seed=3)
    c = load_glue_text("sst2", glue_dir, train_samples=10, eval_samples=5, seed=4)
    full = load_glue_text("sst2", glue_dir)
    assert len(a.train) == 10 and len(a.eval["validation"]) == 5
    assert a.train == b.train and a.train != c.train
    positions = [full.train.index(ex) for ex in a.train]
    assert positions == sorted(positions)
    assert len(load_glue_text("sst2", glue_dir, train_samples=10_000).train) == TRAIN
    with pytest.raises(ConfigError, match="train_samples must be positive"):
        load_glue_text("sst2", glue_dir, train_samples=0)


def test_missing_folder_files_and_bad_headers_are_clear_errors(tmp_path, glue_dir):
    with pytest.raises(ConfigError, match="does not exist") as err:
        load_glue_text("sst2", tmp_path / "nowhere")
    assert "--data synthetic" in err.value.remedy
    assert "slm-dvfs data" not in err.value.remedy and "source=" not in err.value.remedy  # no such command / flag
    with pytest.raises(ConfigError, match="no RTE/train.tsv"):
        load_glue_text("rte", tmp_path)
    broken = tmp_path / "broken"
    (broken / "MNLI").mkdir(parents=True)
    (broken / "MNLI" / "train.tsv").write_text(
        (glue_dir / "MNLI" / "train.tsv").read_text(encoding="utf-8"), encoding="utf-8")
    with pytest.raises(ConfigError, match="dev_matched.tsv is missing"):
        load_glue_text("mnli", broken)
    (broken / "SST-2").mkdir()
    (broken / "SST-2" / "train.tsv").write_text("text\tlabel\nfine\t1\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="expected a header starting 'sentence'"):
        load_glue_text("sst2", broken)
    with pytest.raises(ConfigError, match="unknown GLUE task"):
        load_glue_text("squad")


def test_hub_source_respects_offline(monkeypatch):
    import datasets

    seen = {}

    def fake_load_dataset(repo, name):
        seen[repo] = datasets.config.HF_HUB_OFFLINE
        raise ConnectionError("Couldn't reach the Hugging Face Hub")

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)
    with pytest.raises(ConfigError, match="not available from the hub") as err:
        load_glue_text("rte", "hub")
    assert seen == {"nyu-mll/glue": True, "glue": True}  # cache only, without permission
    assert "allow a download" in str(err.value)
    assert datasets.config.HF_HUB_OFFLINE is False  # restored afterwards
    seen.clear()
    with pytest.raises(ConfigError):
        load_glue_text("rte", "hub", allow_download=True)
    assert seen == {"nyu-mll/glue": False, "glue": False}
    seen.clear()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the environment wins over the caller
    with pytest.raises(ConfigError):
        load_glue_text("rte", "hub", allow_download=True)
    assert seen == {"nyu-mll/glue": True, "glue": True}


def test_hub_rows_become_examples(monkeypatch):
    import datasets

    def fake_load_dataset(repo, name):
        assert (repo, name) == ("nyu-mll/glue", "mnli")
        split = lambda n, lab: datasets.Dataset.from_dict({  # noqa: E731
            "premise": [f"p{i}" for i in range(n)], "hypothesis": [f"h{i}" for i in range(n)],
            "label": lab, "idx": list(range(n))})
        return datasets.DatasetDict({
            "train": split(4, [0, 1, 2, 1]),
            "validation_matched": split(2, [2, 0]),
            "validation_mismatched": split(2, [1, 1]),
            "test_matched": split(2, [-1, -1]),
        })

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    text = load_glue_text("MNLI", "hub", train_samples=3, seed=0)
    assert text.source == "hub:nyu-mll/glue" and not text.synthetic
    assert len(text.train) == 3
    assert text.eval["validation_matched"] == (Example(("p0", "h0"), 2), Example(("p1", "h1"), 0))
    assert text.eval["validation_mismatched"][1] == Example(("p1", "h1"), 1)


@pytest.fixture(scope="module")
def bert_tokenizer():
    texts = load_glue_text("mrpc", train_samples=200).train_texts()
    return train_tokenizer("bert", texts, 30522, 512)


@pytest.fixture(scope="module")
def pythia_tokenizer():
    texts = load_glue_text("stsb", train_samples=200).train_texts()
    return train_tokenizer("pythia", texts, 50304, 2048)


def test_encode_fixed_length_bert_pairs(bert_tokenizer):
    text = load_glue_text("mrpc", train_samples=40, eval_samples=10)
    enc = encode(text, bert_tokenizer, 32)
    assert enc.task is text.task and enc.synthetic and enc.padding == "max_length"
    assert len(enc.train) == 40 and len(enc.eval["validation"]) == 10
    item = enc.train[0]
    assert set(item) == {"input_ids", "attention_mask", "token_type_ids", "labels"}
    assert item["input_ids"].shape == (32,) and item["labels"].dtype == torch.long
    assert item["labels"].item() == text.train[0].label
    # [CLS] a [SEP] b [SEP]: the second text is segment 1
    assert item["input_ids"][0].item() == bert_tokenizer.cls_token_id
    assert item["token_type_ids"].max().item() == 1
    decoded = bert_tokenizer.decode(item["input_ids"], skip_special_tokens=True)
    assert decoded.replace(" ", "") == "".join(text.train[0].texts).replace(" ", "")
    batch = next(iter(DataLoader(enc.train, batch_size=8, collate_fn=enc.collate)))
    assert batch["input_ids"].shape == (8, 32) and batch["labels"].shape == (8,)


def test_encode_dynamic_padding_pads_per_batch(pythia_tokenizer):
    text = load_glue_text("stsb", train_samples=30, eval_samples=10)
    enc = encode(text, pythia_tokenizer, 64, padding="dynamic")
    lengths = [len(enc.train[i]["input_ids"]) for i in range(8)]
    assert len(set(lengths)) > 1 and max(lengths) < 64
    assert "token_type_ids" not in enc.train[0]
    batch = enc.collate([enc.train[i] for i in range(8)])
    assert batch["input_ids"].shape == (8, max(lengths))
    assert batch["labels"].dtype == torch.float32
    pad = pythia_tokenizer.pad_token_id
    for row, n in enumerate(lengths):
        assert batch["attention_mask"][row].sum().item() == n
        assert (batch["input_ids"][row, n:] == pad).all()
        assert (batch["input_ids"][row, :n] != pad).all()
    # Pythia has no [SEP]: the pair is joined by end-of-text.
    assert pythia_tokenizer.eos_token_id in enc.train[0]["input_ids"].tolist()
    assert math.isclose(enc.train[0]["labels"].item(), text.train[0].label, rel_tol=1e-6)


def test_encode_truncates(bert_tokenizer):
    text = load_glue_text("cola", train_samples=5, eval_samples=5)
    enc = encode(text, bert_tokenizer, 8)
    assert enc.train[0]["input_ids"].shape == (8,)
    assert enc.train[0]["input_ids"][-1].item() == bert_tokenizer.sep_token_id


def test_synthetic_sst2_signal_is_learnable():
    """A bag-of-words model separates synthetic sentiment: the data is not noise."""
    from sklearn.feature_extraction.text import CountVectorizer
    from sklearn.linear_model import LogisticRegression

    text = load_glue_text("sst2", train_samples=600, eval_samples=200, seed=3)
    vec = CountVectorizer(ngram_range=(1, 2)).fit([e.texts[0] for e in text.train])
    clf = LogisticRegression(max_iter=1000).fit(vec.transform([e.texts[0] for e in text.train]),
                                                [e.label for e in text.train])
    dev = text.eval["validation"]
    assert clf.score(vec.transform([e.texts[0] for e in dev]), [e.label for e in dev]) > 0.9


def test_synthetic_stsb_score_follows_overlap():
    from scipy.stats import pearsonr

    dev = load_glue_text("stsb", train_samples=10, eval_samples=300).eval["validation"]
    overlap = [len(set(a.split()) & set(b.split())) / len(set(a.split()) | set(b.split()))
               for a, b in (e.texts for e in dev)]
    assert pearsonr(overlap, [e.label for e in dev])[0] > 0.8


def test_label_names_follow_the_hub_for_string_labelled_files(glue_dir):
    rte = load_glue_text(get_task("rte"), glue_dir)
    with open(glue_dir / "RTE" / "train.tsv", encoding="utf-8") as f:
        file_labels = [line.rstrip("\n").split("\t")[-1] for line in f][1:]
    assert [rte.task.label_names[ex.label] for ex in rte.train] == file_labels
