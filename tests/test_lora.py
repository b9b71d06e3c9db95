"""Training modes beyond full fine-tuning: the task head alone, LoRA through peft, and gradient
checkpointing; what the trainer, the tracer, the twin, the store and the CLI make of them."""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from conftest import migrate

from engine.core.errors import ConfigError
from engine.workload import zoo
from engine.workload.finetune import FinetuneSpec, run_finetune
from engine.workload.lora import DEFAULT_TARGETS, LoraSettings, is_peft_model, linear_module_names, wrap_lora
from engine.workload.models import build_model
from engine.workload.training.optim import apply_mode, is_checkpointing, model_params, prepare_model
from engine.workload.trace.tracer import capture_step_trace, model_fingerprint
from engine.workload.spec import WorkloadSpec
from test_families import TINY_CONFIGS

ADAPTER_FILES = {"adapter_config.json", "adapter_model.safetensors"}


# one cache (trained tokenizers, traces) for the module, one thread, never the network (conftest)
pytestmark = pytest.mark.usefixtures("offline_module")


def _tiny(name: str, device: str | None = "meta") -> torch.nn.Module:
    return build_model(TINY_CONFIGS[name], "sst2", device=device)


def _config_file(tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(TINY_CONFIGS[name]))
    return path


def _flops(trace: Any, optimizer: bool) -> float:
    return sum(op.flops for op in trace.ops if (op.kind == "optimizer") == optimizer)


def _optimizer_bytes(trace: Any) -> float:
    return sum(op.bytes for op in trace.ops if op.kind == "optimizer")


# --------------------------------------------------------------------------- what trains
def test_head_mode_trains_the_head_alone() -> None:
    model = _tiny("bert")
    trainable = apply_mode(model, "head")
    assert trainable == 32 * 2 + 2  # the classifier's weight and bias
    assert {n for n, p in model.named_parameters() if p.requires_grad} == {"classifier.weight", "classifier.bias"}
    deberta = _tiny("deberta")  # its context pooler belongs to the head, beside the classifier
    apply_mode(deberta, "head")
    assert {n.split(".")[0] for n, p in deberta.named_parameters() if p.requires_grad} == {"pooler", "classifier"}


def test_head_mode_without_a_head_is_refused_with_a_remedy() -> None:
    with pytest.raises(ConfigError) as err:
        apply_mode(torch.nn.Sequential(torch.nn.Linear(4, 4)), "head")
    assert "no task head" in err.value.what and "lora" in err.value.remedy


def test_full_and_bitfit_are_unchanged() -> None:
    model = _tiny("bert")
    total = sum(p.numel() for p in model.parameters())
    assert apply_mode(model, "full") == total
    bitfit = apply_mode(model, "bitfit")
    assert bitfit == sum(p.numel() for n, p in model.named_parameters()
                         if n.startswith("classifier") or n.endswith("bias"))


def test_lora_trains_the_adapters_and_the_head() -> None:
    base = _tiny("bert")
    total = sum(p.numel() for p in base.parameters())
    model, trainable = prepare_model(base, "lora", lora=LoraSettings(rank=4))
    assert is_peft_model(model) and model_params(model) == total
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    lora = [n for n in names if "lora_" in n]
    # query and value of each of 2 layers, A (4 x 32) and B (32 x 4) each
    assert len(lora) == 2 * 2 * 2 and sum(p.numel() for n, p in model.named_parameters() if n in lora) == 8 * 128
    assert trainable == 8 * 128 + 66  # and the classifier, whole
    assert all("lora_" in n or ".classifier." in n for n in names)
    assert apply_mode(model, "lora") == trainable  # on the wrapped model: what peft trains
    with pytest.raises(ConfigError, match="wrapped with LoRA"):
        apply_mode(_tiny("bert"), "lora")


@pytest.mark.parametrize("name", sorted(TINY_CONFIGS))
def test_every_family_has_default_targets_peft_finds(name: str) -> None:
    family = zoo.MODEL_TYPE_FAMILY[TINY_CONFIGS[name]["model_type"]]
    base = _tiny(name)
    assert set(DEFAULT_TARGETS[family]) <= set(linear_module_names(base))
    model, trainable = prepare_model(base, "lora")
    adapted = {n.rsplit(".lora_A", 1)[0].rsplit(".", 1)[-1] for n, _ in model.named_parameters() if ".lora_A." in n}
    assert adapted == set(DEFAULT_TARGETS[family])
    head = {n for n, p in model.named_parameters() if p.requires_grad and "lora_" not in n}
    assert head and all(".modules_to_save." in n for n in head)  # the head trains (peft's copy of it)
    assert 0 < trainable < model_params(model) / 5


