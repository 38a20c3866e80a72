"""labgov's own JSON Schema of the Runpod REST API v2 subset it uses.

`runpod_v2.json` names fields, types, enums, required fields and nullability, with definitions
under `$defs` (draft 2020-12). It is ours, not Runpod's text: the project has to pass its tests
from a plain clone where Runpod's OpenAPI file is absent. A test checks that it still agrees
with Runpod's OpenAPI whenever that file is present.
"""

import functools
import json
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator, validators
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

SCHEMA_PATH = Path(__file__).with_name("runpod_v2.json")


@functools.cache
def _schema() -> dict:
    return json.loads(SCHEMA_PATH.read_text())


def load_schema() -> dict:
    """The whole schema; a fresh copy, so a caller may change it freely."""
    return json.loads(json.dumps(_schema()))


@functools.cache
def _registry() -> Registry:
    schema = _schema()
    return Registry().with_resource(
        schema["$id"], Resource.from_contents(schema, default_specification=DRAFT202012)
    )


@functools.cache
def validator(def_name: str) -> Draft202012Validator:
    schema = _schema()
    if def_name not in schema["$defs"]:
        raise KeyError(f"no definition {def_name!r} in {SCHEMA_PATH.name}")
    return Draft202012Validator(
        {"$ref": f"{schema['$id']}#/$defs/{def_name}"}, registry=_registry()
    )


def validate(def_name: str, instance: Any) -> None:
    """Raise `jsonschema.ValidationError` (the most relevant one) when `instance` does not fit."""
    validator(def_name).validate(instance)


# JSON Schema counts 10.0 as an integer; a server reading a request body does not.
_StrictIntegers = validators.extend(
    Draft202012Validator,
    type_checker=Draft202012Validator.TYPE_CHECKER.redefine(
        "integer", lambda checker, value: isinstance(value, int) and not isinstance(value, bool)
    ),
)


@functools.cache
def _strict_validator(def_name: str) -> Draft202012Validator:
    return _StrictIntegers(validator(def_name).schema, registry=_registry())


def errors(def_name: str, instance: Any, *, integers_strict: bool = False) -> list[str]:
    """Every problem with `instance`, one readable line each (empty when it fits).
    `integers_strict`: an integer must be written as one (10, not 10.0)."""
    check = _strict_validator(def_name) if integers_strict else validator(def_name)
    found = sorted(check.iter_errors(instance), key=lambda e: list(e.path))
    return [f"{e.json_path}: {e.message}" for e in found]
