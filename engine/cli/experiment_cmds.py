"""`slm-dvfs run | sweep | report`: experiments from the command line.

Progress goes to stderr (one `\\r`-redrawn line); the result, or with --json one JSON
object, goes to stdout. The first Ctrl-C stops at the next step boundary (the run is
recorded as cancelled), a second one aborts; either way the clock guard restores the
clocks, and a sweep resumes where it stopped when the same command runs again.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping, TextIO, TypeVar, Union

from engine.core.text import clean_text
from engine.cli import numbers
from engine.core.constants import PRECISIONS
from engine.cli.device_cmds import add_device_args
from engine.cli.interrupt import cancel_on_sigint
from engine.cli.mode_args import add_mode_args, describe_mode, workload_spec
from engine.cli.store_cmds import add_db_arg
from engine.results.compare import SIGN_CONVENTION
from engine.results.format import board_estimate_text, rail_savings_text, sweep_point_lines, versus_text

if TYPE_CHECKING:
    from engine.core.jsontypes import JsonValue
    from engine.results.store import Store
    from engine.run.events import Event, StepEnergy
    from engine.run.experiment import ExperimentResult, ExperimentSpec
    from engine.run.sweep import SweepResult, SweepSpec
    from engine.workload.resolve import Workload

Result = TypeVar("Result", "ExperimentResult", "SweepResult")  # what _execute's runner returns

REDRAW_S = 0.1


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "run", help="fine-tune under a DVFS policy (optionally also under the board's uncapped mode, MAXN or "
        "MAXN_SUPER, to compare)",
        description="Fine-tune a model on a GLUE task under a DVFS policy; with --compare maxn also under "
        "the board's uncapped mode (MAXN, mode 0, on an AGX Orin; MAXN_SUPER on an Orin Nano / NX, found by name) "
        "with the same seed, data order and steps. Reports energy (total and per rail), time, "
        "power, samples/s, J/sample, the eval metric, and the saving and slowdown; every figure labelled "
        "measured (board) or twin. Everything is recorded in the results store.",
    )
    _workload_args(p)
    p.add_argument("--policy", default="maxn",
                   help="maxn | maxn-pinned | mode:N | static:gpu=MHz[,cpu=..][,emc=..] | oracle | online | ml "
                   "(default maxn)")
    p.add_argument("--objective", default="energy", help="energy | energy@5%% | edp | eta:0.5 (default energy)")
    p.add_argument("--compare", choices=("maxn",), help="also run the baseline, the board's uncapped mode found by "
                   "name (MAXN on an AGX Orin, MAXN_SUPER on an Orin Nano / NX), and report the saving")
    p.add_argument("--reuse-baseline", action="store_true",
                   help="with --compare maxn: reuse a stored MAXN run of the same workload, device, steps and seed")
    p.add_argument("--steps", type=numbers.steps, default=100, metavar="N", help="training steps per run (default 100)")
    p.add_argument("--simulate", action="store_true",
                   help="twin only: no training, each step just advances the twin (fast; no eval metric)")
    p.add_argument("--label", help="free text stored with the run")
    p.add_argument("--output-dir", metavar="DIR",
                   help="save the policy run's trained model here (--mode lora: its adapter in peft's format; "
                        "default for lora: a new folder under the data directory)")
    p.add_argument("--trust", action="store_true",
                   help="--policy ml:PATH: load a selector from outside the trusted folders (unpickling runs code)")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser(
        "sweep", help="measure a workload at every setting of a space (resumable)",
        description="Each setting runs W unmeasured then S measured steps; repetitions give a mean and a 95% "
        "confidence interval. A thermal guard waits before a point on a hot board and aborts on an "
        "overheating one. Interrupted sweeps resume where they stopped. --fast (twin only) computes every "
        "point from the step trace without training.",
    )
    _workload_args(p)
    p.add_argument("--space", choices=("gpu", "gpu+emc", "full", "modes"), default="gpu",
                   help="which settings (default gpu: every GPU step, CPU and EMC on their governors)")
    p.add_argument("--warmup-steps", type=numbers.warmup_steps, default=1, metavar="W", help="unmeasured steps per point (default 1)")
    p.add_argument("--steps", type=numbers.point_steps, default=5, metavar="S", help="measured steps per point (default 5)")
    p.add_argument("--repeats", type=numbers.sweep_repeats, default=1, metavar="R", help="repetitions of the space (default 1)")
    p.add_argument("--cpu-stride", type=numbers.int_range(1, 1000), default=4, metavar="K", help="--space full: every K-th CPU step")
    p.add_argument("--fast", action="store_true", help="twin only: compute points from the step trace, no training")
    p.add_argument("--objective", default="energy", help="how the optimum is chosen (default energy)")
    p.set_defaults(func=cmd_sweep)

    p = sub.add_parser("report", help="write a Markdown report with PNG figures for a sweep (sN) or run (N)")
    p.add_argument("id", metavar="ID", help="sweep id as sN (e.g. s3), or run id as N or rN (`slm-dvfs runs`)")
    p.add_argument("--out", metavar="DIR",
                   help="folder for the report (default DATA_DIR/reports; the path is printed)")
    p.add_argument("--objective", default="energy", help="sweep reports: how the optimum is chosen")
    add_db_arg(p)
    p.set_defaults(func=cmd_report)


def _workload_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", type=numbers.model, required=True, metavar="NAME", help="zoo name (e.g. bert-tiny, pythia-410m), hub id or folder")
    p.add_argument("--task", required=True, metavar="TASK", help="GLUE task, e.g. sst2, mnli")
    p.add_argument("--batch-size", type=numbers.batch_size, metavar="B", help="default: the zoo entry's")
    p.add_argument("--max-seq-len", type=numbers.seq_len, metavar="L", help="default: the zoo entry's")
    p.add_argument("--precision", choices=PRECISIONS, help="default: the zoo entry's")
    add_mode_args(p)
    numbers.add_pad_argument(p)
    numbers.add_loop_argument(p)
    p.add_argument("--seed", type=numbers.seed, default=0, metavar="S", help="seed of weights, data and order (default 0)")
    p.add_argument("--data", default="synthetic", metavar="synthetic|hub|DIR", help="where the text comes from")
    p.add_argument("--train-samples", type=numbers.samples, metavar="N", help="training examples to use")
    p.add_argument("--eval-samples", type=numbers.samples, metavar="N", help="evaluation examples per split")
    p.add_argument("--rails", default="all", help="rails the energy total is over: all | gpu+cpu (default all)")
    p.add_argument("--thermal", action="store_true", help="twin: model temperatures (heat-up and cool-down)")
    p.add_argument("--thermal-wait-c", type=numbers.celsius, metavar="C", help="wait before a point above C (default 75)")
    p.add_argument("--thermal-abort-c", type=numbers.celsius, metavar="C", help="abort above C (default 85)")
    p.add_argument("--thermal-cooldown-c", type=numbers.celsius, metavar="C", help="waiting ends at C (default 65)")
    p.add_argument("--thermal-poll-s", type=numbers.float_range(0.0, 3600.0, low_open=True), metavar="S", help="temperature poll while waiting (default 5)")
    p.add_argument("--json", action="store_true",
                   help=f"print the result as one JSON object (its percentages signed: {SIGN_CONVENTION})")
    add_device_args(p)
    add_db_arg(p)


def _thermal_overrides(args: argparse.Namespace) -> tuple[tuple[str, float], ...]:
    pairs = (("wait_c", args.thermal_wait_c), ("abort_c", args.thermal_abort_c),
             ("cooldown_c", args.thermal_cooldown_c), ("poll_s", args.thermal_poll_s))
    return tuple((k, float(v)) for k, v in pairs if v is not None)


def _store(args: argparse.Namespace, create: bool = True) -> Store:
    from engine.results.store import Store

    return Store(Path(args.db) if args.db else None, create=create)


# --- run ----------------------------------------------------------------------------------------
def experiment_spec(args: argparse.Namespace) -> ExperimentSpec:
    from engine.run.experiment import ExperimentSpec

    return ExperimentSpec(
        workload=workload_spec(args, trains=not args.simulate), policy=args.policy, objective=args.objective, compare=args.compare,
        reuse_baseline=args.reuse_baseline, steps=args.steps, train_samples=args.train_samples,
        eval_samples=args.eval_samples, twin=args.twin, sysfs_root=args.sysfs_root, rails=args.rails,
        simulate=args.simulate, thermal=args.thermal, thermal_overrides=_thermal_overrides(args), label=args.label,
        output_dir=args.output_dir,
    )


def cmd_run(args: argparse.Namespace) -> int:
    from functools import partial

    from engine.run.experiment import run_experiment
    from engine.selector import policy_factory

    # Every policy the run may ask for, `ml` included (the selector loads only when `ml` runs):
    # built by this client, handed down to the harness, as the TUI does.
    runner = partial(run_experiment, policies=policy_factory())
    result = _execute(args, experiment_spec(args), runner, format_experiment)
    return 130 if result.cancelled else 0


def _execute(args: argparse.Namespace, spec: Union[ExperimentSpec, SweepSpec], runner: Callable[..., Result],
             formatter: Callable[[Result], str]) -> Result:
    """Validate, run with progress and a graceful Ctrl-C, print text or JSON; returns the result."""
    from engine.workload.training.loop import TrainControl

    spec.validate()
    control = TrainControl()
    progress = Progress(sys.stderr)
    with _store(args) as store, cancel_on_sigint(control):
        result = runner(spec, store=store, callbacks=[progress], control=control)
    progress.end()
    if args.json:
        json.dump(result.to_json(), sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(clean_text(formatter(result)))
    return result


def _seq(workload: Workload, twin_only: bool) -> str:
    """The workload's length: the maximum; with dynamic padding on a twin-only path, also the mean
    length its steps pad to under the task's published lengths (a trained run pads to its data's)."""
    mix = getattr(workload, "mix", None)
    if getattr(workload, "padding", "max_length") != "dynamic":
        return str(workload.seq_len)
    if not twin_only or mix is None:
        return f"<={workload.seq_len}, padded per batch"
    return f"<={workload.seq_len}, padded per batch to {mix.expected_seq_len:.0f} on average [published lengths]"


def format_experiment(result: ExperimentResult) -> str:
    """The result as text; every figure carries its source label."""
    src = result.source.value
    run, base, cmp_ = result.run, result.baseline, result.comparison
    w = result.workload
    ident = result.identity
    kind = f"digital twin {ident.profile}" if ident.is_twin else "board"
    mode = describe_mode(w.mode, w.lora, w.grad_checkpointing, w.family)
    lines = [f"{w.model} on {w.task} (batch {w.batch_size}, seq {_seq(w, result.simulated)}, {w.precision}, {mode}"
             f"{_loop_suffix(w)}) "
             f"on {ident.board} [{kind}]" + ("  SIMULATED (no training)" if result.simulated else "")
             + ("  [cancelled]" if result.cancelled else "")]
    lines.append(f"energy total over rails: {run.rails_preset} = {' + '.join(run.rails)}")
    # the baseline by its mode's real name and id: MAXN (mode 0) on an AGX Orin, MAXN_SUPER (mode 2) on an Orin Nano
    base_head = f"{base.mode_label}{' (reused)' if base.reused else ''}" if base is not None else ""
    cols = [("", 22), (f"policy {run.policy}", 26)] + ([(base_head, max(24, len(base_head) + 2))]
                                                      if base is not None else [])

    def row(name: str, fmt: str, key: str) -> str:
        cells = [name.ljust(22), _fmt(getattr(run, key), fmt).rjust(26)]
        if base is not None:
            cells.append(_fmt(getattr(base, key), fmt).rjust(cols[2][1]))
        return "".join(cells) + f"  [{src}]"

    lines.append("".join(h.ljust(n) if i == 0 else h.rjust(n) for i, (h, n) in enumerate(cols)))
    lines.append(row("run id", "d", "run_id").rsplit("  [", 1)[0])
    lines.append(row("time (s)", ".3f", "time_s"))
    lines.append(row("energy (J)", ".2f", "energy_j"))
    for rail in run.rail_energy_j:
        cells = [f"  {rail}".ljust(22), _fmt(run.rail_energy_j.get(rail), ".2f").rjust(26)]
        if base is not None:
            cells.append(_fmt(base.rail_energy_j.get(rail), ".2f").rjust(cols[2][1]))
        lines.append("".join(cells) + f"  [{src}]")
    lines.append(row("average power (W)", ".2f", "avg_power_w"))
    lines.append(row("samples/s", ".2f", "samples_per_s"))
    lines.append(row("J/sample", ".4f", "joules_per_sample"))
    if result.simulated:
        lines.append("eval metric".ljust(22) + "none (simulated)".rjust(26))
    elif run.metric is not None:
        cells = [f"{run.metric} (eval)".ljust(22), _fmt(run.metric_value, ".4f").rjust(26)]
        if base is not None:
            cells.append(_fmt(base.metric_value, ".4f").rjust(cols[2][1]))
        tag = run.metric_provenance.tag(run.source)
        if base is not None and base.metric_provenance.tag(base.source) != tag:  # e.g. a reused, older baseline
            tag += f"; MAXN {base.metric_provenance.tag(base.source)}"
        lines.append("".join(cells) + f"  {tag}")
    if run.setting is not None:
        lines.append(f"setting (last applied): {run.setting.label()}")
    if len(run.history) > 1:
        lines.append(f"  {len(run.history)} settings applied during the run (profiling included in its figures)")
    predicted = (run.detail or {}).get("predicted")
    if predicted:  # what the policy expected before the run (the ml policy's choice), with its interval
        lines.append(f"policy's prediction: {predicted}")
    if cmp_ is not None:
        than = base.mode_label if base is not None else "MAXN"
        lines.append(f"{versus_text(cmp_.saving_pct, cmp_.slowdown_pct, than=than)}   [{cmp_.source.value}]")
        if cmp_.rail_saving_pct:
            lines.append(f"  energy per rail vs {than}: {rail_savings_text(cmp_.rail_saving_pct)}")
        if cmp_.interval is not None:  # the engine's, computed once (also in --json and the TUI)
            lines.append(f"  {board_estimate_text(cmp_.saving_pct, cmp_.interval, base.mode_name if base else 'MAXN')}")
    for wait in _thermal_waits(result.thermal):
        lines.append(f"thermal: waited {wait['waited_s']:.0f} s for {wait['zone']} to cool from "
                     f"{wait['start_c']:.1f} to {wait['end_c']:.1f} degC" + (" (twin time)" if wait["simulated"] else ""))
    for note in result.notes:
        lines.append(f"note: {note}")
    lines.append(f"recorded: run {run.run_id}" + (f", baseline run {base.run_id}" if base is not None else "")
                 + (f", comparison {cmp_.record_id}" if cmp_ is not None and cmp_.record_id else "")
                 + f"  (`slm-dvfs report {run.run_id}`)")
    return "\n".join(lines) + "\n"


def _thermal_waits(thermal: Mapping[str, JsonValue]) -> list[Mapping[str, JsonValue]]:
    """The thermal guard's waits in a result's thermal notes (ThermalGuard.describe: none in fast mode)."""
    waits = thermal.get("waits")
    return [w for w in waits if isinstance(w, Mapping)] if isinstance(waits, list) else []


def _mode_suffix(w: Workload) -> str:
    """A sweep's workload line names the mode when it is not plain full fine-tuning."""
    if w.mode == "full" and not w.grad_checkpointing:
        return ""
    return ", " + describe_mode(w.mode, w.lora, w.grad_checkpointing, w.family)