def test_unknown_targets_are_refused_with_the_modules_there_are() -> None:
    with pytest.raises(ConfigError) as err:
        prepare_model(_tiny("llama"), "lora", lora=LoraSettings(targets=("query",)))
    assert "query" in err.value.what and "q_proj" in err.value.remedy and "gate_proj" in err.value.remedy


def test_lora_without_peft_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "peft", None)  # `import peft` fails as a missing module does
    with pytest.raises(ConfigError) as err:
        wrap_lora(_tiny("bert"), LoraSettings())
    assert "peft" in err.value.what and "pip install -e '.[lora]'" in err.value.remedy


def test_lora_options_belong_to_mode_lora() -> None:
    with pytest.raises(ConfigError, match="LoRA settings"):
        FinetuneSpec(WorkloadSpec("bert-tiny", "sst2", mode="full", lora=LoraSettings(rank=4))).validate()


# --------------------------------------------------------------------------- the step trace
@pytest.mark.parametrize("name", ["bert", "llama"])
def test_frozen_weights_have_no_gradients_or_optimizer_work_in_the_trace(name: str) -> None:
    traces = {}
    for mode in ("full", "lora", "head"):
        model, trainable = prepare_model(_tiny(name), mode, lora=LoraSettings(rank=4))
        traces[mode] = capture_step_trace(model, name=name, batch_size=4, seq_len=32)
        assert traces[mode].method == "meta" and traces[mode].trace.params == trainable
    full, lora, head = (traces[m].trace for m in ("full", "lora", "head"))
    # The optimizer (AdamW, clipping) runs over the trainable parameters alone.
    assert _flops(lora, True) < _flops(full, True) / 10 and _flops(head, True) < _flops(lora, True)
    assert _optimizer_bytes(lora) < _optimizer_bytes(full) / 10
    # Backward computes no weight gradients of frozen layers; the head-only step does no backward
    # through the backbone at all (about one forward, a third of a full step).
    assert _flops(head, False) < _flops(lora, False) < _flops(full, False)
    assert _flops(head, False) == pytest.approx(_flops(full, False) / 3, rel=0.15)


def test_gradient_checkpointing_adds_about_one_forward() -> None:
    plain = capture_step_trace(_tiny("llama"), name="llama", batch_size=4, seq_len=32).trace
    forward = capture_step_trace(prepare_model(_tiny("llama"), "head")[0], name="llama", batch_size=4,
                                 seq_len=32).trace  # a frozen backbone: the forward alone, nearly
    model, _ = prepare_model(_tiny("llama"), "full", checkpointing=True)
    assert is_checkpointing(model)
    record = capture_step_trace(model, name="llama", batch_size=4, seq_len=32)
    assert record.method == "meta", record.notes
    added = _flops(record.trace, False) - _flops(plain, False)
    # the layers' forward again (embeddings and head are not recomputed)
    assert 0.6 * _flops(forward, False) < added < 1.05 * _flops(forward, False)
    assert _flops(record.trace, True) == _flops(plain, True)  # the optimizer does not change
    assert model_fingerprint(model) != model_fingerprint(_tiny("llama"))  # cached apart


def test_a_model_without_checkpointing_support_is_refused() -> None:
    with pytest.raises(ConfigError) as err:
        prepare_model(torch.nn.Sequential(torch.nn.Linear(2, 2)), "full", checkpointing=True)
    assert "gradient checkpointing" in err.value.what and "--grad-checkpointing" in err.value.remedy


def test_the_trace_cache_keys_lora_settings_and_checkpointing(tmp_path: Path) -> None:
    from engine.workload.resolve import resolve_workload

    config = str(_config_file(tmp_path, "bert"))
    shape = dict(batch_size=4, seq_len=32, padding="max_length")
    full = resolve_workload(WorkloadSpec(config, "sst2", **shape))
    r4 = resolve_workload(WorkloadSpec(config, "sst2", mode="lora", lora=LoraSettings(rank=4), **shape))
    r16 = resolve_workload(WorkloadSpec(config, "sst2", mode="lora", lora=LoraSettings(rank=16), **shape))
    ckpt = resolve_workload(WorkloadSpec(config, "sst2", mode="lora", lora=LoraSettings(rank=4), grad_checkpointing=True, **shape))
    assert r4.trace.params < r16.trace.params < full.trace.params
    assert r4.trace.flops < ckpt.trace.flops
    assert len({w.key for w in (full, r4, r16, ckpt)}) == 4
    assert full.key.endswith("|full") and r4.key.endswith("|lora|lora-r4-a16-d0.05")
    assert ckpt.key.endswith("+ckpt") and r4.total_params == full.total_params
    again = resolve_workload(WorkloadSpec(config, "sst2", mode="lora", lora=LoraSettings(rank=4), **shape))
    assert again.trace == r4.trace
    assert r4.to_json()["lora"] == {"rank": 4, "alpha": 16.0, "dropout": 0.05, "targets": ["query", "value"]}


