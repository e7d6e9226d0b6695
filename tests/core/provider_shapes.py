"""The providers' documented JSON shapes (data/providers/shapes.json) and a check against them,
shared by the adapter tests."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import jsonschema

DATA = Path(__file__).parent / "data" / "providers"
SHAPES: dict[str, Any] = json.loads((DATA / "shapes.json").read_text(encoding="utf-8"))


def sample(name: str) -> Any:
    return json.loads((DATA / name).read_text(encoding="utf-8"))


@functools.cache
def _validator(shape: str) -> jsonschema.Draft202012Validator:
    if shape not in SHAPES:
        raise KeyError(f"no shape {shape!r} in shapes.json")
    schema = {**SHAPES, "$ref": f"#/{shape}"}
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def shape_errors(value: Any, shape: str) -> list[str]:
    errors = sorted(_validator(shape).iter_errors(value), key=str)
    return [f"{'/'.join(map(str, e.absolute_path)) or '(top)'}: {e.message}" for e in errors]


def assert_shape(value: Any, shape: str) -> None:
    errors = shape_errors(value, shape)
    assert not errors, f"not a valid {shape}: " + "; ".join(errors)
