"""Request bodies read as kube-apiserver reads them: its size limit, media types, nesting depth, YAML alias limit,
duplicate keys and invalid Unicode, with its status codes and words.

Pure functions over bytes; server.py calls them. Where Python cannot follow Go (nesting deeper than
``DEPTH_LIMIT``: parsing and validating a deeper object recurses past Python's stack), the refusal says so.
"""

from __future__ import annotations

import contextlib
import json
import math
import operator
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any

import yaml
from yaml.events import AliasEvent
from yaml.nodes import Node

from .status import APIStatusError, bad_request
from .validation.fielderrors import go_quote

MAX_BODY = 3 * 1024 * 1024
"""kube-apiserver's limit on a request body (``--max-request-bytes``' default): 413 above it."""
GO_MAX_DEPTH = 10_000
"""The nesting depth Go's JSON and YAML decoders refuse beyond."""
DEPTH_LIMIT = 200
"""The nesting depth the embedded server refuses beyond (kube-apiserver accepts up to GO_MAX_DEPTH)."""
JSON = "application/json"
YAML = "application/yaml"
PROTOBUF = "application/vnd.kubernetes.protobuf"
STRATEGIC = "application/strategic-merge-patch+json"
PATCH_TYPES = (
    "application/json-patch+json",
    "application/merge-patch+json",
    STRATEGIC,
    "application/apply-patch+yaml",
)
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_SQUARE = bytes.maketrans(b"{}", b"[]")
_RUNS = re.compile(rb"[\[{]+|[\]}]+")


@dataclass
class Body:
    """A decoded body and what a strict decoding would refuse in it."""

    value: Any
    duplicates: list[tuple[str, str]] = field(default_factory=list)
    """Duplicate keys, the last value kept, as Go's strict decoding reports them: (field path, words), the words
    ``duplicate field "data.a"`` (JSON), or ('', go-yaml's ``yaml: unmarshal errors:`` with ``line 7: key "a"
    already set in map``) (YAML)."""


class NotJSON(APIStatusError):
    """A body that JSON's parser refuses (400)."""

    def __init__(self, message: str) -> None:
        super().__init__(400, "BadRequest", message)


def parse(raw: bytes, ctype: str, kind: str, *, duplicates: bool, trusted: bool = False) -> Body:
    """A JSON or YAML body (``ctype``: its media type); YAML that looks like JSON is read by JSON's parser first,
    ten times faster (clients send a server-side apply's YAML as JSON), and as YAML when that fails (flow style).
    A patch nested deeper than Go reads is an ``invalid JSON patch``. ``trusted``: JSON the server's own process
    wrote with ``json.dumps`` (local.py), which is neither deep nor has duplicate keys: those two checks, which
    double the time a 128-device ResourceSlice takes to read, are skipped."""
    deep = raw.count(b"[") + raw.count(b"{") > GO_MAX_DEPTH
    if deep and ctype in PATCH_TYPES[:3] and json_depth(raw) > GO_MAX_DEPTH:
        raise bad_request("invalid JSON patch")
    body: Body | None = None
    if "yaml" not in ctype:
        body = parse_json(raw, kind, duplicates=duplicates, trusted=trusted)
    elif raw.lstrip().startswith(b"{"):
        with contextlib.suppress(NotJSON):
            body = parse_json(raw, kind, duplicates=duplicates, trusted=trusted)
    if body is None:
        body = parse_yaml(raw, kind)
    if ctype not in PATCH_TYPES:
        _check_type_fields(body.value, raw, kind)
    return body


_GO_JSON_TYPES = {bool: "bool", int: "number", float: "number", str: "string", list: "array", dict: "object"}
_TYPE_META_STRUCT = (
    'struct { APIVersion string "json:\\"apiVersion,omitempty\\""; Kind string "json:\\"kind,omitempty\\"" }'
)