# --------------------------------------------------------------------------- training and adapters
@pytest.mark.filterwarnings("ignore:.*is_gradient_checkpointing:FutureWarning")  # peft's, loading
@pytest.mark.parametrize("name", ["bert", "llama"])
def test_lora_trains_on_the_cpu_and_saves_an_adapter_peft_loads(name: str, tmp_path: Path) -> None:
    from peft import PeftModel

    out = tmp_path / "adapter"
    result = run_finetune(FinetuneSpec(WorkloadSpec(str(_config_file(tmp_path, name)), "sst2", batch_size=4, seq_len=16, mode="lora", lora=LoraSettings(rank=4)),
                                       steps=2, train_samples=16, eval_samples=8, output_dir=str(out),
                                       learning_rate=1e-2))
    assert result.steps == 2 and all(torch.isfinite(torch.tensor(loss)) for loss in result.losses)
    assert 0 < result.trainable_params < result.params / 10 and result.saved_to == str(out)
    assert ADAPTER_FILES <= {p.name for p in out.iterdir()}
    config = json.loads((out / "adapter_config.json").read_text())
    assert config["r"] == 4 and config["peft_type"] == "LORA" and config["task_type"] == "SEQ_CLS"

    loaded = PeftModel.from_pretrained(build_model(TINY_CONFIGS[name], "sst2", seed=0), str(out))
    trained = {n: p for n, p in loaded.named_parameters() if "lora_B" in n}
    assert trained and any(p.abs().sum() > 0 for p in trained.values())  # B starts at zero: it learnt
    from safetensors.torch import load_file

    saved = load_file(str(out / "adapter_model.safetensors"))
    assert any("classifier" in k or "score" in k for k in saved)  # the head travels with the adapter


def test_lora_resumes_bit_for_bit_with_the_adapter_in_each_checkpoint(tmp_path: Path) -> None:
    from engine.workload.training.trainer import TrainConfig, Trainer

    torch.manual_seed(3)
    ids = torch.randint(5, 500, (32, 12))
    data = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": torch.randint(0, 2, (32,))}

    def trainer(steps_dir: str) -> Trainer:
        cfg = TrainConfig(steps=6, batch_size=8, learning_rate=1e-2, seed=0, device="cpu", mode="lora",
                          lora=LoraSettings(rank=4), checkpoint_every=3, checkpoint_dir=str(tmp_path / steps_dir))
        return Trainer(_tiny("bert", device=None), data, cfg, run_name=("tiny-bert", "toy"))

    whole = trainer("a")
    uninterrupted = whole.run()
    assert ADAPTER_FILES <= {p.name for p in (tmp_path / "a" / "step-0000003" / "adapter").iterdir()}
    resumed_trainer = trainer("b")
    resumed = resumed_trainer.run(resume_from=tmp_path / "a" / "step-0000003")
    assert resumed.start_step == 3 and resumed.losses == uninterrupted.losses  # bitwise
    for (name, p), q in zip(whole.model.state_dict().items(), resumed_trainer.model.state_dict().values()):
        assert torch.equal(p, q), name
    # the optimizer holds state for the trainable parameters only
    state = whole.optimizer.state_dict()["state"]
    assert sum(s["exp_avg"].numel() for s in state.values()) == whole.trainable_params


# --------------------------------------------------------------------------- store and CLI
def test_the_store_keeps_lora_settings_and_checkpointing(tmp_path: Path) -> None:
    from engine.results.records import WorkloadRecord
    from engine.results.store import Store

    lora = WorkloadRecord("m", "sst2", 4, 32, "fp32", mode="lora", lora=LoraSettings(rank=4, targets=("q",)),
                          grad_checkpointing=True)
    plain = WorkloadRecord("m", "sst2", 4, 32, "fp32")
    assert plain.key == "m|sst2|4|32|fp32|full"  # keys stored before v6 stay as they were
    with Store(tmp_path / "r.sqlite") as store:
        wid = store.ensure_workload(lora)
        assert store.ensure_workload(plain) != wid
        back = store.get_workload(wid)
        run = store.get_run(store.start_run(policy="maxn", source="twin", workload=wid))
    assert back.lora == LoraSettings(rank=4, targets=("q",)) and back.grad_checkpointing and back.key == lora.key
    assert run.workload is not None and run.workload.lora == back.lora and run.workload.grad_checkpointing
    assert WorkloadRecord("m", "sst2", 4, 32, "fp32", mode="lora").lora == LoraSettings()
    with pytest.raises(ConfigError):
        WorkloadRecord("m", "sst2", 4, 32, "fp32", mode="full", lora=LoraSettings())


