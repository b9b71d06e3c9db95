"""A fitted selector in plain numpy arrays: predictions without importing scikit-learn.

Loading a pickled selector imports scikit-learn, and with it scipy and pandas: about two
seconds before a prediction that takes milliseconds. For the tree models a selector wins
with most often, the fitted trees are a few arrays, so `save_selector` also writes them
(`export_selector`) and `load_selector` predicts from them (`CompactRegressor`) when the
file is there:

- hist-gb (HistGradientBoostingRegressor, squared error, numeric features): the baseline
  plus each tree's leaf value, summed tree by tree as scikit-learn sums them;
- random-forest and extra-trees: the mean of the trees' leaf values, the input cast to
  float32 first as scikit-learn's trees do.

Each behind the pipeline's `log_columns` step (or `log_roofline_columns`); hist-gb-roofline, a
VotingRegressor of two such pipelines, as the mean of its members (`TreeMean`). The traversal and the order of the sums are
scikit-learn's, so the predictions are the same floats (tests/test_selector_compact.py
checks it). Any other model (ridge, kNN, SVR, MLP, the ensemble, a classifier that
chooses) has no compact form: it is loaded from the pickle, as before.

The time/power/energy arithmetic after the models (`figures`) is shared with
`candidates.RegressorModel`, so both forms turn model outputs into figures alike.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol, runtime_checkable

import numpy as np

from engine.core.errors import ConfigError
from engine.selector.features import FEATURE_COLUMNS, log_columns, log_roofline_columns

if TYPE_CHECKING:
    from engine.selector.selector import Selector

FORM_VERSION = 2  # the layout of the arrays below (2: members of a mean, each model's inputs)
READABLE_FORMS = (1, 2)
# Predictions are held within this factor (e^4.6, about 100x) of the training targets' range:
# a polynomial far outside its data would otherwise overflow.
LOG_MARGIN = math.log(100.0)
FLOPS_PER_SAMPLE = FEATURE_COLUMNS.index("flops_per_sample")
KEYS = ("time", "second")  # the two targets of a regressor (see candidates.TARGETS)


def log_offset(key: str, target: str, x: np.ndarray) -> np.ndarray:
    """Time and energy per sample are learnt per FLOP of a sample: what is left (an inverse
    efficiency) varies far less across model sizes, so trees need not extrapolate a scale."""
    if key == "second" and target == "time+power":
        return np.zeros(len(x))
    return np.log(np.maximum(x[:, FLOPS_PER_SAMPLE], 1.0))


def figures(target: str, predict: Mapping[str, Callable[[np.ndarray], np.ndarray]],
            bounds: Mapping[str, tuple[float, float]], x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Time per sample (s), average power (W), energy per sample (J) from the two models' log outputs."""
    t, second = (np.exp(np.clip(predict[k](x), *bounds[k]) + log_offset(k, target, x)) for k in KEYS)
    if target == "time+power":
        return t, second, t * second
    return t, second / t, second


@dataclass(frozen=True)
class CompactSpec:
    """What a RegressorModel's CandidateSpec says that prediction needs."""

    name: str
    target: str

    @property
    def label(self) -> str:
        return f"{self.name}/{self.target}"


