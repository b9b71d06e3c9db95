"""The fine-tuning loop: learning, determinism, resume, BitFit, events, pause and cancel."""

from __future__ import annotations

import logging
import math
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from engine.core.errors import ConfigError
from engine.workload.events import (
    Checkpointed,
    EvalResult,
    Paused,
    Resumed,
    RunCancelled,
    RunFinished,
    RunStarted,
    StepBegin,
    StepEnd,
    event_to_json,
)
from engine.core.trace import OpCost, StepTrace
from engine.workload.data.batching import BatchSource
from engine.workload.training.checkpoint import find_checkpoint
from engine.workload.training.loop import TrainControl
from engine.workload.training.optim import LinearWarmup, apply_mode, resolve_device
from engine.workload.training.trainer import TrainConfig, Trainer, TrainOutcome

VOCAB, LENGTH = 50, 12


class TinyClassifier(torch.nn.Module):
    """Embedding, one dropout-regularised layer with LayerNorm, a classification head."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.embed = torch.nn.Embedding(VOCAB, 16)
        self.body = torch.nn.Linear(16, 16)
        self.norm = torch.nn.LayerNorm(16)
        self.dropout = torch.nn.Dropout(0.1)
        self.classifier = torch.nn.Linear(16, 2)

    def forward(self, input_ids, attention_mask, labels=None):
        h = self.embed(input_ids) * attention_mask.unsqueeze(-1)
        h = self.dropout(self.norm(torch.tanh(self.body(h))))
        logits = self.classifier(h.mean(dim=1))
        out = {"logits": logits}
        if labels is not None:
            out["loss"] = torch.nn.functional.cross_entropy(logits, labels)
        return out


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny models run as fast on one thread, and steadier on a shared host."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def toy_data(n: int, seed: int = 1) -> dict[str, torch.Tensor]:
    """Label 1 when token 1 appears more often than token 2: learnable in a few steps."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, VOCAB, (n, LENGTH), generator=g)
    labels = torch.randint(0, 2, (n,), generator=g)
    marker = torch.where(labels == 1, 1, 2)
    ids[:, :4] = marker.unsqueeze(1)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}


def accuracy(preds, labels):
    return {"accuracy": float((preds == labels).mean())}


def make_trainer(steps: int = 12, *, seed: int = 0, callbacks=(), control=None, **config) -> Trainer:
    cfg = TrainConfig(steps=steps, batch_size=8, learning_rate=config.pop("learning_rate", 1e-2),
                      seed=seed, device="cpu", **config)
    return Trainer(TinyClassifier(seed), toy_data(64), cfg, eval_data={"validation": toy_data(24, seed=2)},
                   metric_fn=accuracy, callbacks=callbacks, control=control, run_name=("tiny", "toy"))


def test_loss_goes_down_and_eval_scores() -> None:
    outcome = make_trainer(steps=40).run()
    first, last = sum(outcome.losses[:5]) / 5, sum(outcome.losses[-5:]) / 5
    assert last < first - 0.2
    assert outcome.eval["validation"]["accuracy"] > 0.8
    assert outcome.steps == 40 and outcome.samples == 40 * 8 and outcome.precision == "fp32"
    assert outcome.samples_per_s > 0 and outcome.wall_s >= outcome.train_wall_s > 0


def test_same_seed_same_run_and_order_depends_on_seed_only() -> None:
    a = make_trainer(steps=8).run()
    torch.manual_seed(1234)  # the global RNG state before a run does not matter
    b = make_trainer(steps=8).run()
    assert a.losses == b.losses
    data = toy_data(20)
    s1 = BatchSource(data, 8, torch.device("cpu"), seed=5)
    torch.manual_seed(99)
    s2 = BatchSource(data, 8, torch.device("cpu"), seed=5)
    batches = [s1.batch(i)["input_ids"] for i in range(7)]  # crosses two epoch boundaries
    assert all(torch.equal(x, s2.batch(i)["input_ids"]) for i, x in enumerate(batches))
    assert torch.equal(s1.batch(1)["input_ids"], batches[1])  # going back replays the order
    assert s1.batches_per_epoch == 3 and batches[2].shape[0] == 4  # last batch is partial
    epoch0 = torch.cat([s1.batch(i)["labels"] for i in range(3)])
    assert sorted(epoch0.tolist()) == sorted(data["labels"].tolist())  # a permutation
    s3 = BatchSource(data, 8, torch.device("cpu"), seed=6)
    assert not torch.equal(s3.order(0), s1.order(0))