def test_a_version_5_store_gains_the_columns_with_plain_defaults(tmp_path: Path) -> None:
    from engine.results.store import Store

    db = tmp_path / "v5.sqlite"
    conn = sqlite3.connect(db)
    migrate(conn, 5)
    conn.execute("INSERT INTO workloads (key, model, task, batch_size, seq_len, precision, mode, source, created_at) "
                 "VALUES ('m|sst2|4|32|fp32|bitfit', 'm', 'sst2', 4, 32, 'fp32', 'bitfit', 'predicted', '2025')")
    conn.execute("PRAGMA user_version = 5")
    conn.commit()
    conn.close()
    with Store(db) as store:
        found = store.find_workload("m|sst2|4|32|fp32|bitfit")
    assert found is not None and found[1].lora is None and not found[1].grad_checkpointing


def test_cli_simulated_lora_run_on_the_twin(tmp_path: Path, isolated_env: Any,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    from engine.cli import main

    config = str(_config_file(tmp_path, "llama"))
    common = ["run", "--model", config, "--task", "sst2", "--twin", "--simulate", "--steps", "3",
              "--batch-size", "4", "--max-seq-len", "32", "--json"]
    energy = {}
    for mode in (["--mode", "full"], ["--mode", "lora", "--lora-rank", "4", "--lora-targets", "q_proj,k_proj"],
                 ["--mode", "lora", "--lora-rank", "4", "--lora-targets", "q_proj,k_proj", "--grad-checkpointing"]):
        assert main(common + mode) == 0, capsys.readouterr().err
        out = json.loads(capsys.readouterr().out)
        energy[" ".join(mode)] = out["run"]["energy_j"]
        workload = out["workload"]
    assert workload["mode"] == "lora" and workload["grad_checkpointing"]
    assert workload["lora"] == {"rank": 4, "alpha": 16.0, "dropout": 0.05, "targets": ["q_proj", "k_proj"]}
    assert main(["show", str(out["run"]["run_id"])]) == 0
    assert "fp32  lora r4 a16 (q_proj,k_proj), checkpointed" in capsys.readouterr().out
    full, lora, ckpt = energy.values()
    assert lora < full and lora < ckpt  # the twin costs what the trace says: less backward, or a recompute
    assert main(["run", "--model", config, "--task", "sst2", "--twin", "--simulate", "--lora-rank", "4"]) == 2
    assert "--mode lora" in capsys.readouterr().err


def test_cli_finetune_lora_on_the_cpu_saves_the_adapter(tmp_path: Path, isolated_env: Any,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    from engine.cli import main

    out = tmp_path / "out"
    code = main(["finetune", "--model", str(_config_file(tmp_path, "bert")), "--task", "sst2", "--steps", "2",
                 "--batch-size", "4", "--max-seq-len", "16", "--train-samples", "16", "--eval-samples", "8",
                 "--mode", "lora", "--lora-rank", "2", "--lora-alpha", "4", "--lora-dropout", "0",
                 "--output-dir", str(out)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert f"LoRA adapter (peft: PeftModel.from_pretrained(base_model, DIR)) saved in {out}" in captured.out
    assert "(lora r2 a4 (query,value)," in captured.out
    assert ADAPTER_FILES <= {p.name for p in out.iterdir()}
    assert json.loads((out / "adapter_config.json").read_text())["lora_alpha"] == 4


def test_cli_run_lora_trains_on_the_cpu_under_the_twin_and_saves_the_adapter(
        tmp_path: Path, isolated_env: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """`run --mode lora` without --simulate: real CPU steps, measured on the twin's rails, and
    the policy run's adapter saved in peft's format."""
    from engine.cli import main

    out = tmp_path / "adapter"
    code = main(["run", "--model", str(_config_file(tmp_path, "llama")), "--task", "sst2", "--twin", "--steps", "2",
                 "--batch-size", "4", "--max-seq-len", "16", "--train-samples", "16", "--mode", "lora",
                 "--lora-rank", "2", "--output-dir", str(out), "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    result = json.loads(captured.out)
    assert result["workload"]["mode"] == "lora" and result["run"]["energy_j"] > 0
    assert ADAPTER_FILES <= {p.name for p in out.iterdir()}
    assert json.loads((out / "adapter_config.json").read_text())["r"] == 2
