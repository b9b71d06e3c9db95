"""The setup form's checks and the `ExperimentSpec` it becomes (no Textual here).

Each `check_*` returns None for a good value or a short reason for a bad one; the
setup screen wraps them in Textual validators so a bad value is marked where it is
typed. The checks are cheap (no torch import): a model that names a hub id or a folder
is resolved when the run starts, and any error then appears in the app.
Numbers are read as the CLI reads its flags (engine.core.userinput: ASCII digits, no `2_5`, no
5000-digit text) within the CLI's bounds (engine.core.plausible), each field's `Bounds` here.
The zoo listing and the live memory estimate are in tui.setup_fit.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from engine.core.constants import DEFAULT_BATCH_SIZE, MODES, SYNTHETIC_TRAIN_MAX
from engine.core.errors import ConfigError, SlmDvfsError
from engine.core.plausible import (MAX_BATCH, MAX_EPOCHS, MAX_LORA_RANK, MAX_POINT_STEPS, MAX_SAMPLES, MAX_SEQ_LEN,
                                   MAX_STEPS, MAX_SWEEP_REPEATS, MAX_WARMUP_STEPS)
from engine.core.userinput import MAX_NUMBER_CHARS, InputError, parse_float, parse_int

POLICY_CHOICES = ("maxn", "static:gpu=816", "oracle", "ml", "online", "mode:1", "maxn-pinned")
OBJECTIVE_CHOICES = ("energy", "edp", "eta:0.5")
PRECISION_CHOICES = ("default", "fp32", "fp16", "bf16")
DATA_CHOICES = ("synthetic", "hub")
MODE_CHOICES = MODES


# Field name -> the label the setup page shows beside it (errors name the label).
FIELD_LABELS = {"amount": "length", "slowdown": "slowdown limit", "batch_size": "batch size",
                "seq_len": "seq length", "train_samples": "train samples", "lora_rank": "LoRA rank",
                "compare": "compare with MAXN", "unit": "length unit"}


# Field name -> what it means (the help screen, ? or F1). Policies and objectives are explained
# there from the engine's own texts.
FIELD_HELP: dict[str, str] = {
    "model": "what to fine-tune: a zoo name (▼ beside it, or ↓ in the field, lists the zoo with each "
             "model's family and size; typing completes), a hub id in the local cache, a checkpoint folder "
             "or a config.json",
    "task": "the GLUE task (SST-2, MRPC, ...): its labels, metric and sizes",
    "data": "synthetic (generated, offline: the metric is then not meaningful), hub (GLUE from the "
            "local hub cache) or a folder of GLUE files",
    "policy": "how the clocks are chosen for the run (see Policies below)",
    "objective": "what the oracle, online and ml policies minimise (see Objectives below)",
    "slowdown ≤": "the most extra time, in % against the board's baseline (MAXN; MAXN_SUPER on an Orin Nano / "
                  "NX), the choice may cost (blank: no limit); "
                  "the same as objective@N%",
    "length": "how long to train: a number of steps, or of epochs over the training set",
    "batch size": "samples a step (blank: the zoo's default for the model)",
    "seq length": "tokens a sample (blank: the zoo's default)",
    "precision": "fp32, fp16 or bf16 weights and maths (default: the zoo's)",
    "mode": "full (every weight trains), bitfit (the biases and the task head), head (the task head on a "
            "frozen backbone) or lora (low-rank adapters on the attention, and the head)",
    "LoRA rank": "mode lora: the adapters' rank (8 is usual; higher trains more parameters)",
    "memory": "the workload's estimated peak memory (weights, gradients, AdamW state, activations, "
              "workspace) against what the board leaves for training; when it does not fit, what would "
              "(docs/models.md, Will it fit?)",
    "train samples": "how many training samples to use (blank: all of them)",
    "compare with MAXN": "also run the board's baseline, its uncapped mode by name and id (MAXN (mode 0) on an AGX Orin, "
                         "MAXN_SUPER (mode 2) on an Orin Nano 8GB), on the same workload afterwards and show both on "
                         "Compare (4), with the saving and the slowdown",
    "simulate": "twin only: no training, each step just advances the twin (fast; no eval metric)",
}


def label_of(field: str) -> str:
    return FIELD_LABELS.get(field, field.replace("_", " "))


@functools.lru_cache(maxsize=1)
def zoo_names() -> tuple[str, ...]:
    from engine.workload.zoo import load_zoo

    try:
        return tuple(load_zoo())
    except SlmDvfsError:
        return ()


def task_choices() -> tuple[tuple[str, str], ...]:
    """(display, key) of the nine GLUE tasks."""
    from engine.workload.glue import TASKS

    return tuple((t.display, t.name) for t in TASKS.values())


def check_model(text: str) -> str | None:
    spec = text.strip()
    if not spec:
        return "name a model: a zoo name, hub id, checkpoint folder or config.json"
    if spec.lower() in {n.lower() for n in zoo_names()}:
        return None
    path = Path(spec).expanduser()
    if path.is_file():
        return None if path.suffix == ".json" else f"{spec} is not a config.json"
    if path.is_dir():
        return None if (path / "config.json").is_file() else f"{spec} holds no config.json"
    if spec.startswith((".", "/", "~")) or spec.endswith(".json"):
        return f"no such file or folder: {spec}"
    if re.fullmatch(r"[\w.-]+/[\w.-]+", spec):
        return None  # a hub id: it must be in the local cache, checked when the run starts
    return f"{spec!r} is not in the zoo ({', '.join(zoo_names()) or 'none'}) nor a hub id or path"


def check_models(text: str) -> str | None:
    """The Sweep form's model field: one model, or several comma-separated (a fleet sweep's)."""
    names = [m.strip() for m in text.split(",")]
    if len(names) > 1 and not all(names):
        return "models: comma-separated names, none blank"
    return next((r for r in map(check_model, names) if r), None)


def check_data(text: str) -> str | None:
    value = text.strip()
    if value in DATA_CHOICES:
        return None
    if not value:
        return "synthetic, hub, or a GLUE folder"
    return None if Path(value).expanduser().is_dir() else f"no such folder: {value} (or use synthetic / hub)"


def check_policy(text: str) -> str | None:
    from engine.dvfs.policies import make_policy

    spec = text.strip()
    if not spec:
        return "name a policy: maxn, static:gpu=MHz, oracle, ml, online, mode:N"
    if spec.lower().split(":", 1)[0] == "ml":
        return None  # its selector is loaded when the run starts (and may be missing: said then)
    try:
        make_policy(spec)
    except SlmDvfsError as exc:
        return exc.what
    return None


def check_objective(text: str) -> str | None:
    from engine.dvfs.objectives import parse_objective

    try:
        parse_objective(text)
    except SlmDvfsError as exc:
        return exc.what
    return None


@dataclass(frozen=True)
class Bounds:
    """What a form's number may be: a whole number or not, and its range (engine.core.plausible's,
    the bounds the CLI's flags take); `what` names it in a reason."""

    what: str
    low: float
    high: float = math.inf
    whole: bool = True
    low_open: bool = False  # the low end itself is not taken (epochs: above 0)

    def span(self) -> str:
        """`a whole number from 1 to 4096`, `a number above 0, at most 10000`, `a number of 0 or more`."""
        kind = "a whole number" if self.whole else "a number"
        low, high = f"{self.low:g}", f"{self.high:.0f}" if self.whole else f"{self.high:g}"
        if self.high == math.inf:
            return f"{kind} of {low} or more"
        return f"{kind} above {low}, at most {high}" if self.low_open else f"{kind} from {low} to {high}"