@dataclass(frozen=True)
class TreeEnsemble:
    """Trees in flat arrays (node indices global across trees): a sum from a baseline, or a mean."""

    feature: np.ndarray  # int64 per node (0 at leaves)
    threshold: np.ndarray  # float64: go left when x <= threshold
    missing_left: np.ndarray  # bool: where NaN goes
    left: np.ndarray  # int64
    right: np.ndarray  # int64
    is_leaf: np.ndarray  # bool
    value: np.ndarray  # float64 leaf values
    roots: np.ndarray  # int64, one per tree, in scikit-learn's order
    combine: str  # "sum" (gradient boosting, from `baseline`) | "mean" (forests)
    baseline: float = 0.0
    float32_input: bool = False  # scikit-learn's trees compare the input as float32
    inputs: str = "log"  # the pipeline's first step: a key of INPUTS

    def predict(self, x: np.ndarray) -> np.ndarray:
        """The estimator's prediction for rows `x` (the pipeline's input: its first step is applied here)."""
        xin = INPUTS[self.inputs](x)
        if self.float32_input:
            xin = xin.astype(np.float32).astype(np.float64)
        node = np.tile(self.roots, (len(xin), 1))
        while True:
            leaf = self.is_leaf[node]
            if leaf.all():
                break
            xv = np.take_along_axis(xin, self.feature[node], axis=1)
            go_left = np.where(np.isnan(xv), self.missing_left[node], xv <= self.threshold[node])
            node = np.where(leaf, node, np.where(go_left, self.left[node], self.right[node]))
        values = self.value[node]
        out = np.full(len(xin), self.baseline if self.combine == "sum" else 0.0)
        for t in range(values.shape[1]):  # tree by tree, as scikit-learn accumulates
            out += values[:, t]
        if self.combine == "mean":
            out /= values.shape[1]
        return out

    def arrays(self, prefix: str) -> dict[str, np.ndarray]:
        return {f"{prefix}.{name}": np.asarray(getattr(self, name)) for name in
                ("feature", "threshold", "missing_left", "left", "right", "is_leaf", "value", "roots",
                 "combine", "baseline", "float32_input", "inputs")}

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, np.ndarray], prefix: str) -> "TreeEnsemble":
        def get(name: str) -> np.ndarray:
            return np.asarray(arrays[f"{prefix}.{name}"])

        return cls(get("feature").astype(np.int64), get("threshold").astype(np.float64),
                   get("missing_left").astype(bool), get("left").astype(np.int64), get("right").astype(np.int64),
                   get("is_leaf").astype(bool), get("value").astype(np.float64), get("roots").astype(np.int64),
                   str(get("combine")), float(get("baseline")), bool(get("float32_input")),
                   str(get("inputs")) if f"{prefix}.inputs" in arrays else "log")  # form 1 wrote no inputs


@dataclass(frozen=True)
class TreeMean:
    """A VotingRegressor of tree pipelines (hist-gb-roofline): the mean of its members' predictions."""

    members: tuple[TreeEnsemble, ...]

    def predict(self, x: np.ndarray) -> np.ndarray:
        # VotingRegressor.predict's arithmetic: np.average over the members' columns
        return np.average(np.asarray([m.predict(x) for m in self.members]).T, axis=1)

    def arrays(self, prefix: str) -> dict[str, np.ndarray]:
        out = {f"{prefix}.members": np.asarray(len(self.members))}
        for i, member in enumerate(self.members):
            out.update(member.arrays(f"{prefix}.{i}"))
        return out

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, np.ndarray], prefix: str) -> "TreeMean":
        n = int(np.asarray(arrays[f"{prefix}.members"]))
        return cls(tuple(TreeEnsemble.from_arrays(arrays, f"{prefix}.{i}") for i in range(n)))


CompactModel = TreeEnsemble | TreeMean
INPUTS: Mapping[str, Callable[[np.ndarray], np.ndarray]] = {
    "log": log_columns, "log+roofline": log_roofline_columns}


def model_from_arrays(arrays: Mapping[str, np.ndarray], prefix: str) -> CompactModel:
    return TreeMean.from_arrays(arrays, prefix) if f"{prefix}.members" in arrays else TreeEnsemble.from_arrays(arrays, prefix)


