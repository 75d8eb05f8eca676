"""Typed results (seed 003): a run's final answer checked against a JSON Schema.

A run given an output schema (by ``Agent.start``, its persona, a job or ``steward run
--schema``) ends solved only with an answer that is JSON matching the schema; that JSON,
normalized, is the run's output. An answer that does not match goes back to the model as an
error it can fix. The check is a pure function of the answer's text and the schema, so a run
rebuilt from its log takes the same path. ``jsonschema`` is imported only when a schema is used.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from steward.errors import ConfigError
from steward.text import compact_json

if TYPE_CHECKING:
    from jsonschema.protocols import Validator

#: The whole answer as one fenced block (```json ... ```), as models like to write it.
_FENCED = re.compile(r"```(?:json)?[ \t]*\n(.*?)\n?[ \t]*```", re.DOTALL | re.IGNORECASE)


def check_schema(schema: Any, where: str = "the output schema") -> dict[str, Any]:
    """``schema`` as a plain JSON object once it is a valid JSON Schema; else a ``ConfigError``."""
    from jsonschema.exceptions import SchemaError

    example = 'e.g. {"type": "object", "properties": {"count": {"type": "integer"}}}'
    if not isinstance(schema, Mapping):
        raise ConfigError(f"{where}: a JSON Schema must be a JSON object, {example} (got {schema!r})")
    try:
        # Recorded with the run: only what JSON can hold (a TOML date, say, cannot be).
        plain: dict[str, Any] = json.loads(json.dumps(schema, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{where}: a JSON Schema holds only JSON values ({exc}). Fix the schema.") from None
    try:
        _validator(plain, where).check_schema(plain)
    except SchemaError as exc:
        raise ConfigError(
            f"{where}: not a valid JSON Schema: {exc.message} (at {exc.json_path}). Fix the schema "
            "(https://json-schema.org/understanding-json-schema explains the keywords)."
        ) from None
    return plain


def load_schema_file(path: str | Path) -> dict[str, Any]:
    """The JSON Schema in the file at ``path``, checked; a ``ConfigError`` naming the fix otherwise."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(
            f"{file}: no such file. Give the path of a JSON file holding a JSON Schema, "
            'e.g. answer.schema.json with {"type": "object", ...}.'
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise ConfigError(f"{file}: cannot be read ({why}). Give a readable JSON Schema file.") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"{file}: not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno}). Fix the file."
        ) from None
    return check_schema(data, str(file))


def schema_prompt(schema: Mapping[str, Any]) -> str:
    """What the model is told about the answer it must give."""
    return (
        f"Your final answer must be a JSON value matching this JSON Schema: {compact_json(dict(schema))}\n"
        "Give only the JSON (optionally in one ```json block), as your final reply or as the "
        "end_message of agent_step end."
    )


def check_answer(text: str, schema: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """The answer as normalized JSON text and no problem, or no value and what is wrong with it.

    The problem is written for the model: where in the answer (a JSON path) and what. A schema
    that cannot be applied (a ``$ref`` to a document it does not hold) is a ``ConfigError``.
    """
    from jsonschema.exceptions import best_match
    from referencing.exceptions import Unresolvable

    body = text.strip()
    if fenced := _FENCED.fullmatch(body):
        body = fenced.group(1).strip()
    try:
        value = json.loads(body, parse_constant=_not_json)
    except RecursionError:
        return None, "it nests arrays and objects too deep to read; send a flatter answer"
    except ValueError as exc:
        where = f" at line {exc.lineno}, column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else ""
        what = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
        return None, f"it is not valid JSON ({what}{where})"
    try:
        error = best_match(_validator(schema, "the output schema")(schema).iter_errors(value))
    except Unresolvable as exc:
        raise ConfigError(
            f"the output schema cannot be applied: {exc}. Keep every $ref inside the schema (#/$defs/...)."
        ) from None
    except RecursionError:  # a $ref that leads back to itself before reading any of the answer
        raise ConfigError(
            "the output schema cannot be applied: a $ref leads back to itself without end; "
            "each $ref must reach a schema that checks something"
        ) from None
    if error is not None:
        return None, f"at {error.json_path}: {error.message}"
    return json.dumps(value, ensure_ascii=False), None


def _not_json(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def _validator(schema: Mapping[str, Any], where: str) -> type[Validator]:
    """The validator of the draft the schema names in ``$schema`` (none named: 2020-12)."""
    from jsonschema.validators import Draft4Validator, Draft7Validator, Draft202012Validator, validator_for

    uri = schema.get("$schema")
    if uri is None:
        return Draft202012Validator
    # For a $schema it does not know, validator_for returns the default it is given: two tell.
    found = validator_for(schema, default=Draft4Validator) if isinstance(uri, str) else None
    if found is None or found is not validator_for(schema, default=Draft7Validator):
        raise ConfigError(
            f"{where}: unknown $schema {uri!r}: leave it out (draft 2020-12 applies) or name a draft, "
            'e.g. "https://json-schema.org/draft/2020-12/schema".'
        )
    return found
