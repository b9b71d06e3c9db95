"""Saving and loading selectors: a joblib file and a JSON sidecar beside it.

    default.joblib   the fitted Selector (a pickle: only ever load what we wrote)
    default.npz      the same selector in plain arrays, where its model has that form
                     (`compact.py`: tree models); predicting from it needs no scikit-learn
    default.json     format, feature schema, library versions, training-data digest,
                     the CV table, and the SHA-256 of the joblib (and npz) file

Unpickling runs code, so a selector is loaded only from where this user put it: the
shipped folder (`profiles/selectors`), the user's `data_dir()/selectors`, or a path the
user vouched for with `--trust` (`trust_explicit_paths()`); and only when the file is owned
by the current user or root and is not group- or world-writable (`check_origin`). The
sidecar's digest is then checked (integrity, not origin: whoever wrote a file can write its
sidecar), as is the feature schema, before anything is unpickled; the bytes that were
verified are the bytes that are unpickled. A file failing any check is refused with a
SelectorFileError that says why and how to trust it. The npz is read without unpickling
(`allow_pickle=False`), after the same checks and its own digest, and only when it was
written with the joblib file beside it (it records that file's digest); else the joblib
file is loaded.

Where the selector comes from (`resolve_selector_path`): an explicit path; else the
user's `data_dir()/selectors/default.joblib` (written by `train-selector`); else the
twin-trained default shipped in `profiles/selectors/default.joblib`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from engine import __version__
from engine.core import paths
from engine.core.errors import ConfigError
from engine.core.numpy_pickles import read_numpy2_pickles
from engine.core.userinput import load_json

if TYPE_CHECKING:  # the selector's modules load numpy: imported where a selector is built or read
    from engine.selector.selector import Selector

log = logging.getLogger(__name__)

FORMAT = "slm-dvfs-selector"
FORMAT_VERSION = 1
COMPACT_VERSION = 2  # engine.selector.compact.FORM_VERSION, recorded in the sidecar without importing numpy
COMPACT_READABLE = (1, 2)  # engine.selector.compact.READABLE_FORMS
DEFAULT_NAME = "default.joblib"
COMPRESS = 3


class SelectorFileError(ConfigError):
    """A selector file is missing, tampered with, or made for other features."""


def sidecar_path(path: Path) -> Path:
    return Path(path).with_suffix(".json")


def user_selector_dir() -> Path:
    return paths.data_dir() / "selectors"


def shipped_selector_dir() -> Path:
    return paths.profiles_dir() / "selectors"


_trust_explicit = False  # set by a client whose user passed --trust


def trust_explicit_paths(on: bool = True) -> None:
    """Let explicit selector paths outside the trusted folders load in this process (the
    CLI's `--trust`); owners and modes are still checked."""
    global _trust_explicit
    _trust_explicit = bool(on)


def _inside(path: Path, folder: Path) -> bool:
    try:
        path.relative_to(folder.resolve())
    except (ValueError, OSError):
        return False
    return True


def check_origin(path: str | os.PathLike[str], *, trust: bool = False) -> Path:
    """`path` resolved, if a selector may be unpickled from it (see the module's doc)."""
    path = Path(path).expanduser()
    real = path.resolve()
    trusted_dir = any(_inside(real, d) for d in (shipped_selector_dir(), user_selector_dir()))
    if not (trusted_dir or trust or _trust_explicit):
        raise SelectorFileError(
            f"the selector {path} is outside the trusted folders ({user_selector_dir()}, "
            f"{shipped_selector_dir()}); loading a selector runs code, so it was not loaded",
            f"if you wrote it, pass --trust to load it from there, or move it into {user_selector_dir()}")
    for target in (real, sidecar_path(real)):
        try:
            st = target.stat()
        except OSError:
            continue  # a missing sidecar is reported by read_sidecar
        if st.st_uid not in (os.geteuid(), 0):
            raise SelectorFileError(
                f"the selector file {target} is owned by uid {st.st_uid}, not by you or root; it was not loaded",
                "retrain it yourself with `slm-dvfs train-selector`, or `chown` it if you trust its author")
        if st.st_mode & 0o022:
            raise SelectorFileError(
                f"the selector file {target} is writable by group or others (mode {st.st_mode & 0o777:o}); "
                "anyone could have swapped it, so it was not loaded",
                f"`chmod go-w {target}` if you trust its content, or retrain it")
    return real


def resolve_selector_path(explicit: str | os.PathLike[str] | None = None, *, trust: bool = False) -> Path:
    """An explicit file, else the user's trained selector, else the shipped one; checked
    with check_origin (an explicit path outside the trusted folders needs `trust`)."""
    if explicit:
        path = Path(explicit).expanduser()
        if path.is_dir():
            path = path / DEFAULT_NAME
        if not path.is_file():
            raise SelectorFileError(f"there is no selector file at {path}",
                                    "give the .joblib file `slm-dvfs train-selector --out` wrote")
        return check_origin(path, trust=trust)  # the resolved file is the one checked, and read
    for folder in (user_selector_dir(), shipped_selector_dir()):
        candidate = folder / DEFAULT_NAME
        if candidate.is_file():
            return check_origin(candidate)
    raise SelectorFileError(
        "no selector available: none trained in "
        f"{user_selector_dir()} and none shipped in {shipped_selector_dir()}",
        "train one with `slm-dvfs train-selector` (on the twin: `slm-dvfs train-selector --from-twin-zoo`)",
    )


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def library_versions() -> dict[str, str]:
    import joblib
    import numpy
    import scipy
    import sklearn

    return {"python": platform.python_version(), "scikit-learn": sklearn.__version__, "numpy": numpy.__version__,
            "scipy": scipy.__version__, "joblib": joblib.__version__, "slm-dvfs": __version__}


def save_selector(selector: Selector, path: str | os.PathLike[str] | None = None) -> Path:
    """Write the joblib file (atomically) and its sidecar; returns the joblib path."""
    import joblib

    target = Path(path) if path else user_selector_dir() / DEFAULT_NAME
    if target.suffix != ".joblib":
        target = target.with_suffix(".joblib")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.tmp{os.getpid()}")
        joblib.dump(selector, tmp, compress=COMPRESS)
        digest = sha256_file(tmp)
        compact_tmp = _write_compact(selector, target, digest)
        side = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "joblib_file": target.name,
            "joblib_sha256": digest,
            "feature_schema": selector.schema,
            "versions": library_versions(),
            "source": selector.source,
            "label": f"{selector.source}-trained",
            "winner": selector.winner,
            "objective": selector.objective,
            "training": selector.training,
            "cv_table": selector.cv_table,
            "settings": [s.to_json() for s in selector.candidates],
            "encoder": selector.encoder.to_json(),
        }
        if compact_tmp is not None:
            side.update(compact_file=target.with_suffix(".npz").name, compact_sha256=sha256_file(compact_tmp),
                        compact_version=COMPACT_VERSION)
        side_tmp = sidecar_path(tmp)
        side_tmp.write_text(json.dumps(side, indent=1, sort_keys=True, default=str) + "\n")
        tmp.replace(target)
        if compact_tmp is not None:
            compact_tmp.replace(target.with_suffix(".npz"))
        else:  # a compact form of an earlier selector at this path would not match this one
            target.with_suffix(".npz").unlink(missing_ok=True)
        side_tmp.replace(sidecar_path(target))
    except OSError as exc:
        raise SelectorFileError(f"cannot write the selector to {target}: {exc.strerror or exc}",
                                "pass a writable --out path") from None
    log.info("saved selector %s (%d bytes, sha256 %s)", target, target.stat().st_size, digest[:12])
    return target


