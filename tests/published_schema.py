"""The JSON Schemas of what the decoder publishes (``docs/schema/*.v1.schema.json``), loaded once, for the tests
that validate published objects against them (jsonschema, draft 2020-12; the files refer to each other by
their ``urn:ldpstream:schema:...`` ids)."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from referencing import Registry, Resource

SCHEMA_DIR = Path(__file__).resolve().parents[1] / "docs" / "schema"

#: The ``schema`` field of a published object → its schema's file.
FILES = {"marginal-estimate/1": "marginal-estimate.v1.schema.json",
         "joint-estimate/1": "joint-estimate.v1.schema.json",
         "dictionary/2": "dictionary.v2.schema.json",
         "retraction/1": "retraction.v1.schema.json"}


@cache
def _registry() -> Registry:
    resources = []
    for path in sorted(SCHEMA_DIR.glob("*.schema.json")):
        document = json.loads(path.read_text())
        Draft202012Validator.check_schema(document)
        resources.append((document["$id"], Resource.from_contents(document)))
    return Registry().with_resources(resources)


@cache
def validator(name: str) -> Draft202012Validator:
    """The validator of schema ``name`` (``marginal-estimate/1``, ...)."""
    document = json.loads((SCHEMA_DIR / FILES[name]).read_text())
    return Draft202012Validator(document, registry=_registry(), format_checker=Draft202012Validator.FORMAT_CHECKER)


def validate(published: dict[str, Any], expected: str | None = None) -> str:
    """Validate ``published`` against the schema its ``schema`` field names (which must be ``expected`` when
    given); raise with every violation listed. Returns the schema's name."""
    name = published.get("schema")
    assert name in FILES, f"unknown or missing schema field: {name!r}"
    assert expected is None or name == expected, (name, expected)
    errors = sorted(validator(name).iter_errors(published), key=lambda e: list(e.absolute_path))
    assert not errors, "\n".join(f"{list(e.absolute_path)}: {e.message}" for e in errors[:20])
    return name