def test_resume_equals_uninterrupted_run(tmp_path: Path) -> None:
    events: list = []
    full = make_trainer(steps=12, checkpoint_every=5, checkpoint_dir=str(tmp_path / "a"), callbacks=[events.append])
    uninterrupted = full.run()
    saved = [e for e in events if isinstance(e, Checkpointed)]
    assert [e.step for e in saved] == [5, 10] and Path(saved[0].path).name == "step-0000005"
    after = events.index(saved[0])
    assert isinstance(events[after - 1], StepEnd) and events[after - 1].step == 5
    assert sorted(p.name for p in (tmp_path / "a").glob("step-*")) == ["step-0000005", "step-0000010"]

    resumed_trainer = make_trainer(steps=12, checkpoint_every=5, checkpoint_dir=str(tmp_path / "b"))
    resumed = resumed_trainer.run(resume_from=tmp_path / "a" / "step-0000005")
    assert resumed.start_step == 5
    assert resumed.losses == uninterrupted.losses  # bitwise: the same floats
    for (name, p), q in zip(full.model.state_dict().items(), resumed_trainer.model.state_dict().values()):
        assert torch.equal(p, q), name


def test_cancel_checkpoints_and_resume_finishes_the_same(tmp_path: Path) -> None:
    reference = make_trainer(steps=10).run()
    control = TrainControl()
    events: list = []

    def cancel_at_4(event):
        events.append(event)
        if isinstance(event, StepEnd) and event.step == 4:
            control.cancel("test")

    cancelled = make_trainer(steps=10, control=control, callbacks=[cancel_at_4],
                             checkpoint_dir=str(tmp_path)).run()
    assert cancelled.cancelled and cancelled.steps == 4
    assert isinstance(events[-1], RunCancelled) and events[-1].step == 4 and events[-1].reason == "test"
    assert not any(isinstance(e, StepBegin) and e.step == 5 for e in events)
    assert find_checkpoint(tmp_path).parent.name == "step-0000004"
    finished = make_trainer(steps=10).run(resume_from=tmp_path)
    assert finished.losses == reference.losses and not finished.cancelled


def test_resume_refuses_another_runs_checkpoint(tmp_path: Path) -> None:
    make_trainer(steps=4, checkpoint_every=2, checkpoint_dir=str(tmp_path)).run()
    with pytest.raises(ConfigError, match="different run"):
        make_trainer(steps=4, seed=1).run(resume_from=tmp_path)
    with pytest.raises(ConfigError, match="no checkpoint"):
        find_checkpoint(tmp_path / "nowhere")


def test_bitfit_trains_only_biases_and_head() -> None:
    trainer = make_trainer(steps=5, mode="bitfit")
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    expected = sum(p.numel() for n, p in trainer.model.named_parameters()
                   if n.endswith("bias") or n.startswith("classifier."))
    assert trainer.trainable_params == expected
    trainer.run()
    for name, param in trainer.model.named_parameters():
        changed = not torch.equal(before[name], param.detach())
        should_train = name.endswith("bias") or name.startswith("classifier.")
        assert changed == should_train, name
    with pytest.raises(ConfigError, match="task head"):
        apply_mode(torch.nn.Sequential(torch.nn.Linear(2, 2)), "bitfit")


def test_weight_decay_skips_biases_and_layernorm() -> None:
    trainer = make_trainer(steps=1)
    decay = {id(p): g["weight_decay"] for g in trainer.optimizer.param_groups for p in g["params"]}
    for name, p in trainer.model.named_parameters():
        assert decay[id(p)] == (0.0 if name.endswith("bias") or name.startswith("norm.") else 0.01), name


