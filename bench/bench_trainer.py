"""Our fine-tuning loop against transformers' Trainer: training samples per second.

Same model (bert-tiny, random weights, same initialisation), same synthetic SST-2 data,
same batch, length, step count, optimizer (AdamW, fused on CPU in both), schedule,
clipping and precision, on this host. Trainer gets the settings that make it lean too:
no evaluation, no saving, no logging, no reporting, no dataloader workers.
The default shape (batch 8, 64 tokens) is small on purpose: what differs between two
loops over the same model is their per-step work (data, bookkeeping, optimizer passes),
and at bert-tiny's zoo shape (32 x 128) the model's own arithmetic hides it on a CPU
(`--batch-size 32 --seq-len 128` measures that regime).
The two alternate, a few repetitions each; the first steps of every run are warm-up and
not timed. Each run's figure is its median step (see `throughput`); the JSON object
printed gives samples/s of both (median over repetitions) and their ratio (ours / Trainer).

    .venv/bin/pip install -e ".[bench]"   # accelerate, which transformers' Trainer needs
    .venv/bin/python bench/bench_trainer.py [--steps 40] [--warmup 5] [--reps 3] [--threads 1]
        [--batch-size 8] [--seq-len 64]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

# Offline and quiet before transformers is imported.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from engine.workload.data.text import encode, load_glue_text  # noqa: E402
from engine.workload.events import StepEnd  # noqa: E402
from engine.workload.models import build_model, load_model  # noqa: E402
from engine.workload.data.tokenization import load_tokenizer  # noqa: E402
from engine.workload.training.trainer import TrainConfig, Trainer  # noqa: E402
from engine.workload.zoo import get_entry  # noqa: E402

MODEL = "bert-tiny"
TASK = "sst2"
LEARNING_RATE = 1e-3


def prepare(batch_size: int, seq_len: int, samples: int):
    text = load_glue_text(TASK, "synthetic", train_samples=samples, eval_samples=8, seed=0)
    _, info = load_model(MODEL, TASK)
    tokenizer = load_tokenizer(MODEL, info, text.train_texts(), task=TASK)
    return encode(text, tokenizer, seq_len, padding="max_length")


def fresh_model() -> torch.nn.Module:
    return build_model(get_entry(MODEL).config, TASK, seed=0)


def throughput(stamps: list[tuple[float, float]], warmup: int, batch_size: int) -> tuple[float, float]:
    """Samples per second of the median step after warm-up: (wall clock, process CPU time).

    A step is the interval between the ends of two consecutive steps (data, forward,
    backward, optimizer, bookkeeping: everything the loop does). The median, rather
    than the mean, keeps bursts of other work on a shared host out of the figure; CPU
    time, unlike wall time, does not count the time other processes held the cores.
    """
    timed = stamps[max(0, warmup - 1):]
    wall = [b[0] - a[0] for a, b in zip(timed, timed[1:])]
    cpu = [b[1] - a[1] for a, b in zip(timed, timed[1:])]
    return batch_size / statistics.median(wall), batch_size / statistics.median(cpu)


def stamp() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def run_ours(encoded, steps: int, warmup: int, batch_size: int) -> tuple[float, float]:
    stamps: list[tuple[float, float]] = []

    def on_event(event) -> None:
        if isinstance(event, StepEnd):
            stamps.append(stamp())

    config = TrainConfig(steps=steps, batch_size=batch_size, learning_rate=LEARNING_RATE, device="cpu")
    Trainer(fresh_model(), encoded.train, config, callbacks=[on_event]).run()
    return throughput(stamps, warmup, batch_size)


def run_hf(encoded, steps: int, warmup: int, batch_size: int, out_dir: str) -> tuple[float, float]:
    from transformers import Trainer as HFTrainer
    from transformers import TrainerCallback, TrainingArguments, default_data_collator

    stamps: list[tuple[float, float]] = []

    class Stamp(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            stamps.append(stamp())

    common = dict(
        output_dir=out_dir, per_device_train_batch_size=batch_size, max_steps=steps,
        learning_rate=LEARNING_RATE, weight_decay=0.01, lr_scheduler_type="linear", max_grad_norm=1.0,
        logging_strategy="no", save_strategy="no", eval_strategy="no", report_to="none",
        dataloader_num_workers=0, dataloader_pin_memory=False, disable_tqdm=True, use_cpu=True, seed=0,
    )
    try:
        args = TrainingArguments(warmup_steps=0.06, **common)  # transformers 5: a float is a ratio
    except (TypeError, ValueError):
        args = TrainingArguments(warmup_ratio=0.06, **common)
    trainer = HFTrainer(model=fresh_model(), args=args, train_dataset=encoded.train,
                        data_collator=default_data_collator, callbacks=[Stamp()])
    trainer.train()
    return throughput(stamps, warmup, batch_size)


def _load() -> float | None:
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40, help="timed steps per run (after warm-up)")
    parser.add_argument("--warmup", type=int, default=5, choices=range(1, 1000), metavar="N", help="untimed steps at the start of each run")
    parser.add_argument("--reps", type=int, default=3, help="runs of each loop, alternating")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads for both loops (default 1: on a shared host, other "
                        "work stalls multi-threaded kernels and swamps the difference measured)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    torch.set_num_threads(args.threads)
    total = args.steps + args.warmup
    encoded = prepare(args.batch_size, args.seq_len, samples=(total + 1) * args.batch_size)

    ours: list[tuple[float, float]] = []
    hf: list[tuple[float, float]] = []
    with tempfile.TemporaryDirectory() as out_dir:
        for rep in range(args.reps):
            # Alternate which goes first, so neither always runs on a cooler/quieter host.
            order = (("ours", "hf") if rep % 2 == 0 else ("hf", "ours"))
            for which in order:
                if which == "ours":
                    ours.append(run_ours(encoded, total, args.warmup, args.batch_size))
                else:
                    hf.append(run_hf(encoded, total, args.warmup, args.batch_size, out_dir))
    import transformers

    result = {
        "benchmark": "trainer_throughput",
        "model": MODEL, "weights": "random", "task": TASK, "data": "synthetic",
        "batch_size": args.batch_size, "seq_len": args.seq_len, "precision": "fp32",
        "timed_steps": args.steps, "warmup_steps": args.warmup, "repetitions": args.reps,
        "ours_samples_per_s": statistics.median(r[0] for r in ours),
        "trainer_samples_per_s": statistics.median(r[0] for r in hf),
        "ratio": statistics.median(r[0] for r in ours) / statistics.median(r[0] for r in hf),
        "ours_samples_per_cpu_s": statistics.median(r[1] for r in ours),
        "trainer_samples_per_cpu_s": statistics.median(r[1] for r in hf),
        "ratio_cpu": statistics.median(r[1] for r in ours) / statistics.median(r[1] for r in hf),
        "ours_runs": [round(r[0], 2) for r in ours], "trainer_runs": [round(r[0], 2) for r in hf],
        "source": "measured",  # on this host, not on a Jetson
        "host": {"machine": platform.machine(), "cpus": os.cpu_count(), "python": platform.python_version(),
                 "torch": torch.__version__, "transformers": transformers.__version__,
                 "threads": torch.get_num_threads(), "load_avg_1min": _load()},
    }
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
