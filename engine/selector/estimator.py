"""What the selector relies on of its models. scikit-learn ships no types, so `Estimator` and
`Classifier` name the calls the code makes (fit, predict, predict_proba) instead of `Any`;
`FiguresModel` is what a Selector predicts its figures with (a fitted RegressorModel, its compact
form, or a transferred one)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # numpy's types only: this module stays free of imports at run time
    import numpy as np
    from numpy.typing import NDArray


class Estimator(Protocol):
    """A regressor or classifier pipeline: fitted in place (fit returns it), then predicting."""

    def fit(self, x: NDArray[np.float64], y: NDArray[np.generic], **fit_params: NDArray[np.float64]) -> Estimator: ...

    def predict(self, x: NDArray[np.float64]) -> NDArray[np.float64]: ...


class Classifier(Estimator, Protocol):
    """A fitted classifier: its class labels and each row's probability of each."""

    classes_: NDArray[np.int64]

    def predict_proba(self, x: NDArray[np.float64]) -> NDArray[np.float64]: ...


class ModelSpec(Protocol):
    """What a figures model says it is (CandidateSpec, CompactSpec)."""

    @property
    def name(self) -> str: ...

    @property
    def target(self) -> str: ...

    @property
    def label(self) -> str: ...


class FiguresModel(Protocol):
    """Time per sample (s), average power (W) and energy per sample (J) of each encoded row."""

    @property
    def spec(self) -> ModelSpec: ...

    def predict(self, x: NDArray[np.float64]) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]: ...


__all__ = ["Classifier", "Estimator", "FiguresModel", "ModelSpec"]