def test_events_arrive_in_order() -> None:
    events: list = []
    make_trainer(steps=6, callbacks=[events.append], eval_every=3).run()
    kinds = [type(e).__name__ for e in events]
    assert kinds == (["RunStarted"] + ["StepBegin", "StepEnd"] * 3 + ["EvalResult"]
                     + ["StepBegin", "StepEnd"] * 3 + ["EvalResult", "RunFinished"])
    started = events[0]
    assert isinstance(started, RunStarted) and started.total_steps == 6 and started.steps_per_epoch == 8
    ends = [e for e in events if isinstance(e, StepEnd)]
    assert [e.step for e in ends] == [1, 2, 3, 4, 5, 6]
    assert all(e.samples == 8 and e.tokens == 8 * LENGTH and e.wall_s > 0 for e in ends)
    evals = [e for e in events if isinstance(e, EvalResult)]
    assert [(e.step, e.split) for e in evals] == [(3, "validation"), (6, "validation")]
    assert "accuracy" in evals[0].metrics and evals[0].samples == 24
    finished = events[-1]
    assert isinstance(finished, RunFinished) and finished.step == 6 and finished.final_loss == ends[-1].loss
    assert event_to_json(ends[0])["event"] == "StepEnd"


def test_linear_schedule_with_warmup() -> None:
    events: list = []
    trainer = make_trainer(steps=50, callbacks=[events.append], learning_rate=1.0)
    trainer.run()
    lrs = [e.lr for e in events if isinstance(e, StepEnd)]
    assert trainer.warmup_steps == 3  # ceil(6% of 50)
    assert lrs[:4] == pytest.approx([0.0, 1 / 3, 2 / 3, 1.0])
    assert lrs[-1] == pytest.approx(1 / 47) and all(a >= b for a, b in zip(lrs[3:], lrs[4:]))
    assert LinearWarmup(3, 50)(50) == 0.0


def _reference_run(steps: int, lr: float, max_grad_norm: float | None) -> TinyClassifier:
    """The textbook loop, written out: AdamW (decay off for biases and LayerNorm), linear
    warm-up schedule, clip_grad_norm_; the same seed and batch order as the trainer."""
    model = TinyClassifier(0)
    torch.manual_seed(0)  # the trainer seeds dropout with the run's seed
    no_decay = [p for n, p in model.named_parameters() if n.endswith("bias") or n.startswith("norm.")]
    decay = [p for n, p in model.named_parameters() if not (n.endswith("bias") or n.startswith("norm."))]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                             {"params": no_decay, "weight_decay": 0.0}], lr=lr, foreach=False)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, LinearWarmup(math.ceil(0.06 * steps), steps))
    source = BatchSource(toy_data(64), 8, torch.device("cpu"), seed=0)
    for step in range(steps):
        model(**source.batch(step))["loss"].backward()
        if max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(list(model.parameters()), max_grad_norm)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
    return model


def test_a_step_is_the_textbook_step_with_clipping() -> None:
    events: list = []
    trainer = make_trainer(steps=20, learning_rate=0.05, max_grad_norm=0.05, callbacks=[events.append])
    trainer.run()
    norms = [e.grad_norm for e in events if isinstance(e, StepEnd)]
    assert sum(n > 0.05 for n in norms) >= 15  # clipping was active on most steps
    clipped = _reference_run(20, 0.05, 0.05).state_dict()
    unclipped = _reference_run(20, 0.05, None).state_dict()
    for name, value in trainer.model.state_dict().items():
        assert torch.allclose(value, clipped[name], atol=1e-5), name
    assert any(not torch.allclose(v, unclipped[n], atol=1e-5) for n, v in trainer.model.state_dict().items())


def test_pause_and_cancel_from_another_thread() -> None:
    control = TrainControl()
    events: list = []
    seen = {Paused: threading.Semaphore(0), Resumed: threading.Semaphore(0)}

    def listener(event):
        events.append(event)
        if isinstance(event, StepEnd) and event.step == 2:
            control.pause()
        if type(event) in seen:
            seen[type(event)].release()

    trainer = make_trainer(steps=1000, control=control, callbacks=[listener])
    result: dict = {}
    thread = threading.Thread(target=lambda: result.setdefault("o", trainer.run()))
    thread.start()
    assert seen[Paused].acquire(timeout=10)
    assert control.paused and thread.is_alive()
    assert [e.step for e in events if isinstance(e, StepEnd)] == [1, 2]  # held at the boundary
    control.resume()
    assert seen[Resumed].acquire(timeout=10)
    control.pause()  # from this thread, mid-run: takes effect at the next boundary
    assert seen[Paused].acquire(timeout=10)
    control.cancel("user")  # while paused: wakes the loop, which stops
    thread.join(10)
    assert not thread.is_alive()
    outcome = result["o"]
    assert outcome.cancelled and 2 <= outcome.steps < 1000
    assert [type(e) for e in events if isinstance(e, (Paused, Resumed))] == [Paused, Resumed, Paused]
    assert isinstance(events[-1], RunCancelled) and events[-1].step == outcome.steps
    assert events[-1].reason == "user"