def _check_type_fields(value: Any, raw: bytes, kind: str) -> None:
    """An object whose apiVersion and kind are strings (or absent): kube-apiserver reads those two first."""
    if not isinstance(value, dict):
        go_type = _GO_JSON_TYPES.get(type(value), "null")
        why = f"json: cannot unmarshal {go_type} into Go value of type {_TYPE_META_STRUCT}"
        raise _unrecognized(kind, raw, f"couldn't get version/kind; json parse error: {why}")
    for name in ("apiVersion", "kind"):
        field_value = value.get(name)
        if field_value is not None and not isinstance(field_value, str):
            go_type = _GO_JSON_TYPES.get(type(field_value), "object")
            why = f"json: cannot unmarshal {go_type} into Go struct field .{name} of type string"
            raise _unrecognized(kind, raw, f"couldn't get version/kind; json parse error: {why}")


def media_type(header: str | None) -> str:
    """The media type of a Content-Type header, without parameters; JSON when there is none."""
    return (header or JSON).split(";")[0].strip().lower() or JSON


def too_large() -> APIStatusError:
    return APIStatusError(413, "RequestEntityTooLarge", f"Request entity too large: limit is {MAX_BODY}")


def check_media_type(method: str, ctype: str, custom: bool) -> None:
    """415 for a body kube-apiserver cannot read: only JSON, YAML and (built-in kinds) protobuf are objects,
    and only the four patch types (no strategic merge for custom resources) are patches."""
    if method == "PATCH":
        if ctype not in PATCH_TYPES:
            raise APIStatusError(415, "UnsupportedMediaType", "415: Unsupported Media Type")
        if custom and ctype == STRATEGIC:
            raise _unknown_format(", ".join(t for t in PATCH_TYPES if t != STRATEGIC))
        return
    if ctype not in (JSON, YAML, PROTOBUF) or (custom and ctype == PROTOBUF):
        raise _unknown_format(", ".join((JSON, YAML) if custom else (JSON, YAML, PROTOBUF)))


def _unknown_format(accepted: str) -> APIStatusError:
    return APIStatusError(
        415,
        "UnsupportedMediaType",
        f"the body of the request was in an unknown format - accepted media types include: {accepted}",
    )


def _unrecognized(kind: str, raw: bytes, why: str) -> APIStatusError:
    """kube-apiserver's 400 for a body it cannot even read the kind of, quoting the body's first 30 bytes."""
    head = raw[:30]
    quoted = head.decode(errors="replace") if raw.lstrip().startswith(b"{") else head.hex()
    return bad_request(
        f"the object provided is unrecognized (must be of type {kind}): {why} "
        f"({quoted}{' ...' if len(raw) > 30 else ''})"
    )


def _too_deep(kind: str, raw: bytes, depth: int, go_words: str) -> APIStatusError:
    if depth > GO_MAX_DEPTH:
        return _unrecognized(kind, raw, go_words)
    return _unrecognized(
        kind,
        raw,
        f"nested {depth} levels deep: the embedded API server reads at most {DEPTH_LIMIT} "
        f"(kube-apiserver {GO_MAX_DEPTH})",
    )


# ---- JSON ------------------------------------------------------------------------------------------------------
def _depths(brackets: bytes) -> tuple[list[bytes], list[int]]:
    """The runs of ``brackets`` (``[{[``, ``]}``, ... alternating) and the depth after each (a run's length,
    closing runs negated, summed): C speed, but one object per run."""
    runs = _RUNS.findall(brackets)
    lengths = list(map(len, runs))
    first_closing = 0 if runs and runs[0][:1] in (b"]", b"}") else 1
    lengths[first_closing::2] = map(operator.neg, lengths[first_closing::2])
    return runs, list(accumulate(lengths))


def _brackets(raw: bytes) -> bytes:
    """The brackets of a JSON text outside its strings."""
    return _JSON_STRING.sub(b"", raw).translate(None, _NOT_BRACKETS)