class CompactRegressor:
    """RegressorModel's predictions from TreeEnsembles, without scikit-learn."""

    def __init__(self, spec: CompactSpec, bounds: Mapping[str, tuple[float, float]],
                 models: Mapping[str, CompactModel]) -> None:
        self.spec = spec
        self.bounds = {k: (float(lo), float(hi)) for k, (lo, hi) in bounds.items()}
        self.models = dict(models)

    def predict(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Time per sample (s), average power (W), energy per sample (J)."""
        return figures(self.spec.target, {k: m.predict for k, m in self.models.items()}, self.bounds, x)


# --------------------------------------------------------------------------- export


def _is(obj: object, name: str) -> bool:
    """Whether `obj` is scikit-learn's class `name` (checked by name: nothing is imported here)."""
    cls = type(obj)
    return cls.__name__ == name and cls.__module__.startswith("sklearn.")


def _hist_gb(est: Any) -> TreeEnsemble | None:
    # `est`: a fitted HistGradientBoostingRegressor, read through its private, untyped attributes
    if (type(getattr(est, "_loss", None)).__name__ != "HalfSquaredError" or est.n_trees_per_iteration_ != 1
            or getattr(est, "is_categorical_", None) is not None or getattr(est, "_preprocessor", None) is not None):
        return None
    parts, roots, offset = [], [], 0
    for predictors in est._predictors:
        nodes = predictors[0].nodes
        if nodes["is_categorical"].any():
            return None
        parts.append((nodes, offset))
        roots.append(offset)
        offset += len(nodes)
    if not parts:
        return None
    nodes = np.concatenate([n for n, _ in parts])
    shift = np.concatenate([np.full(len(n), off, dtype=np.int64) for n, off in parts])
    leaf = nodes["is_leaf"].astype(bool)
    return TreeEnsemble(
        feature=np.where(leaf, 0, nodes["feature_idx"]).astype(np.int64),
        threshold=nodes["num_threshold"].astype(np.float64), missing_left=nodes["missing_go_to_left"].astype(bool),
        left=np.where(leaf, 0, nodes["left"].astype(np.int64) + shift),
        right=np.where(leaf, 0, nodes["right"].astype(np.int64) + shift),
        is_leaf=leaf, value=nodes["value"].astype(np.float64), roots=np.array(roots, dtype=np.int64),
        combine="sum", baseline=float(np.asarray(est._baseline_prediction).reshape(-1)[0]))


def _forest(est: Any) -> TreeEnsemble | None:
    # `est`: a fitted random forest or extra trees, read through scikit-learn's untyped tree_ arrays
    if getattr(est, "n_outputs_", 1) != 1 or not est.estimators_:
        return None
    cols: dict[str, list[np.ndarray]] = {k: [] for k in ("feature", "threshold", "missing_left", "left", "right",
                                                         "is_leaf", "value")}
    roots, offset = [], 0
    for tree in est.estimators_:
        t = tree.tree_
        n = t.node_count
        leaf = t.children_left == -1
        cols["feature"].append(np.where(leaf, 0, t.feature).astype(np.int64))
        cols["threshold"].append(np.asarray(t.threshold, dtype=np.float64))
        missing = getattr(t, "missing_go_to_left", None)
        cols["missing_left"].append(np.zeros(n, bool) if missing is None else np.asarray(missing).astype(bool))
        cols["left"].append(np.where(leaf, 0, t.children_left.astype(np.int64) + offset))
        cols["right"].append(np.where(leaf, 0, t.children_right.astype(np.int64) + offset))
        cols["is_leaf"].append(leaf)
        cols["value"].append(np.asarray(t.value, dtype=np.float64)[:, 0, 0])
        roots.append(offset)
        offset += n
    flat = {k: np.concatenate(v) for k, v in cols.items()}
    return TreeEnsemble(feature=flat["feature"], threshold=flat["threshold"], missing_left=flat["missing_left"],
                        left=flat["left"], right=flat["right"], is_leaf=flat["is_leaf"], value=flat["value"],
                        roots=np.array(roots, dtype=np.int64), combine="mean", float32_input=True)


def export_pipeline(pipe: object) -> CompactModel | None:
    """The compact form of a fitted [log_columns, tree model] pipeline (or of a VotingRegressor of such
    pipelines, equally weighted), or None when it has none."""
    if _is(pipe, "VotingRegressor"):
        if getattr(pipe, "weights", None) is not None:
            return None
        members = [export_pipeline(est) for est in getattr(pipe, "estimators_", ())]
        if not members or not all(isinstance(m, TreeEnsemble) for m in members):
            return None
        return TreeMean(tuple(m for m in members if isinstance(m, TreeEnsemble)))
    steps = getattr(pipe, "steps", None) if _is(pipe, "Pipeline") else None
    if not steps or len(steps) != 2:
        return None
    (_n, first), (_m, est) = steps
    inputs = {f.__name__: key for key, f in INPUTS.items()}.get(getattr(getattr(first, "func", None), "__name__", ""))
    if not (_is(first, "FunctionTransformer") and inputs is not None
            and getattr(first.func, "__module__", "").startswith("engine.selector.")
            and not first.kw_args and first.inverse_func is None and not first.validate):
        return None
    tree = _hist_gb(est) if _is(est, "HistGradientBoostingRegressor") else (
        _forest(est) if _is(est, "RandomForestRegressor") or _is(est, "ExtraTreesRegressor") else None)
    return None if tree is None else replace(tree, inputs=inputs)


@runtime_checkable
class _PerTarget(Protocol):
    """A figures model of one fitted model per target (RegressorModel, CompactRegressor): what has a compact form."""

    models: Mapping[str, object]
    bounds: Mapping[str, tuple[float, float]]


def export_selector(selector: Selector) -> dict[str, np.ndarray] | None:
    """Everything a Selector predicts with, as arrays (its settings, encoder and records in a JSON
    `meta` entry); None when its model has no compact form or a classifier chooses."""
    model = selector.model
    if selector.chooser is not None or not isinstance(model, _PerTarget) or set(model.models) != set(KEYS):
        return None
    trees = {k: export_pipeline(model.models[k]) for k in KEYS}
    if any(t is None for t in trees.values()):
        return None
    meta = {
        "form_version": FORM_VERSION, "spec": {"name": model.spec.name, "target": model.spec.target},
        "bounds": {k: list(v) for k, v in model.bounds.items()},
        "encoder": selector.encoder.to_json(), "settings": [s.to_json() for s in selector.candidates],
        "source": selector.source, "source_column": bool(selector.source_column), "winner": selector.winner,
        "cv_table": selector.cv_table, "objective": selector.objective, "training": selector.training,
        "ranges": {k: list(v) for k, v in selector.ranges.items()},
    }
    if len(selector.encoders) > 1:  # an across-module selector's modules, each with its encoder
        meta["encoders"] = {m: e.to_json() for m, e in selector.encoders.items()}
    out: dict[str, np.ndarray] = {"meta": np.array(json.dumps(meta, default=str))}
    for k, tree in trees.items():
        assert tree is not None
        out.update(tree.arrays(k))
    return out


def read_meta(arrays: Mapping[str, np.ndarray]) -> dict[str, Any]:
    try:
        meta = json.loads(str(np.asarray(arrays["meta"])))
    except (KeyError, ValueError) as exc:
        raise ConfigError(f"the compact selector has no readable meta ({exc})", "retrain the selector") from None
    if not isinstance(meta, dict) or meta.get("form_version") not in READABLE_FORMS:
        raise ConfigError("the compact selector is of another form version", "retrain the selector")
    return meta


def regressor_from_arrays(arrays: Mapping[str, np.ndarray], meta: Mapping[str, Any]) -> CompactRegressor:
    spec = CompactSpec(str(meta["spec"]["name"]), str(meta["spec"]["target"]))
    bounds = {k: (float(v[0]), float(v[1])) for k, v in meta["bounds"].items()}
    return CompactRegressor(spec, bounds, {k: model_from_arrays(arrays, k) for k in KEYS})