BATCH_SIZE = Bounds("batch size", 1, MAX_BATCH)
SEQ_LEN = Bounds("sequence length", 1, MAX_SEQ_LEN)
TRAIN_SAMPLES = Bounds("number of training samples", 1, MAX_SAMPLES)
STEPS = Bounds("number of steps", 1, MAX_STEPS)
EPOCHS = Bounds("number of epochs", 0, MAX_EPOCHS, whole=False, low_open=True)
LORA_RANK = Bounds("LoRA rank", 1, MAX_LORA_RANK)
SLOWDOWN = Bounds("slowdown limit", 0, whole=False)  # a percentage: any finite one of 0 or more
# the Sweep form's
WARMUP_STEPS = Bounds("number of warm-up steps", 0, MAX_WARMUP_STEPS)
POINT_STEPS = Bounds("number of steps", 1, MAX_POINT_STEPS)
REPEATS = Bounds("number of repeats", 1, MAX_SWEEP_REPEATS)


def read_number(text: str, bounds: Bounds) -> float:
    """The number `text` holds, read strictly and within `bounds` (an int when `bounds.whole`);
    InputError (a ConfigError) says what is wrong and what to write."""
    what = f"the {bounds.what}"
    try:
        value: float = parse_int(text, what) if bounds.whole else parse_float(text, what)
    except InputError as exc:
        if len(text.strip()) > MAX_NUMBER_CHARS:  # its remedy's "at most 64 digits" is no range of ours
            raise InputError(exc.what, f"give {bounds.span()}") from None
        raise
    if value < bounds.low or value > bounds.high or (bounds.low_open and value == bounds.low):
        shown_value = value if bounds.whole else f"{value:g}"
        raise InputError(f"{what} {shown_value} is out of range", f"give {bounds.span()}")
    return value


