"""Checkpoint files and RNG state: what a resumed run needs to continue bit-for-bit.

A run folder holds `step-NNNNNNN/` folders and a `latest` file naming the newest. Each
checkpoint folder holds two files:

    meta.json   format, the run's fingerprint and counters, the Python and NumPy RNG states
    state.pt    tensors and plain containers only: model, optimizer, scheduler and scaler
                states, the torch (and CUDA) RNG states

Loading never unpickles code: `meta.json` is read and its fingerprint checked first, and
`state.pt` is then read with `torch.load(weights_only=True)`, which refuses anything but
tensors and plain containers. Checkpoints of the old single-file format (before format 2,
a full pickle) are refused rather than unpickled: they are from a finished run's folder and
a run is quick to restart, so there is no "trust" flag for them.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path
from typing import Mapping

import numpy as np
import torch

from engine.core.errors import ConfigError
from engine.core.jsontypes import as_float, as_int, as_list, as_object
from engine.core.userinput import load_json

CHECKPOINT_FILE = "state.pt"
META_FILE = "meta.json"
LATEST_FILE = "latest"
FORMAT = 2
MAGIC = "slm-dvfs-checkpoint"
RESTART = "start the run again without --resume (checkpoints of this slm-dvfs are resumable)"


def check_checkpoint_dir(root: str | Path) -> Path:
    """`root` made (if need be) and checked writable before a run starts, so a bad
    --checkpoint-dir fails at once rather than at the first checkpoint."""
    root = Path(root).expanduser()
    remedy = "give a --checkpoint-dir in a folder you can write, e.g. ./checkpoints"
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create the checkpoint folder {root}: {exc.strerror or exc}", remedy) from None
    if not root.is_dir() or not os.access(root, os.W_OK | os.X_OK):
        raise ConfigError(f"the checkpoint folder {root} is not a writable folder", remedy)
    return root


def save_checkpoint(root: str | Path, step: int, state: Mapping[str, object], *, keep: int = 2) -> Path:
    """Write `state` (plus the RNG states) as `root/step-NNNNNNN/` atomically, point
    `latest` at it and keep the newest `keep` checkpoints; returns the checkpoint folder.

    `state` holds "fingerprint" and the run's counters (JSON values, into meta.json) and
    "model", "optimizer", "scheduler", "scaler" (state dicts, into state.pt)."""
    root = Path(root)
    target = root / f"step-{step:07d}"
    tmp = root / f".step-{step:07d}.tmp"
    tensors: dict[str, object] = {k: state[k] for k in ("model", "optimizer", "scheduler", "scaler") if k in state}
    meta = {k: v for k, v in state.items() if k not in tensors}
    python_rng, numpy_rng, torch_rng = _rng_parts()
    tensors["rng"] = torch_rng
    meta.update({"magic": MAGIC, "format": FORMAT, "rng": {"python": python_rng, "numpy": numpy_rng}})
    try:
        tmp.mkdir(parents=True, exist_ok=True)
        torch.save(tensors, tmp / CHECKPOINT_FILE)
        (tmp / META_FILE).write_text(json.dumps(meta) + "\n")
        if target.exists():
            shutil.rmtree(target)
        tmp.rename(target)
        (root / LATEST_FILE).write_text(target.name + "\n")
    except OSError as exc:
        raise ConfigError(f"cannot write a checkpoint in {root}: {exc.strerror or exc}",
                          "free some space or give a writable --checkpoint-dir") from None
    for old in sorted(root.glob("step-*"))[:-max(1, keep)]:
        shutil.rmtree(old, ignore_errors=True)
    return target


def read_meta(path: Path) -> dict[str, object]:
    """The JSON half of the checkpoint whose state file is `path`, checked for our format."""
    meta_path = path.parent / META_FILE
    if not meta_path.is_file():
        raise ConfigError(
            f"{path} is not an slm-dvfs checkpoint of this version (no {META_FILE} beside it; "
            "an older slm-dvfs's checkpoint, or a foreign file, is not loaded: it could run code)", RESTART)
    try:
        text = meta_path.read_text()
    except (OSError, ValueError) as exc:
        raise ConfigError(f"the checkpoint metadata {meta_path} is unreadable ({exc})", RESTART) from None
    # load_json: a hostile file is an error of ours, never a RecursionError
    meta = load_json(text, f"the checkpoint metadata {meta_path} is unreadable: it", RESTART, finite=False)
    if not isinstance(meta, dict) or meta.get("magic") != MAGIC:
        raise ConfigError(f"{meta_path} is not slm-dvfs checkpoint metadata", RESTART)
    if meta.get("format") != FORMAT:
        raise ConfigError(f"{meta_path} is checkpoint format {meta.get('format')!r}; this slm-dvfs reads {FORMAT}",
                          RESTART)
    return meta


def load_state(where: str | Path, fingerprint: Mapping[str, object]) -> tuple[Path, dict[str, object]]:
    """The checkpoint in `where`, checked against the run's `fingerprint` before its tensors
    are read, with the RNG states restored; returns (file, state)."""
    path = find_checkpoint(where)
    meta = read_meta(path)
    theirs = meta.get("fingerprint")
    theirs = theirs if isinstance(theirs, dict) else {}
    differ = sorted(k for k in fingerprint if theirs.get(k) != fingerprint[k])
    if differ:
        detail = ", ".join(f"{k}: checkpoint {theirs.get(k)!r} vs now {fingerprint[k]!r}" for k in differ)
        raise ConfigError(f"checkpoint {path} belongs to a different run ({detail})",
                          "resume with the same model, task, seed, batch size and steps as the "
                          "checkpointed run, or start without --resume")
    try:
        tensors = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any refusal or damage: the file is not used
        raise ConfigError(f"the checkpoint {path} could not be read safely ({type(exc).__name__}: "
                          f"{str(exc).splitlines()[0] if str(exc) else 'damaged'})", RESTART) from None
    if not isinstance(tensors, dict) or not {"model", "optimizer", "scheduler", "rng"} <= tensors.keys():
        raise ConfigError(f"the checkpoint {path} is incomplete", RESTART)
    try:
        rng = as_object(meta["rng"])
        _set_rng_parts(rng["python"], rng["numpy"], tensors["rng"])
    except (KeyError, TypeError, ValueError, RuntimeError) as exc:
        raise ConfigError(f"the checkpoint {path} has a damaged RNG state ({exc})", RESTART) from None
    state = {k: v for k, v in meta.items() if k not in ("magic", "format", "rng")}
    state.update({k: v for k, v in tensors.items() if k != "rng"})
    return path, state


def find_checkpoint(where: str | Path) -> Path:
    """The checkpoint file in `where`: a checkpoint folder, or a run folder's latest."""
    path = Path(where)
    if path.is_file():
        return path
    if not path.exists():
        raise ConfigError(f"there is no checkpoint folder {path}",
                          "give the --checkpoint-dir of an earlier run (it holds step-NNNNNNN folders)")
    if (path / CHECKPOINT_FILE).is_file():
        return path / CHECKPOINT_FILE
    latest = path / LATEST_FILE
    if latest.is_file():
        name = latest.read_text(errors="replace").strip()
        candidate = path / name / CHECKPOINT_FILE
        if name.startswith("step-") and "/" not in name and candidate.is_file():
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


