"""Fine-tuning runs end to end: zoo models on synthetic GLUE, the CLI, the twin."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from engine.cli import main
from engine.core.errors import ConfigError
from engine.workload.events import EvalResult, RunFinished, StepEnd
from engine.workload.finetune import FinetuneSpec, run_finetune
from engine.workload.spec import WorkloadSpec

SHAPE = dict(batch_size=8, seq_len=16)
TINY = dict(train_samples=32, eval_samples=16)


@pytest.fixture(autouse=True, scope="module")
def offline_cache(tmp_path_factory: pytest.TempPathFactory):
    """One cache (trained tokenizers, traces) for the module; never the network."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models: one thread is as fast, and steadier on a shared host
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SLM_DVFS_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        mp.setenv("SLM_DVFS_STATE_DIR", str(tmp_path_factory.mktemp("state")))
        mp.setenv("SLM_DVFS_TWIN_DIR", str(tmp_path_factory.mktemp("twin")))  # the persistent twin's tree
        mp.setenv("HF_HUB_OFFLINE", "1")
        yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("model", ["bert-tiny", "pythia-14m"])
def test_random_zoo_models_learn_synthetic_sst2(model: str) -> None:
    result = run_finetune(FinetuneSpec(WorkloadSpec(model, "sst2", batch_size=32, seq_len=16), steps=40,
                                       train_samples=320, eval_samples=64, learning_rate=3e-3))
    first, last = sum(result.losses[:5]) / 5, sum(result.losses[-5:]) / 5
    assert last < first - 0.1, result.losses
    assert result.weights == "random" and result.synthetic and result.data_source == "synthetic"
    assert result.steps == 40 and result.samples == 40 * 32 and result.precision == "fp32"
    assert set(result.eval["validation"]) >= {"accuracy", "loss"}
    assert result.twin_source is None and result.to_json()["twin"] is None


def test_hf_model_resumes_bit_for_bit(tmp_path: Path) -> None:
    spec = FinetuneSpec(WorkloadSpec("bert-tiny", "sst2", **SHAPE), steps=6, checkpoint_every=3,
                        checkpoint_dir=str(tmp_path / "a"), **TINY)
    full = run_finetune(spec)
    resumed = run_finetune(FinetuneSpec(WorkloadSpec("bert-tiny", "sst2", **SHAPE), steps=6,
                                        resume=str(tmp_path / "a" / "step-0000003"), **TINY))
    assert resumed.losses == full.losses
    assert resumed.eval == full.eval


def test_bitfit_on_pythia_trains_a_fraction() -> None:
    result = run_finetune(FinetuneSpec(WorkloadSpec("pythia-14m", "sst2", mode="bitfit", **SHAPE), steps=2, **TINY))
    assert result.mode == "bitfit" and 0 < result.trainable_params < result.params / 20


class FakeTwin:
    """Charges 2 ms, 0.05 J (GPU) and 0.01 J (CPU) per step; exact counters as the twin has."""

    def __init__(self) -> None:
        self.profile = SimpleNamespace(name="fake-orin", rail_names=("VDD_GPU_SOC", "VDD_CPU_CV"), thermal_guard=None)
        self.closed = False
        self.t = 0.0
        self.energy = {"VDD_GPU_SOC": 0.0, "VDD_CPU_CV": 0.0}

    def run_step(self, trace):
        assert trace.model == "bert-tiny" and trace.flops > 0
        self.t += 0.002
        self.energy = {"VDD_GPU_SOC": self.energy["VDD_GPU_SOC"] + 0.05, "VDD_CPU_CV": self.energy["VDD_CPU_CV"] + 0.01}

    def now(self) -> float:
        return self.t

    def energy_j(self) -> dict:
        return dict(self.energy)

    def rail_powers_mw(self) -> dict:
        return {"VDD_GPU_SOC": 25_000.0, "VDD_CPU_CV": 5_000.0}

    def close(self) -> None:
        self.closed = True

    def driven(self):
        """As VirtualOrin.driven: time moves with the steps only (this fake has no idle clock)."""
        return contextlib.nullcontext()


def fake_twin_session(monkeypatch: pytest.MonkeyPatch) -> list[FakeTwin]:
    """`finetune --twin` opens its twin through the run harness: give it a fake one."""
    from engine.core.provenance import Source
    from engine.device.session import DeviceSession

    twins: list[FakeTwin] = []

    def open_session(**kw):
        twins.append(FakeTwin())
        device = SimpleNamespace(identity=lambda: SimpleNamespace(source=Source.TWIN))
        return DeviceSession(device, twin=twins[-1])  # type: ignore[arg-type]

    monkeypatch.setattr("engine.run.harness.open_session", open_session)
    return twins


