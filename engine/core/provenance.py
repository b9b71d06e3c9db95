"""Where a figure came from: every number the tool shows carries one of these."""

from __future__ import annotations

from enum import Enum


class Source(str, Enum):
    MEASURED = "measured"  # read on a real board
    TWIN = "twin"  # computed by the digital twin
    PREDICTED = "predicted"  # output of a model (the selector)

    def __str__(self) -> str:
        return self.value