def json_depth(raw: bytes) -> int:
    """The deepest nesting of arrays and objects in a JSON text, in time linear in its size.

    Each pass removes the innermost pairs (``[]``, ``{}``) at C speed and takes one level off; passes go on while
    they shrink what is left by a tenth or more (so they cost at most ten times the text). Then what is left is
    short, or has few innermost pairs, which is to say few runs: its runs are counted (``_depths``)."""
    brackets, passes = _brackets(raw).translate(_SQUARE), 0
    while len(brackets) > 4096:
        inner = brackets.replace(b"[]", b"")
        if len(inner) > 0.9 * len(brackets):
            break
        brackets, passes = inner, passes + 1
    return passes + max(_depths(brackets)[1], default=0)


def _opening_past(raw: bytes, limit: int) -> str:
    """The bracket that first goes deeper than ``limit`` (Go names it: ``invalid character '['``)."""
    runs, depths = _depths(_brackets(raw))
    for run, depth in zip(runs, depths, strict=True):
        if depth > limit:
            return chr(run[limit - (depth - len(run))])
    return "["


class _Pairs(list[tuple[str, Any]]):
    """An object's members in order, kept only to find the paths of duplicate keys."""


def _duplicate_paths(value: Any, path: str, found: list[str]) -> None:
    if isinstance(value, _Pairs):
        seen: set[str] = set()
        for key, member in value:
            child = f"{path}.{key}" if path else key
            if key in seen and child not in found:
                found.append(child)
            seen.add(key)
            _duplicate_paths(member, child, found)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _duplicate_paths(item, f"{path}[{i}]", found)


