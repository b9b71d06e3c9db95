"""Checkpoint files and RNG state: what a resumed run needs to continue bit-for-bit.

A run folder holds `step-NNNNNNN/state.pt` folders and a `latest` file naming the newest;
each state holds model, optimizer, scheduler and scaler states, the run's counters and
the Python, NumPy and torch RNG states.
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import torch

from engine.core.errors import ConfigError

CHECKPOINT_FILE = "state.pt"
LATEST_FILE = "latest"
FORMAT = 1


def save_checkpoint(root: str | Path, step: int, state: dict[str, Any], *, keep: int = 2) -> Path:
    """Write `state` (plus the RNG states) as `root/step-NNNNNNN/state.pt` atomically, point
    `latest` at it and keep the newest `keep` checkpoints; returns the checkpoint folder."""
    root = Path(root)
    target = root / f"step-{step:07d}"
    tmp = root / f".step-{step:07d}.tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    torch.save({"format": FORMAT, **state, "rng": rng_state()}, tmp / CHECKPOINT_FILE)
    if target.exists():
        shutil.rmtree(target)
    tmp.rename(target)
    (root / LATEST_FILE).write_text(target.name + "\n")
    for old in sorted(root.glob("step-*"))[:-max(1, keep)]:
        shutil.rmtree(old, ignore_errors=True)
    return target


def load_state(where: str | Path, fingerprint: Mapping[str, Any]) -> tuple[Path, dict[str, Any]]:
    """The checkpoint in `where`, checked against the run's `fingerprint`, with the RNG states
    restored; returns (file, state)."""
    path = find_checkpoint(where)
    # Our own file; it holds numpy and Python RNG states, which weights_only refuses.
    state = torch.load(path, map_location="cpu", weights_only=False)
    theirs = dict(state.get("fingerprint", {}))
    differ = sorted(k for k in fingerprint if theirs.get(k) != fingerprint[k])
    if differ:
        detail = ", ".join(f"{k}: checkpoint {theirs.get(k)!r} vs now {fingerprint[k]!r}" for k in differ)
        raise ConfigError(f"checkpoint {path} belongs to a different run ({detail})",
                          "resume with the same model, task, seed, batch size and steps as the "
                          "checkpointed run, or start without --resume")
    set_rng_state(state["rng"])
    return path, state


def find_checkpoint(where: str | Path) -> Path:
    """The checkpoint file in `where`: a checkpoint folder, or a run folder's latest."""
    path = Path(where)
    if path.is_file():
        return path
    if (path / CHECKPOINT_FILE).is_file():
        return path / CHECKPOINT_FILE
    latest = path / LATEST_FILE
    if latest.is_file():
        candidate = path / latest.read_text().strip() / CHECKPOINT_FILE
        if candidate.is_file():
            return candidate
    found = sorted(path.glob(f"step-*/{CHECKPOINT_FILE}"))
    if found:
        return found[-1]
    raise ConfigError(f"no checkpoint in {path}",
                      "give the --checkpoint-dir of an earlier run (it holds step-NNNNNNN folders)")


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: Mapping[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