def test_fp16_on_cpu_falls_back_to_fp32_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="engine.workload.training.trainer"):
        outcome = make_trainer(steps=2, precision="fp16").run()
    assert outcome.precision == "fp32"
    assert any("fp16 needs CUDA" in r.getMessage() for r in caplog.records)


class FakeTwin:
    """Charges 10 ms per step; records its traces and whether it was driven."""

    def __init__(self) -> None:
        self.steps: list[StepTrace] = []
        self.driven_depth = 0
        self.was_driven = False

    def run_step(self, trace: StepTrace):
        self.steps.append(trace)
        self.was_driven |= self.driven_depth > 0
        return SimpleNamespace(time_s=0.01, energy_j={"VDD_GPU_SOC": 0.1 * trace.flops / 1e9})

    def driven(self):
        twin = self

        class _Ctx:
            def __enter__(self):
                twin.driven_depth += 1

            def __exit__(self, *exc):
                twin.driven_depth -= 1

        return _Ctx()


def test_the_trainer_knows_no_twin_and_calls_its_step_hook_before_each_step_end() -> None:
    """The hook runs after every step with the batch's shape, before that step's StepEnd;
    the trainer takes no twin, and neither its events nor its outcome carry twin costs."""
    import dataclasses
    import inspect

    params = inspect.signature(Trainer.__init__).parameters
    assert "twin" not in params and "trace_for" not in params and "step_hook" in params
    assert not any("twin" in f.name for cls in (TrainOutcome, StepEnd, RunStarted, RunFinished, RunCancelled)
                   for f in dataclasses.fields(cls))
    events: list = []
    hooked: list[tuple[int, int, int]] = []
    cfg = TrainConfig(steps=10, batch_size=24, learning_rate=1e-2, device="cpu")
    trainer = Trainer(TinyClassifier(), toy_data(64), cfg, callbacks=[events.append],
                      step_hook=lambda rows, seq: hooked.append((rows, seq, len(events))))
    trainer.run()
    # 64 samples in batches of 24: two full batches and one of 16 per epoch.
    assert [(r, q) for r, q, _n in hooked] == [(24, LENGTH), (24, LENGTH), (16, LENGTH)] * 3 + [(24, LENGTH)]
    ends = [i for i, e in enumerate(events) if isinstance(e, StepEnd)]
    begins = [i for i, e in enumerate(events) if isinstance(e, StepBegin)]
    assert all(b < n <= e for b, (_r, _q, n), e in zip(begins, hooked, ends))  # after StepBegin, before StepEnd


def test_the_sessions_step_hook_advances_the_twin_while_driven() -> None:
    """Where a run is assembled: the session's hook runs each step on the twin, by its trace."""
    from engine.device.session import DeviceSession

    twin = FakeTwin()
    session = DeviceSession(device=None, twin=twin)  # type: ignore[arg-type]
    calls: list[tuple[int, int]] = []

    def trace_for(rows: int, length: int) -> StepTrace:
        calls.append((rows, length))
        return StepTrace("tiny", rows, length, "fp32", (OpCost("matmul", 1e9 * rows, 1e6, 10),), 1e6)

    cfg = TrainConfig(steps=10, batch_size=24, learning_rate=1e-2, device="cpu")
    with session.driven():
        Trainer(TinyClassifier(), toy_data(64), cfg, step_hook=session.step_hook(trace_for)).run()
    assert len(twin.steps) == 10 and twin.was_driven and twin.driven_depth == 0
    assert [t.batch_size for t in twin.steps] == [24, 24, 16] * 3 + [24] and len(calls) == 10
    assert DeviceSession(device=None).step_hook(trace_for) is None  # a board: nothing to advance  # type: ignore[arg-type]


def test_config_errors_say_what_to_do() -> None:
    with pytest.raises(ConfigError, match="both steps and epochs") as err:
        TrainConfig(steps=1, epochs=1.0).validate()
    assert err.value.remedy
    with pytest.raises(ConfigError, match="checkpoint"):
        TrainConfig(checkpoint_every=2).validate()
    with pytest.raises(ConfigError, match="precision"):
        TrainConfig(precision="fp8").validate()