def _fix_surrogates(value: Any) -> Any:
    """Lone UTF-16 surrogates (``\\udcff``) become U+FFFD, as Go's decoder makes them."""
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {_SURROGATE.sub("\ufffd", k): _fix_surrogates(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_fix_surrogates(v) for v in value]
    return value


def parse_json(raw: bytes, kind: str, *, duplicates: bool = True, trusted: bool = False) -> Body:
    """A JSON body; invalid UTF-8 and lone surrogates read as U+FFFD, too deep refused, NaN and Infinity (Python
    reads them, JSON and Go do not) refused, and (``duplicates``: the request's field validation reports them;
    finding them doubles the parse time) duplicate keys found."""
    if not trusted and raw.count(b"[") + raw.count(b"{") > DEPTH_LIMIT:
        depth = json_depth(raw)
        if depth > DEPTH_LIMIT:
            bracket = _opening_past(raw, GO_MAX_DEPTH)
            why = f"couldn't get version/kind; json parse error: invalid character '{bracket}' exceeded max depth"
            raise _too_deep(kind, raw, depth, why)
    text = raw.decode("utf-8", errors="replace")
    duplicated = False

    def members(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        nonlocal duplicated
        obj = dict(pairs)
        duplicated = duplicated or len(obj) != len(pairs)
        return obj

    def constant(name: str) -> float:
        where = "in numeric literal" if name.startswith("-") else "looking for beginning of value"
        why = (
            f"couldn't get version/kind; json parse error: invalid character '{name.lstrip('-')[0]}' {where}"
        )
        raise _unrecognized(kind, raw, why)

    try:
        hook = members if duplicates and not trusted else None
        value = json.loads(text, object_pairs_hook=hook, parse_constant=constant)
    except ValueError as exc:
        raise NotJSON(f"the request body is not valid JSON: {exc}") from exc
    paths: list[str] = []
    if duplicated:
        _duplicate_paths(json.loads(text, object_pairs_hook=_Pairs), "", paths)
    if _SURROGATE_ESCAPE.search(raw):
        value = _fix_surrogates(value)
    return Body(value, [(path, f"duplicate field {go_quote(path)}") for path in paths])


# ---- YAML ------------------------------------------------------------------------------------------------------
def allowed_alias_ratio(decodes: int) -> float:
    """go-yaml's bound on aliases per decoded node, by the document's size in nodes (decode.go)."""
    low, high = 400_000, 4_000_000
    if decodes <= low:
        return 0.99
    if decodes >= high:
        return 0.10
    return 0.99 - 0.89 * (decodes - low) / (high - low)


def _excessive_aliasing(decodes: int, aliases: int) -> bool:
    """go-yaml's test, on the whole document's counts (it checks as it goes)."""
    return aliases > 100 and decodes > 1000 and aliases / decodes > allowed_alias_ratio(decodes)


class _GoWords(yaml.YAMLError):
    """A YAML document kube-apiserver cannot turn into JSON, in its words (``json: unsupported value: +Inf``)."""

    def __init__(self, words: str) -> None:
        super().__init__(words)
        self.words = words


def _go_float(value: float) -> str:
    """A float as Go's strconv.FormatFloat(f, 'g', -1, 64) writes it, for the usual values."""
    return str(int(value)) if value.is_integer() and abs(value) < 1e21 else repr(value)


_GO_FLOAT = re.compile(r"^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$")
"""go-yaml's float (YAML 1.1 wants a dot: ``1e3`` would be a string)."""


class _GoLoader(yaml.SafeLoader):
    """A SafeLoader that reads as sigs.k8s.io/yaml (go-yaml, then JSON) does: timestamps stay strings, ``!!binary``
    is its decoded text, a ``!!set`` is a map of nulls, ``1e3`` is a float, map keys are strings (a null key, an
    infinite or NaN number cannot become JSON: refused in Go's words). It also counts what go-yaml counts, as if
    every alias were expanded, the nodes decoded and those decoded inside an alias; and the nesting depth, while it
    composes (the composed graph shares aliased nodes: nothing is expanded here)."""

    def __init__(self, stream: bytes) -> None:
        super().__init__(stream)
        self.sizes: dict[int, tuple[int, int]] = {}
        self.open: list[list[int]] = []
        self.decodes = self.aliases = 0
        self.too_deep_at = 0
        self.bad_escape_at = 0

    def compose_node(self, parent: Node | None, index: int) -> Node | None:
        if self.check_event(AliasEvent):
            node = super().compose_node(parent, index)
            if node is None or id(node) not in self.sizes:
                raise yaml.YAMLError("an anchor's value contains itself")
            decodes, _ = self.sizes[id(node)]
            self._count(1 + decodes, decodes)  # go-yaml counts every node decoded inside an alias
            return node
        if len(self.open) >= DEPTH_LIMIT:
            self.too_deep_at = self.get_mark().line + 1
            raise yaml.YAMLError("too deep")
        self.open.append([0, 0])
        node = super().compose_node(parent, index)
        if node is None:
            return None
        if isinstance(node, yaml.ScalarNode) and _SURROGATE.search(str(node.value)):
            self.bad_escape_at = node.start_mark.line + 1
            raise yaml.YAMLError("a lone surrogate")
        decodes, aliases = self.open.pop()
        self.sizes[id(node)] = (1 + decodes, aliases)
        self._count(1 + decodes, aliases)
        return node

    def _count(self, decodes: int, aliases: int) -> None:
        if self.open:
            self.open[-1][0] += decodes
            self.open[-1][1] += aliases
        else:
            self.decodes += decodes
            self.aliases += aliases

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        """Keys as JSON has them, strings (``true`` and ``1`` are two keys, not one Python key)."""
        self.flatten_mapping(node)
        out: dict[str, Any] = {}
        for key_node, value_node in node.value:
            key = self.construct_object(key_node, deep=deep)
            value = self.construct_object(value_node, deep=deep)
            if key is None:
                raise _GoWords(f"unsupported map key of type: %!s(<nil>), key: <nil>, value: {value}")
            if isinstance(key, list | dict):
                raise yaml.constructor.ConstructorError(
                    None, None, "a map key must be a scalar", key_node.start_mark
                )
            if isinstance(key, bool):
                out["true" if key else "false"] = value
            elif isinstance(key, float):
                out[_go_float(key)] = value
            else:
                out[str(key)] = value
        return out

    def construct_go_float(self, node: yaml.ScalarNode) -> float:
        value: float = self.construct_yaml_float(node)
        if math.isinf(value) or math.isnan(value):
            raise _GoWords(
                f"json: unsupported value: {'NaN' if math.isnan(value) else ('+Inf' if value > 0 else '-Inf')}"
            )
        return value

    def construct_text(self, node: yaml.ScalarNode) -> str:
        return str(self.construct_scalar(node))

    def construct_binary_text(self, node: yaml.ScalarNode) -> str:
        return bytes(self.construct_yaml_binary(node)).decode("utf-8", errors="replace")

    def construct_set_of_nulls(self, node: yaml.MappingNode) -> Iterator[dict[str, Any]]:
        data: dict[str, Any] = {}
        yield data
        data.update({key: None for key in self.construct_mapping(node)})


_GoLoader.add_constructor("tag:yaml.org,2002:timestamp", _GoLoader.construct_text)
_GoLoader.add_constructor("tag:yaml.org,2002:binary", _GoLoader.construct_binary_text)
_GoLoader.add_constructor("tag:yaml.org,2002:set", _GoLoader.construct_set_of_nulls)
_GoLoader.add_constructor("tag:yaml.org,2002:float", _GoLoader.construct_go_float)
_GoLoader.add_implicit_resolver("tag:yaml.org,2002:float", _GO_FLOAT, list("-+.0123456789"))


def _yaml_duplicates(node: Node, found: list[str], seen_nodes: set[int]) -> None:
    """go-yaml's words for each duplicate key, each node once (an aliased node is one node)."""
    if id(node) in seen_nodes:
        return
    seen_nodes.add(id(node))
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key, member in node.value:
            name = str(key.value)
            if name in seen:
                found.append(f'line {key.start_mark.line + 1}: key "{name}" already set in map')
            seen.add(name)
            _yaml_duplicates(member, found, seen_nodes)
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            _yaml_duplicates(item, found, seen_nodes)


def _line_past(raw: bytes, limit: int) -> int:
    """The line on which a flow-style YAML text first nests deeper than ``limit`` (quotes not considered)."""
    depth = 0
    for number, line in enumerate(raw.splitlines(), 1):
        depth += line.count(b"[") + line.count(b"{")
        if depth > limit:
            return number
        depth -= line.count(b"]") + line.count(b"}")
    return number if raw else 1


def parse_yaml(raw: bytes, kind: str) -> Body:
    """A YAML body: go-yaml's alias limit ("excessive aliasing") and nesting depth, duplicate keys found (as
    go-yaml words them: ``line 7: key "a" already set in map``)."""
    if raw.count(b"[") + raw.count(b"{") > DEPTH_LIMIT:  # PyYAML's scanner is quadratic in flow depth
        depth = json_depth(raw)
        if depth > DEPTH_LIMIT:
            line = _line_past(raw, GO_MAX_DEPTH)
            raise _too_deep(kind, raw, depth, f"yaml: line {line}: exceeded max depth of {GO_MAX_DEPTH}")
    try:
        loader = _GoLoader(raw)
    except yaml.YAMLError as exc:  # the reader refuses a control character at once
        raise bad_request(f"the request body is not valid YAML: {exc}") from exc
    try:
        node = loader.get_single_node()
        if _excessive_aliasing(loader.decodes, loader.aliases):
            raise _unrecognized(kind, raw, "yaml: document contains excessive aliasing")
        value = loader.construct_document(node) if node is not None else None
    except yaml.YAMLError as exc:
        if isinstance(exc, _GoWords):
            raise _unrecognized(kind, raw, exc.words) from exc
        if loader.too_deep_at:  # in block style
            why = f"yaml: line {loader.too_deep_at}: exceeded max depth of {GO_MAX_DEPTH}"
            raise _too_deep(kind, raw, DEPTH_LIMIT + 1, why) from exc
        if loader.bad_escape_at:
            why = f"yaml: line {loader.bad_escape_at}: found invalid Unicode character escape code"
            raise _unrecognized(kind, raw, why) from exc
        raise bad_request(f"the request body is not valid YAML: {exc}") from exc
    finally:
        loader.dispose()
    duplicates: list[str] = []
    if node is not None:
        _yaml_duplicates(node, duplicates, set())
    found = [("", "yaml: unmarshal errors:\n  " + "\n  ".join(duplicates))] if duplicates else []
    if loader.aliases:  # an alias is a copy, not the same object: a write to one must not change the other
        value = json.loads(json.dumps(value))
    return Body(value, found)