def check_number(text: str, bounds: Bounds, *, blank_ok: bool = False) -> str | None:
    """None when `text` is a number within `bounds` (or blank, with `blank_ok`), else the reason."""
    if not text.strip():
        return None if blank_ok else f"give the {bounds.what}: {bounds.span()}"
    try:
        read_number(text, bounds)
    except InputError as exc:
        return f"{exc.what}; {exc.remedy}"
    return None


def check_slowdown(text: str) -> str | None:
    """A percentage, `%` optional; blank: no limit."""
    return check_number(text.strip().rstrip("%"), SLOWDOWN, blank_ok=True)


def check_lora_rank(text: str) -> str | None:
    return check_number(text, LORA_RANK)


def check_amount(text: str, unit: str) -> str | None:
    return check_number(text, STEPS if unit == "steps" else EPOCHS)


@dataclass(frozen=True)
class SetupValues:
    """What the setup form holds, as typed."""

    model: str = "bert-tiny"
    task: str = "sst2"
    data: str = "synthetic"
    policy: str = "static:gpu=816"
    objective: str = "energy"
    slowdown: str = ""
    amount: str = "100"
    unit: str = "steps"  # steps | epochs
    batch_size: str = ""
    seq_len: str = ""
    precision: str = "default"
    mode: str = "full"
    lora_rank: str = "8"  # mode lora only
    train_samples: str = ""
    compare: bool = True
    simulate: bool = False

    def errors(self) -> dict[str, str]:
        """Field name -> reason, for every field that does not check."""
        shape = self.shape_errors()
        checks: Mapping[str, str | None] = {
            "model": check_model(self.model),
            "data": check_data(self.data),
            "policy": check_policy(self.policy),
            "objective": check_objective(self.objective),
            "slowdown": check_slowdown(self.slowdown) or _slowdown_conflict(self.objective, self.slowdown),
            "amount": check_amount(self.amount, self.unit),
            "batch_size": shape.get("batch_size"),
            "seq_len": shape.get("seq_len"),
            "train_samples": check_number(self.train_samples, TRAIN_SAMPLES, blank_ok=True),
            "lora_rank": shape.get("lora_rank"),
        }
        return {k: v for k, v in checks.items() if v}

    def shape_errors(self) -> dict[str, str]:
        """Field name -> reason, for the workload's shape (what the Sweep page takes from Setup)."""
        checks = {
            "batch_size": check_number(self.batch_size, BATCH_SIZE, blank_ok=True),
            "seq_len": check_number(self.seq_len, SEQ_LEN, blank_ok=True),
            "lora_rank": check_lora_rank(self.lora_rank) if self.mode == "lora" else None,
        }
        return {k: v for k, v in checks.items() if v}


def _slowdown_conflict(objective: str, slowdown: str) -> str | None:
    if slowdown.strip() and "@" in objective:
        return "the objective already names a slowdown limit (@N%): clear one of them"
    return None


def workload_spec(values: SetupValues):  # -> engine.workload.spec.WorkloadSpec
    """The workload the form describes (blank fields: the zoo's defaults; Setup pads dynamically; its loop is
    its run's: run_loop); InputError or ConfigError for a field that holds none."""
    from engine.core.constants import DEFAULT_PADDING, parse_mode, parse_precision
    from engine.workload.spec import WorkloadSpec

    # the form's selects hold texts: parsed here, once, into the fixed sets
    return WorkloadSpec(model=values.model.strip(), task=values.task, batch_size=int_or_none(values.batch_size),
                        seq_len=int_or_none(values.seq_len),
                        precision=None if values.precision == "default" else parse_precision(values.precision),
                        mode=parse_mode(values.mode),
                        lora=lora_settings(values), padding=DEFAULT_PADDING, loop=run_loop(values),
                        data=values.data.strip())


def run_loop(values: SetupValues):  # -> engine.workload.trace.loop.Loop
    """The training loop Setup's run runs: lean where it trains, hf where it is simulated (default_loop)."""
    from engine.workload.trace.loop import default_loop

    return default_loop(trains=not values.simulate)


def workload_key(values: SetupValues) -> tuple[str, str]:
    """What the selector's choice depends on: the store's key of the form's workload (WorkloadSpec.key) and
    its objective; a preview asked for another is stale. Fields that name no workload yet key by their text."""
    try:
        key = workload_spec(values).key
    except (SlmDvfsError, ValueError):
        key = "|".join((values.model.strip().lower(), values.task, values.batch_size.strip(), values.seq_len.strip(),
                        values.precision, values.mode, values.lora_rank.strip() if values.mode == "lora" else ""))
    return key, objective_text(values)