def _cli_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    code = main(["finetune", *argv, "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return json.loads(captured.out)


def test_cli_json_end_to_end(capsys: pytest.CaptureFixture[str]) -> None:
    out = _cli_json(capsys, "--model", "bert-tiny", "--task", "sst2", "--steps", "3", "--batch-size", "4",
                    "--max-seq-len", "16", "--train-samples", "16", "--eval-samples", "8")
    assert out["model"] == "bert-tiny" and out["steps"] == 3 and out["samples"] == 12
    assert out["weights"] == "random" and out["synthetic"] is True
    assert out["host"]["source"] == "measured" and out["host"]["wall_s"] > 0
    assert "accuracy" in out["eval"]["validation"] and out["twin"] is None


def test_cli_defaults_come_from_the_zoo(capsys: pytest.CaptureFixture[str]) -> None:
    out = _cli_json(capsys, "--model", "bert-tiny", "--task", "sst2", "--steps", "1",
                    "--train-samples", "8", "--eval-samples", "8")
    assert (out["batch_size"], out["max_seq_len"], out["precision"]) == (32, 128, "fp32")


def test_cli_with_a_fake_twin(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    twins = fake_twin_session(monkeypatch)
    out = _cli_json(capsys, "--model", "bert-tiny", "--task", "sst2", "--steps", "4", "--batch-size", "4",
                    "--max-seq-len", "16", "--train-samples", "16", "--eval-samples", "8",
                    "--twin", "agx-orin-64gb")
    twin = out["twin"]
    assert twin["source"] == "twin" and twin["profile"] == "agx-orin-64gb"
    assert twin["time_s"] == pytest.approx(0.008)
    assert twin["energy_j"] == pytest.approx({"VDD_GPU_SOC": 0.2, "VDD_CPU_CV": 0.04})
    assert twin["total_energy_j"] == pytest.approx(0.24)
    assert twins and twins[0].closed  # the run closes the twin it opened


def test_cli_with_the_real_twin(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("engine.device.twin.orin")
    out = _cli_json(capsys, "--model", "bert-tiny", "--task", "sst2", "--steps", "3", "--batch-size", "4",
                    "--max-seq-len", "16", "--train-samples", "16", "--eval-samples", "8",
                    "--twin", "agx-orin-64gb")
    twin = out["twin"]
    assert twin["source"] == "twin" and twin["time_s"] > 0 and twin["total_energy_j"] > 0
    assert twin["total_energy_j"] == pytest.approx(sum(twin["energy_j"].values()))


def test_the_twin_is_opened_as_every_command_opens_it() -> None:
    """`finetune --twin` runs on the twin's persistent tree (where `slm-dvfs pin --twin` pins)."""
    from engine.device.session import twin_root

    from engine.run.harness import open_session

    session = open_session(twin="agx-orin-64gb")
    twin = session.twin
    try:
        assert twin.root == twin_root("agx-orin-64gb").absolute() and not twin.thermal_enabled
        assert twin.running  # its files answer clock writes
    finally:
        session.close()
    assert twin_root("agx-orin-64gb").is_dir()  # persistent: kept for the next command


def test_cli_refuses_a_device_this_host_lacks_before_loading(capsys: pytest.CaptureFixture[str],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    def never(*args, **kwargs):
        raise AssertionError("the model was loaded before the device was checked")

    monkeypatch.setattr("engine.workload.models.load_model", never)
    assert main(["finetune", "--model", "bert-tiny", "--task", "sst2", "--device", "nosuchdev"]) == 2
    err = capsys.readouterr().err
    assert "--device 'nosuchdev' is not a torch device" in err and "What to do" in err and "Traceback" not in err


def test_cli_text_summary_and_progress(capsys: pytest.CaptureFixture[str], monkeypatch) -> None:
    fake_twin_session(monkeypatch)
    code = main(["finetune", "--model", "bert-tiny", "--task", "sst2", "--steps", "2", "--batch-size", "4",
                 "--max-seq-len", "16", "--train-samples", "8", "--eval-samples", "8", "--twin", "x"])
    captured = capsys.readouterr()
    assert code == 0
    assert "\r[" in captured.err and "2/2" in captured.err  # the progress bar, on stderr
    assert "eval validation: loss" in captured.out and "[measured]" in captured.out
    (eval_line,) = [line for line in captured.out.splitlines() if line.startswith("  eval validation:")]
    assert eval_line.endswith("not meaningful (random weights / generated data)")  # random weights, generated data
    assert "J [twin]" in captured.out and "random weights" in captured.out
    assert "; twin x" in captured.err and "twin 0.06 J/step" in captured.err  # the step windows, as printed


def test_cli_rejects_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["finetune", "--model", "bert-tiny", "--task", "sst2", "--steps", "2",
                 "--checkpoint-every", "1"])
    err = capsys.readouterr().err
    assert code == 2 and "checkpoint" in err and "What to do" in err
    with pytest.raises(SystemExit):
        main(["finetune", "--model", "bert-tiny", "--task", "sst2", "--steps", "2", "--epochs", "1"])
    capsys.readouterr()
    code = main(["finetune", "--model", "no-such-model", "--task", "sst2", "--steps", "1"])
    assert code == 2 and "not in the model zoo" in capsys.readouterr().err


def test_spec_validation() -> None:
    with pytest.raises(ConfigError, match="padding"):
        FinetuneSpec(WorkloadSpec("bert-tiny", "sst2", padding="left")).validate()
    with pytest.raises(ConfigError, match="batch size"):
        FinetuneSpec(WorkloadSpec("bert-tiny", "sst2", batch_size=0)).validate()


def test_dynamic_padding_and_events() -> None:
    events: list = []
    result = run_finetune(FinetuneSpec(WorkloadSpec("bert-tiny", "sst2", padding="dynamic", **SHAPE), steps=3, **TINY),
                          callbacks=[events.append])
    ends = [e for e in events if isinstance(e, StepEnd)]
    assert len(ends) == 3 and all(e.tokens <= 8 * 16 for e in ends)
    assert isinstance(events[-1], RunFinished) and result.steps == 3
    assert torch.isfinite(torch.tensor(result.losses)).all()
    # every evaluation says what the model learnt from, so listeners can say the metric means nothing
    evals = [e for e in events if isinstance(e, EvalResult)]
    assert evals and all((e.weights, e.synthetic) == (result.weights, result.synthetic) == ("random", True)
                         for e in evals)