def _write_compact(selector: Selector, target: Path, joblib_sha256: str) -> Path | None:
    """The selector's compact form beside `target` (a temporary name), when its model has one."""
    import numpy as np

    from engine.selector.compact import export_selector

    arrays = export_selector(selector)
    if arrays is None:
        return None
    arrays["joblib_sha256"] = np.array(joblib_sha256)  # the pickle this form was written with
    tmp = target.with_name(f".{target.stem}.npz.tmp{os.getpid()}")
    with open(tmp, "wb") as fh:
        # NumPy 2's stub lets **kwds fill allow_pickle (a bool), NumPy 1's does not: typed as a plain call, so
        # mypy passes under both; these keys are the compact form's array names
        savez: Callable[..., None] = np.savez_compressed
        savez(fh, **arrays)
    return tmp


def add_compact_form(path: str | os.PathLike[str]) -> bool:
    """Write the compact form of an existing selector file (loaded through every check) and record
    it in its sidecar; False when its model has none. For selectors saved before compact forms."""
    path = resolve_selector_path(path)
    selector = load_selector(path, compact=False)
    side = read_sidecar(path)
    tmp = _write_compact(selector, path, side["joblib_sha256"])
    if tmp is None:
        return False
    side.update(compact_file=path.with_suffix(".npz").name, compact_sha256=sha256_file(tmp),
                compact_version=COMPACT_VERSION)
    side_tmp = path.with_name(f".{path.stem}.json.tmp{os.getpid()}")
    side_tmp.write_text(json.dumps(side, indent=1, sort_keys=True, default=str) + "\n")
    tmp.replace(path.with_suffix(".npz"))
    side_tmp.replace(sidecar_path(path))
    return True


