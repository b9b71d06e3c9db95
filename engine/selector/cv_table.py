"""A selector's cross-validation table as it is stored: its rows' type, and a row read back from a file.

Apart from engine.selector.selection (which computes the table and imports scikit-learn), so that a
selector is loaded and shown without it."""

from __future__ import annotations

from typing import TypedDict

from engine.core.jsontypes import JsonObject, as_float, as_int, as_object


class CvTableRow(TypedDict, total=False):
    """A row of a selector's cross-validation table as stored (CVRow's fields; a transfer's rows add
    graded_on): every key optional, as a table read back from a file holds what its writer wrote."""

    label: str
    name: str
    target: str
    kind: str
    mean_regret: float
    worst_regret: float
    mape_time: float | None
    mape_power: float | None
    mape_energy: float | None
    fit_s: float
    workloads: int
    cpu_s: float  # CPU seconds of its folds (newer tables)
    folds: int  # the folds it went through (a shortlisted search: 1 for those the first pass left out)
    graded_on: str  # which held-out workloads the figures are over (a transfer's rows)


def _opt_float(value: object) -> float | None:
    return None if value is None else as_float(value)


def cv_table_row(data: object) -> CvTableRow:
    """A CV table's row read back from a file (a compact selector's meta), its known keys narrowed, in order."""
    d = as_object(data)
    row: CvTableRow = {}
    if "label" in d:
        row["label"] = str(d["label"])
    if "name" in d:
        row["name"] = str(d["name"])
    if "target" in d:
        row["target"] = str(d["target"])
    if "kind" in d:
        row["kind"] = str(d["kind"])
    if "mean_regret" in d:
        row["mean_regret"] = as_float(d["mean_regret"])
    if "worst_regret" in d:
        row["worst_regret"] = as_float(d["worst_regret"])
    if "mape_time" in d:
        row["mape_time"] = _opt_float(d["mape_time"])
    if "mape_power" in d:
        row["mape_power"] = _opt_float(d["mape_power"])
    if "mape_energy" in d:
        row["mape_energy"] = _opt_float(d["mape_energy"])
    if "fit_s" in d:
        row["fit_s"] = as_float(d["fit_s"])
    if "workloads" in d:
        row["workloads"] = as_int(d["workloads"])
    if "cpu_s" in d:
        row["cpu_s"] = as_float(d["cpu_s"])
    if "folds" in d:
        row["folds"] = as_int(d["folds"])
    if "graded_on" in d:
        row["graded_on"] = str(d["graded_on"])
    return row



def cv_row_json(row: CvTableRow) -> JsonObject:
    """A row as JSON: its values are all scalars (str, numbers, None)."""
    return {k: v for k, v in row.items() if v is None or isinstance(v, (str, int, float))}


__all__ = ["CvTableRow", "cv_row_json", "cv_table_row"]