def policy_needs(policy: str) -> str | None:
    """What a policy needs before it can run: "sweep" (oracle: a recorded sweep of the
    workload on this device), "selector" (ml: a trained selector), or None (the others;
    `online` profiles during the run itself)."""
    name = policy.strip().lower().split(":", 1)[0]
    return {"oracle": "sweep", "ml": "selector"}.get(name)


def objective_text(values: SetupValues) -> str:
    limit = values.slowdown.strip().rstrip("%").strip()
    return f"{values.objective.strip()}@{limit}%" if limit else values.objective.strip()


def int_or_none(text: str) -> int | None:
    """A checked field's whole number (None: blank); InputError for text that is none."""
    return parse_int(text, "the number") if text.strip() else None


def steps_for(values: SetupValues) -> int:
    """The step count: as typed, or epochs over the training set at the batch size."""
    if values.unit == "steps":
        return parse_int(values.amount, "the number of steps")
    from engine.workload.glue import get_task

    task = get_task(values.task)
    n_train = int_or_none(values.train_samples)
    if n_train is None:
        n_train = min(task.train_size, SYNTHETIC_TRAIN_MAX) if values.data == "synthetic" else task.train_size
    batch = int_or_none(values.batch_size)
    if batch is None:
        entry = next((n for n in zoo_names() if n.lower() == values.model.strip().lower()), None)
        if entry is not None:
            from engine.workload.zoo import get_entry

            batch = get_entry(entry).batch_size
        else:
            batch = DEFAULT_BATCH_SIZE
    return max(1, math.ceil(parse_float(values.amount, "the number of epochs") * n_train / batch))


def build_spec(values: SetupValues, *, twin_profile: str | None, is_twin: bool):  # -> ExperimentSpec
    """The experiment the form describes, on the open device; ConfigError names the first bad field."""
    from engine.run.experiment import ExperimentSpec

    errors = values.errors()
    if errors:
        field, why = next(iter(errors.items()))
        raise ConfigError(f"{label_of(field)}: {why}", "fix the fields marked in red")
    if values.simulate and not is_twin:
        raise ConfigError("simulate runs on the digital twin only", "untick simulate on a board")
    steps = steps_for(values)
    if steps > MAX_STEPS:  # epochs within their bound can still come to more steps than any run takes
        raise ConfigError(f"{label_of('amount')}: {values.amount.strip()} epochs are {steps} steps, more than "
                          f"{MAX_STEPS}", "give fewer epochs, a larger batch size or fewer train samples")
    spec = ExperimentSpec(
        workload=workload_spec(values), policy=values.policy.strip(), objective=objective_text(values),
        compare="maxn" if values.compare else None, steps=steps, train_samples=int_or_none(values.train_samples),
        eval_samples=None, twin=twin_profile if is_twin else None, simulate=values.simulate, label="tui",
    )
    spec.validate()
    return spec


_WORKLOAD_FIELDS = ("batch_size", "seq_len", "precision", "mode", "lora", "grad_checkpointing", "padding", "loop",
                    "seed")


def sweep_spec(model: str, task: str, fields: Mapping, **sweep):  # -> engine.run.sweep.SweepSpec
    """The Sweep form's sweep of `model` on `task`: of `fields` (the Sweep page's workload(): the form's
    workload, or an opened sweep's with what makes it that sweep), those of the workload go into its
    WorkloadSpec, the others are the sweep's own, as `sweep` (space, steps, fast, twin...) is."""
    from engine.run.sweep import SweepSpec
    from engine.workload.spec import WorkloadSpec

    rest = dict(fields)
    if "max_seq_len" in rest:
        rest["seq_len"] = rest.pop("max_seq_len")
    setup_loop = rest.pop("setup_loop", None)
    workload = {name: rest.pop(name) for name in _WORKLOAD_FIELDS if name in rest}
    if "loop" not in workload:  # an opened sweep's loop stays its own (SweepSpec.validate checks it)
        workload["loop"] = sweep_loop(setup_loop, fast=bool(sweep.get("fast", rest.get("fast", False))))
    return SweepSpec(workload=WorkloadSpec(model=model, task=task, **workload), **rest, **sweep)


def sweep_loop(setup_loop, *, fast: bool):  # -> engine.workload.trace.loop.Loop
    """The loop of a sweep of Setup's workload: a sweep that trains runs the default of one that trains
    (lean); a fast one the twin computes takes Setup's run's loop (`setup_loop`, what that run's oracle
    looks its sweeps up by), else the default of the twin alone (default_loop)."""
    from engine.workload.trace.loop import default_loop

    return setup_loop if fast and setup_loop is not None else default_loop(trains=not fast)


def lora_settings(values: SetupValues):  # -> LoraSettings | None
    from engine.workload.lora import LoraSettings

    return LoraSettings(rank=parse_int(values.lora_rank, "the LoRA rank")) if values.mode == "lora" else None