def read_sidecar(path: Path) -> dict[str, Any]:
    side = sidecar_path(path)
    remedy = f"retrain with `slm-dvfs train-selector --out {path}`, or use another selector"
    try:
        text = side.read_text()
    except FileNotFoundError:
        raise SelectorFileError(f"the selector {path} has no sidecar {side.name}; it cannot be verified",
                                remedy) from None
    except (OSError, ValueError) as exc:
        raise SelectorFileError(f"the sidecar {side} is unreadable ({exc})", remedy) from None
    # load_json: a hostile sidecar is an error of ours, never a RecursionError
    data = load_json(text, f"the sidecar {side} is unreadable: it", remedy, error=SelectorFileError, finite=False)
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise SelectorFileError(f"{side} is not an slm-dvfs selector sidecar", remedy)
    if data.get("format_version") != FORMAT_VERSION:
        raise SelectorFileError(
            f"{side} is selector format {data.get('format_version')!r}; this slm-dvfs reads {FORMAT_VERSION}",
            remedy)
    return data


def verify_selector_file(path: str | os.PathLike[str], data: bytes | None = None) -> dict[str, Any]:
    """Check a selector file (or its bytes `data`, once read) without unpickling it; returns its sidecar."""
    from engine.selector.selector import selector_schema

    path = Path(path)
    side = read_sidecar(path)
    remedy = f"retrain with `slm-dvfs train-selector --out {path}`; never load a selector you did not write"
    actual = sha256_file(path) if data is None else hashlib.sha256(data).hexdigest()
    if actual != side.get("joblib_sha256"):
        raise SelectorFileError(
            f"the selector {path} does not match its sidecar's SHA-256 (file {actual[:12]}..., "
            f"recorded {str(side.get('joblib_sha256'))[:12]}...): it was changed or damaged, and was not loaded",
            remedy)
    schema = side.get("feature_schema")
    columns = schema.get("columns", []) if isinstance(schema, dict) else []
    source_column = "source_measured" in columns
    expected = selector_schema(source_column)
    if schema != expected:
        version = schema.get("version") if isinstance(schema, dict) else schema
        older = isinstance(version, int) and version < expected["version"]
        raise SelectorFileError(
            f"the selector {path} was made for other features (schema version {version!r}, this slm-dvfs computes "
            f"version {expected['version']} with {len(expected['columns'])} columns"
            + (f"; {_what_changed(version)}" if isinstance(version, int) and older else "")
            + "); its model cannot read this version's rows, "
            "so it was not loaded",
            _schema_remedy(path, side, older))
    return side


# What each feature schema after the first added (engine.selector.features.FEATURE_SCHEMA_VERSION).
SCHEMA_CHANGES = {
    2: "version 1 described a model by its family, layers, hidden size and heads, version 2 by what its step costs",
    3: "version 3 adds the training loop's serial host work, so it tells a Trainer-style (hf) loop from the lean one",
    4: "version 4 adds the GPU's share of a step at reference rates, which tells a launch- or host-bound step from a "
       "GPU-bound one in a family the selector never saw",
    5: "version 5 describes the board's module by its figures (SMs, clocks, memory bandwidth and size, CPU cores, "
       "power limit) and a setting's mode as the board's uncapped one or not (no mode id, whose meaning differs "
       "per module), so it predicts for a module it was not trained on (an across-module selector's one-hot "
       "module columns are gone)",
}


def _what_changed(version: int) -> str:
    """What the schemas after `version` changed, oldest first."""
    return "; ".join(text for v, text in sorted(SCHEMA_CHANGES.items()) if v > version)


def _schema_remedy(path: Path, side: dict[str, Any], older: bool) -> str:
    """What to do with a selector made for other features: retrain it the way it was trained."""
    source = side.get("source", "measured")
    if not older:
        return f"use the slm-dvfs that wrote it, or retrain with `slm-dvfs train-selector --out {path}`"
    command = (side.get("training") or {}).get("command") or {}
    how = ("slm-dvfs train-selector --from-twin-zoo" if isinstance(command, dict) and command.get("from_twin_zoo")
           else f"slm-dvfs train-selector --source {source}")
    where = "" if path.parent.resolve() == user_selector_dir().resolve() and path.name == DEFAULT_NAME \
        else f" --out {path}"
    why = ("the twin data is computed again" if "from-twin-zoo" in how
           else "the sweeps in the results store are kept, so it learns from the same data")
    return f"retrain it with `{how}{where}` ({why}), or move it away to use the shipped selector"


