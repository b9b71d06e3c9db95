"""JSON's value types: what the `to_json` and `describe` methods return and `json.dumps` takes.

Read-only containers (Sequence, Mapping) so that a list of objects is a JSON value as it stands.
Data read from a file is not of these types until it is checked: parsers take it as `object`."""

from __future__ import annotations

from typing import Mapping, Sequence, Union

JsonScalar = Union[None, bool, int, float, str]
JsonValue = Union[JsonScalar, Sequence["JsonValue"], Mapping[str, "JsonValue"]]
JsonObject = dict[str, JsonValue]