def _rng_parts() -> tuple[list[object], list[object], dict[str, torch.Tensor | list[torch.Tensor]]]:
    """The RNG states as (Python: JSON, NumPy: JSON, torch: tensors)."""
    version, internal, gauss = random.getstate()
    python_rng: list[object] = [version, list(internal), gauss]
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    numpy_rng: list[object] = [kind, [int(k) for k in keys], int(pos), int(has_gauss), float(cached)]
    torch_rng: dict[str, torch.Tensor | list[torch.Tensor]] = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        torch_rng["cuda"] = torch.cuda.get_rng_state_all()
    return python_rng, numpy_rng, torch_rng


def _set_rng_parts(python_rng: object, numpy_rng: object, torch_rng: object) -> None:
    """Restore what _rng_parts saved (read back: meta.json's JSON, state.pt's tensors); TypeError or
    ValueError for a part of the wrong shape."""
    version, internal, gauss = as_list(python_rng)
    random.setstate((version, tuple(as_int(v) for v in as_list(internal)), gauss))
    kind, keys, pos, has_gauss, cached = as_list(numpy_rng)
    np.random.set_state((str(kind), np.asarray(keys, dtype=np.uint32), as_int(pos), as_int(has_gauss),
                         as_float(cached)))
    tensors = as_object(torch_rng)
    torch.set_rng_state(_tensor(tensors["torch"]))
    if "cuda" in tensors and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([_tensor(t) for t in as_list(tensors["cuda"])])


def _tensor(value: object) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value
    raise TypeError(f"an RNG state must be a tensor, not {type(value).__name__}")