def load_selector(path: str | os.PathLike[str] | None = None, *, trust: bool = False, compact: bool = True) -> Selector:
    """The selector at `path` (default: resolve_selector_path()), its origin checked and its
    bytes verified before they are unpickled; `trust` admits a path outside the trusted folders.
    With `compact` (the default) it predicts from the compact form when there is one (no
    scikit-learn imported); `compact=False` always unpickles the fitted estimators."""
    import io

    path = resolve_selector_path(path, trust=trust)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SelectorFileError(f"cannot read the selector {path}: {exc.strerror or exc}",
                                "check the file's permissions") from None
    side = verify_selector_file(path, data)
    if compact and side.get("compact_version") in COMPACT_READABLE:
        found = _load_compact(path, side)
        if found is not None:
            return found
    import joblib

    from engine.selector.selector import Selector

    want = side.get("versions", {}).get("scikit-learn", "")
    import sklearn

    if want.split(".")[:2] != sklearn.__version__.split(".")[:2]:
        log.warning("selector %s was saved with scikit-learn %s, this is %s; if it misbehaves, retrain it",
                    path, want, sklearn.__version__)
    read_numpy2_pickles()  # a selector saved under NumPy 2 (the shipped one), loaded under NumPy 1 (JetPack 6)
    try:
        obj = joblib.load(io.BytesIO(data))  # the verified bytes, not the file again
    except Exception as exc:  # noqa: BLE001 - any unpickling failure of a verified file
        raise SelectorFileError(f"the selector {path} could not be loaded ({type(exc).__name__}: {exc})",
                                "retrain it with `slm-dvfs train-selector` under this Python and scikit-learn"
                                ) from None
    if not isinstance(obj, Selector) or obj.schema != side["feature_schema"]:
        raise SelectorFileError(f"{path} does not hold a selector matching its sidecar",
                                "retrain it with `slm-dvfs train-selector`")
    obj.path = path
    log.info("loaded selector %s (%s-trained, %s; python %s)", path, obj.source, obj.winner, sys.version.split()[0])
    return obj


def _load_compact(path: Path, side: dict[str, Any]) -> Selector | None:
    """The Selector from the compact form beside `path` (verified), or None when there is no such file."""
    import io

    import numpy as np

    from engine.core.jsontypes import as_list
    from engine.device.setting import DvfsSetting
    from engine.selector.cv_table import cv_table_row
    from engine.selector.compact import read_meta, regressor_from_arrays
    from engine.selector.features import SettingEncoder
    from engine.selector.selector import Selector

    npz = path.with_suffix(".npz")
    remedy = f"retrain with `slm-dvfs train-selector --out {path}`; never load a selector you did not write"
    try:
        data = npz.read_bytes()
    except FileNotFoundError:
        log.info("selector %s: its compact form %s is missing; loading the joblib file", path, npz.name)
        return None
    except OSError as exc:
        raise SelectorFileError(f"cannot read the selector {npz}: {exc.strerror or exc}",
                                "check the file's permissions") from None
    if hashlib.sha256(data).hexdigest() != side.get("compact_sha256"):
        raise SelectorFileError(f"the selector {npz} does not match its sidecar's SHA-256: it was changed or "
                                "damaged, and was not loaded", remedy)
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as npz_file:
            arrays = {k: npz_file[k] for k in npz_file.files}
        if str(arrays.get("joblib_sha256")) != side.get("joblib_sha256"):
            raise SelectorFileError(f"the selector {npz} was written with another {path.name}", remedy)
        meta = read_meta(arrays)
        selector = Selector(
            model=regressor_from_arrays(arrays, meta), chooser=None, encoder=SettingEncoder.from_json(meta["encoder"]),
            candidates=[DvfsSetting.from_json(s) for s in meta["settings"]], source=str(meta["source"]),
            source_column=bool(meta["source_column"]), winner=str(meta["winner"]), cv_table=[cv_table_row(r) for r in as_list(meta["cv_table"])],
            objective=str(meta["objective"]), training=dict(meta["training"]),
            ranges={k: (float(v[0]), float(v[1])) for k, v in meta["ranges"].items()},
            encoders={str(m): SettingEncoder.from_json(e) for m, e in (meta.get("encoders") or {}).items()} or None,
        )
    except SelectorFileError:
        raise
    except (ConfigError, KeyError, ValueError, TypeError, IndexError, OSError) as exc:
        raise SelectorFileError(f"the selector {npz} could not be read ({type(exc).__name__}: {exc})", remedy) from None
    if selector.schema != side["feature_schema"]:
        raise SelectorFileError(f"{npz} does not hold a selector matching its sidecar", remedy)
    selector.path = path
    log.info("loaded selector %s (%s-trained, %s; compact form)", path, selector.source, selector.winner)
    return selector
