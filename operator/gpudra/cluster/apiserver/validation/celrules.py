"""CEL for the ``x-kubernetes-validations`` rules of CustomResourceDefinitions (``self``, ``oldSelf``).

The only module besides ``gpudra.allocator.cel.selectors`` that imports the CEL library: DRA selectors and CRD rules are
different CEL environments (a typed ``device`` there; here ``self`` is the value the rule is attached to). As in
Kubernetes, property names that are not CEL identifiers are escaped (``mig-enabled`` is ``self.mig__dash__enabled``).
"""

from __future__ import annotations

import functools
import re
from typing import Any

import cel_expr_python.cel as _cel

_RESERVED = {
    "true", "false", "null", "in", "as", "break", "const", "continue", "else", "for", "function", "if",
    "import", "let", "loop", "package", "namespace", "return", "var", "void", "while",
}  # fmt: skip
_IDENTIFIER = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_ESCAPES = (("__", "__underscores__"), (".", "__dot__"), ("-", "__dash__"), ("/", "__slash__"))


class RuleError(Exception):
    """A rule that does not compile; ``message`` carries the position and a caret, as Kubernetes prints it."""


def escape(name: str) -> str:
    """The CEL name of a property (Kubernetes' escaping of names that are not identifiers)."""
    if name in _RESERVED:
        return f"__{name}__"
    if _IDENTIFIER.match(name):
        return name
    for raw, escaped in _ESCAPES:
        name = name.replace(raw, escaped)
    return name


@functools.cache
def _env() -> Any:
    return _cel.NewEnv(variables={"self": _cel.Type.DYN, "oldSelf": _cel.Type.DYN})


@functools.lru_cache(maxsize=1024)
def compile_rule(rule: str) -> Any:
    """The checked program of ``rule``; RuleError when it does not compile."""
    try:
        return _env().compile(rule)
    except RuntimeError as error:
        text = str(error).removeprefix("INVALID_ARGUMENT: ").removesuffix(" [INVALID_ARGUMENT]")
        raise RuleError(f"compilation failed: {text}") from error


def evaluate(rule: str, value: Any, old: Any = None) -> bool | str:
    """True or False, or the runtime error's text. ``value``/``old`` must be escaped with :func:`cel_value`."""
    program = compile_rule(rule)
    activation = {"self": value} if old is None else {"self": value, "oldSelf": old}
    result = program.eval(_env().Activation(activation))
    found = result.value()
    if found is True or found is False:
        return bool(found)
    if result.type() == _cel.Type.ERROR:
        message = str(found)
        missing = re.search(r'Key not found in map\s*:\s*"?([^"]*)"?', message)
        return f"no such key: {missing.group(1)}" if missing else message
    return f"rule returned {result.type().name().lower()}, not a bool"


def uses_old_self(rule: str) -> bool:
    return re.search(r"\boldSelf\b", rule) is not None


def part(schema: dict[str, Any], key: str) -> dict[str, Any]:
    """``schema[key]`` when it is a schema (an object), else an empty one."""
    found = schema.get(key)
    return found if isinstance(found, dict) else {}


def cel_value(value: Any, schema: dict[str, Any]) -> Any:
    """``value`` with the property names of its schema's objects escaped for CEL."""
    if isinstance(value, dict):
        properties = schema.get("properties")
        if isinstance(properties, dict):
            return {escape(k): cel_value(v, properties.get(k) or {}) for k, v in value.items()}
        extra = part(schema, "additionalProperties")
        return {k: cel_value(v, extra) for k, v in value.items()}
    if isinstance(value, list):
        items = part(schema, "items")
        return [cel_value(v, items) for v in value]
    return value