def _loop_suffix(w: Workload) -> str:
    """A workload line always names its training loop (`, lean loop`): which one a command runs by default
    depends on whether it trains (engine.workload.trace.loop.default_loop), so none goes unsaid."""
    return f", {w.loop} loop"


def _fmt(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


# --- sweep --------------------------------------------------------------------------------------
def sweep_spec(args: argparse.Namespace) -> SweepSpec:
    from engine.run.sweep import SweepSpec

    return SweepSpec(
        workload=workload_spec(args, trains=not args.fast), space=args.space, warmup_steps=args.warmup_steps, steps=args.steps,
        repeats=args.repeats, fast=args.fast, train_samples=args.train_samples,
        eval_samples=args.eval_samples if args.eval_samples is not None else 8, twin=args.twin,
        sysfs_root=args.sysfs_root, rails=args.rails, cpu_stride=args.cpu_stride, objective=args.objective,
        thermal=args.thermal, thermal_overrides=_thermal_overrides(args),
    )


def cmd_sweep(args: argparse.Namespace) -> int:
    from engine.run.sweep import run_sweep

    result = _execute(args, sweep_spec(args), run_sweep, format_sweep)
    return 0 if result.complete else 130


def format_sweep(result: SweepResult) -> str:
    from engine.core.provenance import obtained

    src = result.source.value
    w = result.workload
    lines = [f"sweep s{result.sweep_id}: {w.model} on {w.task} (batch {w.batch_size}, seq {_seq(w, result.spec.fast)}, "
             f"{w.precision}{_mode_suffix(w)}{_loop_suffix(w)}) on {result.identity.board}"
             + (f" [digital twin {result.identity.profile}]" if result.identity.is_twin else " [board]")
             + f"  {result.status}"]
    where = "on the twin" if result.identity.is_twin else "on the board"  # the twin computes, a board measures
    lines.append(f"{result.settings} settings x {result.spec.repeats} repeat(s): {result.measured} "
                 f"{obtained(result.source)} now {where}, "
                 f"{result.resumed} resumed from the store; energy over {result.spec.rails} = {' + '.join(result.rails)}"
                 + ("; fast mode (computed from the step trace)" if result.spec.fast else ""))
    than = result.baseline.label if result.baseline is not None else "MAXN"
    base_name = result.baseline.name if result.baseline is not None else "MAXN"
    lines += sweep_point_lines(result.points, result.optimum, result.maxn, src, base_name)
    if result.optimum is not None:
        lines.append(f"optimum ({result.spec.objective}): {result.optimum.setting.label()}  [{src}]")
        vs_maxn = result.vs_maxn  # the engine's, computed once (also in --json and the TUI)
        if vs_maxn is not None:
            lines.append(f"  {versus_text(vs_maxn.saving_pct, vs_maxn.slowdown_pct, than=than)} "
                         f"per sample  [{src}]")
            if vs_maxn.interval is not None:
                lines.append(f"  {board_estimate_text(vs_maxn.saving_pct, vs_maxn.interval, base_name)}")
    for wait in _thermal_waits(result.thermal):
        lines.append(f"thermal: waited {wait['waited_s']:.0f} s before {wait['label']}")
    if not result.complete:
        lines.append("the sweep stopped early: run the same command again to resume it")
    lines.append(f"report: slm-dvfs report s{result.sweep_id}")
    return "\n".join(lines) + "\n"


# --- report -------------------------------------------------------------------------------------
def cmd_report(args: argparse.Namespace) -> int:
    from engine.dvfs.objectives import parse_objective
    from engine.results.report import write_report

    from engine.results.report import parse_report_id

    with _store(args, create=False) as store:
        kind, number = parse_report_id(args.id)
        warning = store.get_run(number).status_warning if kind == "run" else None
        if warning:
            print(warning, file=sys.stderr)
        report = write_report(store, args.id, args.out, objective=parse_objective(args.objective))
    print(f"wrote {report.markdown}")
    for fig in report.figures:
        print(f"  figure {fig}")
    return 0


# --- progress -----------------------------------------------------------------------------------
class Progress:
    """Progress on stderr: one redrawn line on a terminal; whole lines, throttled, in a log."""

    LOG_EVERY_S = 5.0

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.tty = bool(getattr(stream, "isatty", lambda: False)())
        self.total = 0
        self.phase = ""
        self._last = -1e9
        self._open = False
        self._energy: StepEnergy | None = None  # the last StepEnergy (it comes just before its StepEnd)

    def __call__(self, event: Event) -> None:
        from engine.run.experiment import ExperimentPhase
        from engine.run.sweep import SweepPointDone
        from engine.run.thermal import ThermalWait
        from engine.workload.events import RunCancelled, RunStarted, StepEnd, StepEnergy

        if isinstance(event, ExperimentPhase):
            self.phase = f"{event.role} run ({event.policy}) {event.index}/{event.total}: "
        elif isinstance(event, RunStarted):
            self.total = event.total_steps
            self._energy = None
        elif isinstance(event, StepEnergy):
            self._energy = event
        elif isinstance(event, StepEnd):
            e = self._energy
            cost = f"  {e.total_energy_j:.3g} J/step [{e.source.value}]" if e is not None and e.step == event.step else ""
            self._status(f"{self.phase}step {event.step}/{self.total}{cost}", final=event.step >= self.total)
        elif isinstance(event, SweepPointDone):
            m = event.measurement
            self._status(f"point {event.index}/{event.total}: {event.setting.label()} (repeat {event.repeat + 1}) "
                         f"{m.joules_per_sample:.4g} J/sample [{m.source.value}]", final=event.index >= event.total)
        elif isinstance(event, ThermalWait):
            self.line(f"thermal: {event.zone} {event.start_c:.1f} -> {event.end_c:.1f} degC after "
                      f"{event.waited_s:.0f} s" + (" of twin time" if event.simulated else ""))
        elif isinstance(event, RunCancelled):
            self.line(f"stopped after step {event.step}: {event.reason}")

    def _status(self, text: str, final: bool = False) -> None:
        now = time.monotonic()
        if self.tty:
            if final or now - self._last >= REDRAW_S:
                self._last = now
                self.stream.write("\r\x1b[2K" + text)
                self.stream.flush()
                self._open = True
        elif final or now - self._last >= self.LOG_EVERY_S:
            self._last = now
            self.line(text)

    def line(self, text: str) -> None:
        self.end()
        self.stream.write(text + "\n")
        self.stream.flush()

    def end(self) -> None:
        if self._open:
            self.stream.write("\n")
            self.stream.flush()
            self._open = False


__all__ = ["register", "format_experiment", "format_sweep"]