@pytest.mark.parametrize("requested, match", [
    ("nosuchdev", "is not a torch device"), ("cuda", "sees no CUDA GPU"), ("cuda:1", "sees no CUDA GPU"),
    ("mps", "no mps device is available"),
])
def test_a_device_this_host_lacks_is_a_config_error(monkeypatch: pytest.MonkeyPatch, requested: str,
                                                    match: str) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    with pytest.raises(ConfigError, match=match) as err:
        resolve_device(requested)
    assert "--device cpu" in err.value.remedy or "use cpu" in err.value.remedy
    assert resolve_device("cpu") == torch.device("cpu") and resolve_device(None) == torch.device("cpu")


def test_a_cuda_index_past_the_last_gpu_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(ConfigError, match="has 1 CUDA GPU"):
        resolve_device("cuda:1")
    assert resolve_device("cuda:0") == torch.device("cuda:0")


def test_epochs_set_the_step_count() -> None:
    cfg = TrainConfig(epochs=1.5, batch_size=8, device="cpu")
    trainer = Trainer(TinyClassifier(), toy_data(20), cfg)  # 3 batches per epoch
    assert trainer.total_steps == 5
    assert trainer.run().samples == 20 + 8 + 8


# -- safe loading: nothing in a checkpoint is unpickled as code


class _Boom:
    def __reduce__(self):
        return (Path.touch, (Path(__file__).parent / "never",))


def test_checkpoint_loads_with_weights_only_and_json_meta(tmp_path: Path) -> None:
    import json

    make_trainer(steps=4, checkpoint_every=2, checkpoint_dir=str(tmp_path)).run()
    folder = find_checkpoint(tmp_path).parent
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["format"] == 2 and meta["fingerprint"]["seed"] == 0
    state = torch.load(folder / "state.pt", weights_only=True)  # loads: tensors and plain containers
    assert {"model", "optimizer", "scheduler", "rng"} <= state.keys()


def test_resume_refuses_garbage_foreign_and_old_files(tmp_path: Path) -> None:
    make_trainer(steps=4, checkpoint_every=2, checkpoint_dir=str(tmp_path / "run")).run()
    folder = find_checkpoint(tmp_path / "run").parent
    # a file with code in it beside a valid meta.json: refused by weights_only, nothing runs
    evil = tmp_path / "evil"
    evil.mkdir()
    (evil / "meta.json").write_text((folder / "meta.json").read_text())
    torch.save({"model": _Boom()}, evil / "state.pt")
    with pytest.raises(ConfigError, match="could not be read safely"):
        make_trainer(steps=4).run(resume_from=evil)
    assert not (Path(__file__).parent / "never").exists()
    # garbage bytes given as the file
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"\x00not a checkpoint" * 10)
    with pytest.raises(ConfigError, match="not an slm-dvfs checkpoint"):
        make_trainer(steps=4).run(resume_from=garbage)
    # an old single-file checkpoint (a full pickle, no meta.json): refused, never unpickled
    old = tmp_path / "old" / "step-0000002"
    old.mkdir(parents=True)
    torch.save({"format": 1, "rng": {"python": __import__("random").getstate()}}, old / "state.pt")
    with pytest.raises(ConfigError, match="older slm-dvfs") as err:
        make_trainer(steps=4).run(resume_from=old)
    assert "without --resume" in err.value.remedy
    # a damaged meta.json, an empty folder, a missing folder
    (evil / "meta.json").write_text("{")
    with pytest.raises(ConfigError, match="unreadable"):
        make_trainer(steps=4).run(resume_from=evil)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="no checkpoint in"):
        make_trainer(steps=4).run(resume_from=tmp_path / "empty")
    with pytest.raises(ConfigError, match="no checkpoint folder"):
        make_trainer(steps=4).run(resume_from=tmp_path / "missing")


def test_unwritable_checkpoint_dir_is_a_config_error(tmp_path: Path) -> None:
    from engine.workload.training.checkpoint import check_checkpoint_dir

    with pytest.raises(ConfigError, match="cannot create the checkpoint folder /proc/nope"):
        check_checkpoint_dir("/proc/nope")
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ConfigError, match="checkpoint"):
        check_checkpoint_dir(blocker / "sub")
    with pytest.raises(ConfigError, match="cannot write a checkpoint"):
        make_trainer(steps=2, checkpoint_every=1, checkpoint_dir="/proc/nope").run()
