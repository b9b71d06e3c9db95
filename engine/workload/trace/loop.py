"""The host side of the training loop a workload runs in: what its step costs the CPU beyond the model.

A step trace counts the model's work: FLOPs, bytes and kernel launches, and the host work of
dispatching its operators (`host_cycles`, which includes the lean loop's own small per-step and
per-sample work). Which loop drives those steps changes what the host does around them, and on a
Jetson's Cortex-A78AE cores that is a large part of a small model's step (docs/twin.md, "The
training loop's host side"):

- `hf`: a Hugging Face Trainer-style loop, as the published Orin fine-tuning runs used (dynamic
  padding, `dataloader_num_workers=0`). Each step the main process reads its batch's rows from the
  Arrow table and pads them (DataCollatorWithPadding), moves them to the device, runs the Trainer's
  per-step Python (callbacks, the accelerator's backward and gradient clipping, the scheduler,
  zero_grad) and reads the loss back to check it for NaN/inf (`logging_nan_inf_filter`, on by
  default), which waits for the GPU: the next batch is collated while the GPU idles. That work is
  the trace's `serial_cycles`.
- `lean`: slm-dvfs's own loop (engine/workload/training): batches pre-tokenised and padded in
  tensors, the loss read back only when logged; its host work is the trace's `host_cycles` alone.

Which loop a workload names is the loop that runs (`default_loop`, `check_loop_for`: the one rule, used by
the CLI, the TUI, the fleet and the run and sweep specs): a run that trains runs slm-dvfs's own loop, so
it is `lean` and cannot be `hf`; where only the twin computes the steps (a simulated run, a fast sweep,
`select`) either loop can be modelled, and `hf`, the published runs' loop, is the default. A workload's
key names the loop only when it is not `lean` (`|loop=hf`): every row stored before the loop was recorded
ran the lean loop (a trained run) or was computed by a twin that modelled no Trainer host work.

The cycle counts are estimates for an A78AE core (about 2.2 GHz) running CPython 3.10 and PyTorch
2.x, of the order that profiles of the Trainer on ARM cores show; `slm-dvfs calibrate` moves the
twin's CPU numbers against a board's measurements of a small, host-bound model.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Literal

from engine.core.errors import ConfigError, UnknownChoiceError
from engine.core.trace import StepTrace

Loop = Literal["hf", "lean"]
LOOPS: tuple[Loop, ...] = ("hf", "lean")
# The loop a workload is when none is named: slm-dvfs's own, the one its training runs. A key leaves it
# unsaid (WorkloadSpec.key), so the keys and the meaning of rows stored before the loop was recorded stay.
DEFAULT_LOOP: Loop = "lean"
# The published Orin runs' loop: the default where only the twin computes the steps.
TWIN_LOOP: Loop = "hf"

# hf, per step: the Trainer's Python around a step (training_step, the accelerator's backward and
# clip_grad_norm_, optimizer and scheduler steps, zero_grad, callbacks, the loss check's sync),
# ~45 ms at 2.2 GHz. Calibrated to reproduce the published fact that BERT-tiny's step hardly moves
# with the GPU clock on an AGX Orin (docs/twin.md, "What it reproduces"); a board's own figure comes
# from `slm-dvfs calibrate` (cpu.serial_scale).
HF_CYCLES_PER_STEP = 100_000_000
# hf, per sample: one row read from the Arrow table into Python and padded by the collator, ~0.18 ms.
HF_CYCLES_PER_SAMPLE = 400_000
# hf, per token of the padded batch: building and copying the padded tensors, ~0.2 us per token.
HF_CYCLES_PER_TOKEN = 400


def parse_loop(value: object) -> Loop:
    """A loop name from the CLI, a form or a stored row; anything else names the choices."""
    if value == "hf":
        return "hf"
    if value == "lean":
        return "lean"
    raise UnknownChoiceError("training loop", value, LOOPS)


def default_loop(trains: bool) -> Loop:
    """The loop a command runs when none is asked for: lean where it trains (the only loop slm-dvfs trains
    with), hf where only the twin computes its steps (a simulated run, a fast sweep, select)."""
    return DEFAULT_LOOP if trains else TWIN_LOOP


def check_loop_for(trains: bool, loop: Loop) -> None:
    """A ConfigError when a run that trains names a loop it would not run (the key would lie about it)."""
    if trains and loop != DEFAULT_LOOP:
        raise ConfigError(f"--loop {loop} on a run that trains: slm-dvfs trains with its own loop ({DEFAULT_LOOP})",
                          f"slm-dvfs trains with its own loop: drop --loop {loop} (or give --loop {DEFAULT_LOOP}); "
                          f"a Trainer-style loop is modelled by the twin only (use --simulate, --fast or select)")


def loop_for(trains: bool, asked: Loop | None) -> Loop:
    """The loop a command runs: the one asked for (checked against whether it trains), else the default."""
    if asked is None:
        return default_loop(trains)
    check_loop_for(trains, asked)
    return asked


def loop_serial_cycles(loop: Loop, batch_size: int, seq_len: int) -> float:
    """CPU cycles per step of the loop's own work that the GPU waits for (0 for the lean loop)."""
    if loop == "lean":
        return 0.0
    return float(HF_CYCLES_PER_STEP + HF_CYCLES_PER_SAMPLE * batch_size + HF_CYCLES_PER_TOKEN * batch_size * seq_len)


def with_loop(trace: StepTrace, loop: Loop) -> StepTrace:
    """The step as `loop` runs it: the model's work unchanged, the loop's serial host work set."""
    return replace(trace, serial_cycles=loop_serial_cycles(loop, trace.batch_size, trace.seq_len))
