"""`slm-dvfs finetune`: one fine-tuning run from the command line, headless.

Progress goes to stderr as one line redrawn with `\\r`; the summary (or, with --json,
one JSON object) goes to stdout. Ctrl-C stops at the next step boundary (and
checkpoints, when a checkpoint folder was given); a second Ctrl-C interrupts at once.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import TextIO

from engine.cli import numbers
from engine.core.constants import PRECISIONS
from engine.core.provenance import MetricProvenance, Source
from engine.cli.interrupt import cancel_on_sigint
from engine.cli.mode_args import add_mode_args, describe_mode, workload_spec
from engine.workload.events import (
    Checkpointed,
    EvalResult,
    TrainerEvent,
    Paused,
    RunCancelled,
    RunFinished,
    RunStarted,
    StepEnd,
    StepEnergy,
)
from engine.workload.finetune import FinetuneResult, FinetuneSpec, run_finetune
from engine.workload.training.loop import TrainControl

BAR_WIDTH = 24
REDRAW_S = 0.1  # at most ten progress redraws a second


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "finetune",
        help="fine-tune a model on a GLUE task (on this host; --twin also runs it on the digital twin)",
        description="Fine-tune a sequence-classification model on a GLUE task (fully, BitFit, the head alone, "
        "or LoRA adapters). Batch size and sequence "
        "length default to the model zoo's entry. Offline by default: without a cached "
        "checkpoint the model starts from random weights, and --data synthetic needs no download.",
    )
    p.add_argument("--model", type=numbers.model, required=True, metavar="NAME|ID|DIR|config.json",
                   help="zoo name (e.g. bert-tiny), hub id, checkpoint folder or config.json")
    p.add_argument("--task", required=True, metavar="TASK", help="GLUE task, e.g. sst2, mrpc, stsb")
    p.add_argument("--data", default="synthetic", metavar="synthetic|hub|DIR",
                   help="where the text comes from (default: synthetic)")
    length = p.add_mutually_exclusive_group()
    length.add_argument("--steps", type=numbers.steps, metavar="N", help="optimizer steps to run")
    length.add_argument("--epochs", type=numbers.epochs, metavar="E", help="passes over the training set (default 1)")
    p.add_argument("--batch-size", type=numbers.batch_size, metavar="B", help="samples per step (default: zoo entry)")
    p.add_argument("--max-seq-len", type=numbers.seq_len, metavar="L", help="tokens per sample (default: zoo entry)")
    p.add_argument("--precision", choices=PRECISIONS,
                   help="default: zoo entry; 16-bit needs CUDA (fp32 elsewhere, with a warning)")
    p.add_argument("--train-samples", type=numbers.samples, metavar="N", help="training examples to use")
    p.add_argument("--eval-samples", type=numbers.samples, metavar="N", help="evaluation examples per split")
    add_mode_args(p)
    p.add_argument("--output-dir", metavar="DIR",
                   help="save the trained model here (--mode lora: the adapter in peft's format, "
                        "adapter_config.json + adapter_model.safetensors; default for lora: a new folder "
                        "under the data directory)")
    p.add_argument("--lr", type=numbers.learning_rate, metavar="RATE",
                   help="peak learning rate (default 5e-5 pretrained, 1e-3 random weights)")
    numbers.add_pad_argument(p, deprecated_padding=True)
    numbers.add_loop_argument(p)
    p.add_argument("--twin", metavar="PROFILE", help="also run every step on the digital twin, e.g. agx-orin-64gb")
    p.add_argument("--seed", type=numbers.seed, default=0, metavar="S", help="seed of weights, data and order (default 0)")
    p.add_argument("--eval-every", type=numbers.interval_steps, default=0, metavar="N", help="also evaluate every N steps")
    p.add_argument("--checkpoint-every", type=numbers.interval_steps, default=0, metavar="N", help="checkpoint every N steps")
    p.add_argument("--checkpoint-dir", metavar="D", help="where checkpoints go")
    p.add_argument("--resume", metavar="D", help="continue from the latest checkpoint in D")
    p.add_argument("--download", action="store_true",
                   help="allow fetching checkpoints and data from the Hugging Face hub")
    p.add_argument("--device", metavar="DEV", help="torch device (default: cuda when available, else cpu)")
    p.add_argument("--json", action="store_true", help="print the result as one JSON object on stdout")
    p.set_defaults(func=run)
    return p


def spec_from_args(args: argparse.Namespace) -> FinetuneSpec:
    checkpoint_dir = args.checkpoint_dir
    if args.resume and not checkpoint_dir and args.checkpoint_every:
        # Keep checkpointing where the resumed run did (the run folder, not a step folder).
        from engine.workload.training.checkpoint import CHECKPOINT_FILE  # here: it imports torch

        resume = Path(args.resume)
        checkpoint_dir = str(resume.parent if (resume / CHECKPOINT_FILE).is_file() else resume)
    return FinetuneSpec(
        workload=workload_spec(args, trains=True), steps=args.steps, epochs=args.epochs, train_samples=args.train_samples,
        eval_samples=args.eval_samples, output_dir=args.output_dir, eval_every=args.eval_every,
        checkpoint_every=args.checkpoint_every, checkpoint_dir=checkpoint_dir, resume=args.resume,
        learning_rate=args.lr, device=args.device,
    )


def run(args: argparse.Namespace) -> int:
    spec = spec_from_args(args)
    spec.validate()
    control = TrainControl()
    progress = ProgressBar(sys.stderr, twin=args.twin)
    with cancel_on_sigint(control):
        if args.twin:  # every step also runs on the twin; its figures come from the run harness's monitor
            from engine.run.harness import finetune_measured

            result = finetune_measured(spec, twin=args.twin, callbacks=[progress], control=control)
        else:
            result = run_finetune(spec, callbacks=[progress], control=control)
    if args.json:
        json.dump(result.to_json(), sys.stdout)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(summary(result))
    return 130 if result.cancelled else 0


class ProgressBar:
    """A one-line progress display for a terminal or a log: `\\r`-redrawn, throttled."""

    def __init__(self, stream: TextIO, twin: str | None = None) -> None:
        self.stream = stream
        self.twin = twin  # the twin profile the run also advances, named in the first line
        self._energy: StepEnergy | None = None
        self.total = 0
        self.model = ""
        self._last_draw = 0.0
        self._open = False  # a progress line is on screen, without its newline

    def __call__(self, event: TrainerEvent) -> None:
        if isinstance(event, RunStarted):
            self.total = event.total_steps
            self.model = f"{event.model}/{event.task}"
            resumed = f", resumed at step {event.start_step}" if event.start_step else ""
            self._line(f"{self.model}: {event.total_steps} steps of {event.batch_size}, "
                       f"{event.precision} on {event.device}, {event.trainable_params:,} trainable "
                       f"parameters{resumed}" + (f"; twin {self.twin}" if self.twin else ""))
        elif isinstance(event, StepEnergy):
            self._energy = event
        elif isinstance(event, StepEnd):
            now = time.monotonic()
            if now - self._last_draw >= REDRAW_S or event.step >= self.total:
                self._last_draw = now
                self._draw(event)
        elif isinstance(event, EvalResult):
            metrics = "  ".join(f"{k} {v:.4f}" for k, v in event.metrics.items())
            tag = MetricProvenance(event.weights, event.synthetic).tag(Source.MEASURED)  # computed on this host
            self._line(f"eval @ step {event.step} ({event.split}): {metrics}  {tag}")
        elif isinstance(event, Checkpointed):
            self._line(f"checkpoint @ step {event.step}: {event.path}")
        elif isinstance(event, Paused):
            self._line(f"paused after step {event.step}")
        elif isinstance(event, RunCancelled):
            self._line(f"cancelled after step {event.step}: {event.reason}")
        elif isinstance(event, RunFinished):
            self._end()

    def _draw(self, e: StepEnd) -> None:
        frac = e.step / self.total if self.total else 0.0
        filled = int(round(frac * BAR_WIDTH))
        rate = e.samples / e.wall_s if e.wall_s > 0 else 0.0
        energy = self._energy
        twin = f"  twin {sum(energy.energy_j.values()):.2f} J/step" \
            if energy is not None and energy.step == e.step else ""
        text = (f"\r[{'#' * filled}{'.' * (BAR_WIDTH - filled)}] {e.step}/{self.total}  "
                f"loss {e.loss:.4f}  lr {e.lr:.2e}  {rate:.0f} samples/s{twin}")
        self.stream.write(text)
        self.stream.flush()
        self._open = True

    def _line(self, text: str) -> None:
        self._end()
        self.stream.write(text + "\n")
        self.stream.flush()

    def _end(self) -> None:
        if self._open:
            self.stream.write("\n")
            self._open = False


def summary(result: FinetuneResult) -> str:
    mode = describe_mode(result.mode, result.lora, result.grad_checkpointing, result.family)
    lines = [f"{result.model} on {result.task} ({mode}, {result.precision}, {result.device}): "
             f"{result.steps} steps, {result.samples} samples"
             + ("  [cancelled]" if result.cancelled else "")]
    notes = []
    if result.weights == "random":
        notes.append("random weights")
    if result.synthetic:
        notes.append("synthetic data")
    if notes:
        lines.append(f"  note: {', '.join(notes)}: the eval metric is not meaningful; time and energy are faithful")
    tag = MetricProvenance(result.weights, result.synthetic).tag(Source.MEASURED)
    for split, metrics in result.eval.items():
        shown = "  ".join(f"{k} {v:.4f}" for k, v in metrics.items())
        lines.append(f"  eval {split}: {shown}  {tag}")
    if result.final_loss is not None:
        lines.append(f"  final training loss: {result.final_loss:.4f}")
    if result.saved_to:
        what = "LoRA adapter (peft: PeftModel.from_pretrained(base_model, DIR))" if result.mode == "lora" else "model"
        lines.append(f"  {what} saved in {result.saved_to}")
    lines.append(f"  host wall time: {result.wall_s:.2f} s ({result.samples_per_s:.1f} samples/s) "
                 f"[{result.host_source}]")
    if result.twin_source is not None:
        rails = ", ".join(f"{k} {v:.2f} J" for k, v in (result.twin_energy_j or {}).items())
        lines.append(f"  twin {result.twin_profile} ({result.twin_precision}): "
                     f"{result.twin_time_s:.3f} s, {result.twin_total_energy_j:.2f} J "
                     f"[{result.twin_source}]")
        if rails:
            lines.append(f"    per rail: {rails}")
    return "\n".join(lines) + "\n"
