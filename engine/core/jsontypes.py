"""JSON's value types: what the `to_json` and `describe` methods return and `json.dumps` takes.

Read-only containers (Sequence, Mapping) so that a list of objects is a JSON value as it stands.
Data read from a file is not of these types until it is checked: parsers take it as `object` and
narrow it with `as_float`, `as_int`, `as_object` and `as_list`."""

from __future__ import annotations

from typing import Mapping, Sequence, Union

JsonScalar = Union[None, bool, int, float, str]
JsonValue = Union[JsonScalar, Sequence["JsonValue"], Mapping[str, "JsonValue"]]
JsonObject = dict[str, JsonValue]


# Narrowing what a parser read (`object`) to the value it needs: the same conversions as float(),
# int() and a subscript, and the same TypeError for a value of the wrong kind, so that a parser's
# `except (KeyError, TypeError, ValueError)` reads a malformed file as it did.
def as_float(value: object) -> float:
    """float(value) for a JSON number or numeric text."""
    if isinstance(value, (int, float, str)):
        return float(value)
    raise TypeError(f"float() argument must be a string or a real number, not '{type(value).__name__}'")


def as_int(value: object) -> int:
    """int(value) for a JSON number or numeric text."""
    if isinstance(value, (int, float, str)):
        return int(value)
    raise TypeError(f"int() argument must be a string, a bytes-like object or a real number, "
                    f"not '{type(value).__name__}'")


def as_object(value: object) -> Mapping[str, object]:
    """A JSON object (a mapping) as it stands."""
    if isinstance(value, Mapping):
        return value
    raise TypeError(f"'{type(value).__name__}' object is not subscriptable")


def as_list(value: object) -> Sequence[object]:
    """A JSON array (a list or tuple) as it stands."""
    if isinstance(value, (list, tuple)):
        return value
    raise TypeError(f"'{type(value).__name__}' object is not a JSON array")
