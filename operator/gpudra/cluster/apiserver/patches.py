"""Patch formats: JSON merge patch (RFC 7386), JSON patch (RFC 6902), strategic merge as merge, and the merge
of server-side apply.

Strategic merge patches are applied as merge patches after the ``$patch``, ``$retainKeys``,
``$setElementOrder/...`` and ``$deleteFromPrimitiveList/...`` directives are stripped: lists are replaced
whole, never merged by key (``$patch: delete`` on a map deletes it; on a list item it drops the item from
the patch).

Server-side apply merges as a merge patch, except that a list the schema marks ``x-kubernetes-list-type: map``
is merged item by item on its ``x-kubernetes-list-map-keys``, as kube-apiserver's structured merge does: items
of the object keep their place and are merged with the applied item of the same keys, applied items with new
keys are appended. Field ownership is not tracked: a field the applier stops sending stays.
"""

from __future__ import annotations

from typing import Any

from .status import APIStatusError

FAILED_TEST_MESSAGE = "the test of "
"""How the message of a JSON patch refused for a failed ``test`` operation begins."""


def clone(value: Any) -> Any:
    """A deep copy of JSON data (dicts, lists, scalars); much cheaper than copy.deepcopy."""
    if type(value) is dict:
        return {k: clone(v) for k, v in value.items()}
    if type(value) is list:
        return [clone(v) for v in value]
    return value


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: apply ``patch`` to ``target`` (mutated where it is a dict) and return the result."""
    if not isinstance(patch, dict):
        return clone(patch)
    if not isinstance(target, dict):
        target = {}
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict):
            target[key] = merge_patch(target.get(key), value)
        else:
            target[key] = clone(value)
    return target


def apply_merge(target: Any, patch: Any, schema: dict[str, Any] | None) -> Any:
    """Server-side apply's merge of ``patch`` into ``target`` (mutated where it is a dict), guided by the
    OpenAPI ``schema`` of ``target`` (None: no list is merged by key)."""
    if isinstance(patch, list):
        keys = _list_map_keys(schema)
        if keys and isinstance(target, list):
            return _merge_list_map(target, patch, keys, (schema or {}).get("items"))
        return clone(patch)
    if not isinstance(patch, dict):
        return clone(patch)
    if not isinstance(target, dict):
        target = {}
    properties = (schema or {}).get("properties") or {}
    extra = (schema or {}).get("additionalProperties")
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
            continue
        sub = properties.get(key, extra if isinstance(extra, dict) else None)
        target[key] = apply_merge(target.get(key), value, sub)
    return target


def _list_map_keys(schema: dict[str, Any] | None) -> tuple[str, ...]:
    if not schema or schema.get("x-kubernetes-list-type") != "map":
        return ()
    return tuple(str(k) for k in schema.get("x-kubernetes-list-map-keys") or ())


def _merge_list_map(
    target: list[Any], patch: list[Any], keys: tuple[str, ...], items: dict[str, Any] | None
) -> list[Any]:
    def key_of(item: Any) -> tuple[Any, ...] | None:
        return tuple(item.get(k) for k in keys) if isinstance(item, dict) else None

    applied = {key_of(item): item for item in patch}
    merged = [
        apply_merge(item, applied.pop(key_of(item)), items) if key_of(item) in applied else item
        for item in target
    ]
    return merged + [clone(item) for item in applied.values()]


def strip_strategic_directives(patch: Any) -> Any:
    """Turn a strategic merge patch into a merge patch (see the module docstring)."""
    if isinstance(patch, list):
        return [
            strip_strategic_directives(item)
            for item in patch
            if not (isinstance(item, dict) and item.get("$patch") == "delete")
        ]
    if not isinstance(patch, dict):
        return patch
    if patch.get("$patch") == "delete":
        return None
    result: dict[str, Any] = {}
    for key, value in patch.items():
        if key in ("$patch", "$retainKeys") or key.startswith(
            ("$setElementOrder/", "$deleteFromPrimitiveList/")
        ):
            continue
        result[key] = strip_strategic_directives(value)
    return result


def _invalid(message: str) -> APIStatusError:
    return APIStatusError(422, "Invalid", message)


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def _split(pointer: str) -> list[str]:
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise _invalid(f"invalid JSON pointer {pointer!r}")
    return [_unescape(t) for t in pointer[1:].split("/")]


def _resolve(doc: Any, tokens: list[str], pointer: str) -> Any:
    for token in tokens:
        if isinstance(doc, dict):
            if token not in doc:
                raise _invalid(f"the path {pointer!r} does not exist")
            doc = doc[token]
        elif isinstance(doc, list):
            doc = doc[_index(doc, token, pointer, allow_end=False)]
        else:
            raise _invalid(f"the path {pointer!r} does not exist")
    return doc


def _index(container: list[Any], token: str, pointer: str, *, allow_end: bool) -> int:
    if token == "-" and allow_end:
        return len(container)
    if not token.isdigit() or (len(token) > 1 and token.startswith("0")):
        raise _invalid(f"invalid array index {token!r} in {pointer!r}")
    idx = int(token)
    limit = len(container) + (1 if allow_end else 0)
    if idx >= limit:
        raise _invalid(f"array index {idx} out of bounds in {pointer!r}")
    return idx


def _add(doc: Any, pointer: str, value: Any) -> Any:
    tokens = _split(pointer)
    if not tokens:
        return value
    parent = _resolve(doc, tokens[:-1], pointer)
    last = tokens[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, last, pointer, allow_end=True), value)
    else:
        raise _invalid(f"the path {pointer!r} does not exist")
    return doc


def _remove(doc: Any, pointer: str) -> tuple[Any, Any]:
    tokens = _split(pointer)
    if not tokens:
        raise _invalid("cannot remove the whole document")
    parent = _resolve(doc, tokens[:-1], pointer)
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise _invalid(f"the path {pointer!r} does not exist")
        return doc, parent.pop(last)
    if isinstance(parent, list):
        return doc, parent.pop(_index(parent, last, pointer, allow_end=False))
    raise _invalid(f"the path {pointer!r} does not exist")


def json_patch(doc: Any, operations: Any) -> Any:
    """RFC 6902 on ``doc`` (mutated); a failed ``test`` or a bad path raises 422 Invalid."""
    if not isinstance(operations, list):
        raise APIStatusError(400, "BadRequest", "a JSON patch must be a list of operations")
    for op in operations:
        if not isinstance(op, dict) or "path" not in op:
            raise _invalid(f"invalid JSON patch operation {op!r}")
        kind, path = op.get("op"), str(op["path"])
        if kind == "add":
            doc = _add(doc, path, clone(op.get("value")))
        elif kind == "remove":
            doc, _ = _remove(doc, path)
        elif kind == "replace":
            tokens = _split(path)
            if not tokens:
                doc = clone(op.get("value"))
                continue
            doc, _ = _remove(doc, path)
            doc = _add(doc, path, clone(op.get("value")))
        elif kind in ("move", "copy"):
            source = str(op.get("from", ""))
            if kind == "move":
                doc, value = _remove(doc, source)
            else:
                value = clone(_resolve(doc, _split(source), source))
            doc = _add(doc, path, value)
        elif kind == "test":
            try:
                actual = _resolve(doc, _split(path), path)
            except APIStatusError as exc:
                raise _invalid(f"{FAILED_TEST_MESSAGE}{path!r} failed: {exc.message}") from exc
            if actual != op.get("value"):
                raise _invalid(
                    f"{FAILED_TEST_MESSAGE}{path!r} failed: expected {op.get('value')!r}, found {actual!r}"
                )
        else:
            raise _invalid(f"unknown JSON patch operation {kind!r}")
    return doc
