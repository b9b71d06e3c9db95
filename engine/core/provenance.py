"""Where a figure came from: every number the tool shows carries one of these."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from engine.core.constants import parse_choice
from engine.core.jsontypes import JsonObject


class Source(str, Enum):
    MEASURED = "measured"  # read on a real board
    TWIN = "twin"  # computed by the digital twin
    PREDICTED = "predicted"  # output of a model (the selector)

    def __str__(self) -> str:
        return self.value


SOURCES: tuple[str, ...] = tuple(s.value for s in Source)


def parse_source(value: object) -> Source:
    """A source as stored or written (measured, twin, predicted); else UnknownChoiceError listing them."""
    return Source(parse_choice(value, SOURCES, "source"))


# --------------------------------------------------------------------------- eval metrics
# An eval metric (accuracy, F1, ...) is a figure about the model, not the hardware: it means
# something only for pretrained weights evaluated on real data. A model built with random
# weights, or scored on generated data, still gives faithful time and energy, but its metric
# is noise (0.976 accuracy on generated text says nothing). The wording lives here, once.
NOT_MEANINGFUL = "not meaningful"
UNKNOWN_MEANING = "meaning unknown"
HOST_SUFFIX = " (host)"  # on the twin, training and evaluation run on the host, not a board


@dataclass(frozen=True)
class MetricProvenance:
    """Whether a run's eval metric means anything, from what the run learnt from.

    weights: "pretrained" | "random" | None (not recorded); synthetic: True (generated data),
    False (real GLUE, from the hub or a folder), None (not recorded, as in runs stored before
    schema v5). A metric is meaningful only with pretrained weights and real data; when either
    is unknown it is never shown as meaningful."""

    weights: str | None
    synthetic: bool | None

    @property
    def meaningful(self) -> bool | None:
        """True: pretrained and real data; False: random weights or generated data; None: not known."""
        if self.weights == "random" or self.synthetic is True:
            return False
        if self.weights == "pretrained" and self.synthetic is False:
            return True
        return None

    @property
    def data(self) -> str | None:
        """"generated" | "real" | None (not recorded)."""
        return None if self.synthetic is None else ("generated" if self.synthetic else "real")

    def reasons(self) -> tuple[str, ...]:
        """Why the metric is not meaningful (or not known to be): `random weights`, `generated data`."""
        if self.meaningful is False:
            return tuple(r for r, bad in (("random weights", self.weights == "random"),
                                          ("generated data", self.synthetic is True)) if bad)
        if self.meaningful is None:
            return tuple(r for r, missing in (("weights not recorded", self.weights not in ("pretrained", "random")),
                                              ("data not recorded", self.synthetic is None)) if missing)
        return ()

    def label(self, source: Source | str, *, short: bool = False) -> str:
        """What an eval metric is labelled with: `measured` (on a board), `measured (host)` (the
        twin's runs train on the host), or `not meaningful (random weights / generated data)`,
        `meaning unknown (weights not recorded)`; `short` drops the parenthesis of the last two."""
        meaningful = self.meaningful
        if meaningful:
            return Source.MEASURED.value + (HOST_SUFFIX if Source(source) is Source.TWIN else "")
        word = NOT_MEANINGFUL if meaningful is False else UNKNOWN_MEANING
        return word if short else f"{word} ({' / '.join(self.reasons())})"

    def tag(self, source: Source | str) -> str:
        """The label as printed after a metric: `[measured (host)]` when it means something,
        else the bare phrase, e.g. `not meaningful (random weights / generated data)`."""
        label = self.label(source)
        return f"[{label}]" if self.meaningful else label

    def to_json(self) -> JsonObject:
        return {"weights": self.weights, "data": self.data, "meaningful": self.meaningful}


def obtained(source: Source | str) -> str:
    """How a figure of `source` came to be: `measured` (a board), `computed` (the twin),
    `predicted` (a model). The twin's sweep points are computed, never measured."""
    return {Source.MEASURED: "measured", Source.TWIN: "computed", Source.PREDICTED: "predicted"}[Source(source)]
