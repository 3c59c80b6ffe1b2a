"""What a selector reads, and the mistakes users copy from articles, found statically in its syntax tree.

``reads_of`` tells which device attributes and capacities a selector can look at. Devices that agree on
those values get the same answer, so the selector cache keys results on that projection instead of on the
whole device: eight identical GPUs that differ only in ``uuid`` share one evaluation for a selector that
never reads ``uuid``. Anything the analysis cannot pin down (a domain map passed to a function, an index by
a computed key) widens the projection, up to the whole device; it never narrows it.

``lint`` rejects forms that compile in CEL but can never work on a resource.k8s.io/v1 device: typed
accessors (``device.attributes["model"].string``), field selection on an attribute value (``.gpu.memory``),
and literal arguments that are not quantities or versions. ``checker_hint`` turns the type checker's
messages into the fix.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpudra.allocator.cel.celast import Ast, Node, qualified_name, walk
from gpudra.allocator.cel.celtypes import Quantity, Semver

DEFAULT_DOMAIN = "gpu.nvidia.com"
_ATTRIBUTES, _CAPACITY = "device.attributes", "device.capacity"
_DRIVER, _MULTI = "device.driver", "device.allowMultipleAllocations"
_TYPED_ACCESSORS = {"string", "int", "bool", "version", "quantity"}
_KEYED_READS = {"_[_]", "_[?_]", "_?._"}


@dataclass(frozen=True, slots=True)
class Reads:
    """The parts of ``device`` a selector can observe. ``everything`` means: key on the whole device."""

    driver: bool = False
    multi: bool = False
    attributes: tuple[tuple[str, str], ...] = ()  # (domain, name) read one by one
    attribute_domains: tuple[str, ...] = ()  # domains read as a whole map
    capacity: tuple[tuple[str, str], ...] = ()
    capacity_domains: tuple[str, ...] = ()
    everything: bool = False
    named_attribute_domains: frozenset[str] = frozenset()  # every literal domain, for empty-map filling
    named_capacity_domains: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Finding:
    message: str
    offset: int
    hint: str


def _const_str(node: Node | None) -> str | None:
    if node is not None and node.kind == "const" and isinstance(node.value, str):
        return node.value
    return None


def _domain_access(node: Node, parent: Node | None) -> str | None:
    """The literal domain when ``parent`` looks ``node`` (a domain-map expression) up by a constant key."""
    if parent is None:
        return None
    if parent.kind == "select" and parent.target is node:
        return parent.name
    if parent.kind == "call" and parent.name in _KEYED_READS and parent.args and parent.args[0] is node:
        return _const_str(parent.args[1]) if len(parent.args) > 1 else None
    return None


def _name_access(domain_node: Node, parent: Node | None) -> str | None:
    """The literal attribute name when ``parent`` reads one entry of a domain map ``domain_node``."""
    if parent is None:
        return None
    if parent.kind == "select" and parent.target is domain_node:
        return parent.name
    if parent.kind == "call":
        if parent.name in _KEYED_READS and len(parent.args) == 2 and parent.args[0] is domain_node:
            return _const_str(parent.args[1])
        if parent.name == "@in" and len(parent.args) == 2 and parent.args[1] is domain_node:
            return _const_str(parent.args[0])
    return None


def reads_of(ast: Ast) -> Reads:
    parents: dict[int, Node | None] = {}
    nodes: list[Node] = []
    for node, parent in walk(ast.root):
        parents[id(node)] = parent
        nodes.append(node)
    driver = multi = everything = False
    reads: dict[str, tuple[set[tuple[str, str]], set[str], set[str]]] = {
        _ATTRIBUTES: (set(), set(), set()),
        _CAPACITY: (set(), set(), set()),
    }
    for node in nodes:
        if node.kind == "comprehension" and "device" in node.comp:
            everything = True  # a loop variable shadows `device`: do not try to be clever
        name = qualified_name(node)
        if name is None or not (name == "device" or name.startswith("device.")):
            continue
        parent = parents[id(node)]
        if parent is not None and qualified_name(parent) is not None:
            continue  # only the longest qualified chain counts
        if name == _DRIVER:
            driver = True
        elif name == _MULTI:
            multi = True
        elif name in reads:
            singles, wholes, named = reads[name]
            domain = _domain_access(node, parent)
            if domain is None or parent is None:
                everything = True
                continue
            named.add(domain)
            attr = _name_access(parent, parents[id(parent)])
            if attr is None:
                wholes.add(domain)
            else:
                singles.add((domain, attr))
        elif name.startswith(_ATTRIBUTES + ".") or name.startswith(_CAPACITY + "."):
            # device.attributes.domain.name with a dotless domain: the map lookups of a select chain
            base = _ATTRIBUTES if name.startswith(_ATTRIBUTES) else _CAPACITY
            parts = name[len(base) + 1 :].split(".")
            singles, wholes, named = reads[base]
            named.add(parts[0])
            if len(parts) >= 2:
                singles.add((parts[0], parts[1]))
            else:
                wholes.add(parts[0])
        else:
            everything = True
    (attr_singles, attr_wholes, attr_named), (cap_singles, cap_wholes, cap_named) = reads.values()
    return Reads(
        driver=driver,
        multi=multi,
        attributes=tuple(sorted(attr_singles)),
        attribute_domains=tuple(sorted(attr_wholes)),
        capacity=tuple(sorted(cap_singles)),
        capacity_domains=tuple(sorted(cap_wholes)),
        everything=everything,
        named_attribute_domains=frozenset(attr_named),
        named_capacity_domains=frozenset(cap_named),
    )


def _attribute_value(node: Node) -> tuple[str, str] | None:
    """(domain, name) when ``node`` is ``device.attributes[D].N`` (or ``["N"]``) with literal D and N."""
    if node.kind == "select" and not node.test_only and node.target is not None:
        inner, name = node.target, node.name
    elif node.kind == "call" and node.name == "_[_]" and len(node.args) == 2 and _const_str(node.args[1]):
        inner, name = node.args[0], str(_const_str(node.args[1]))
    else:
        return None
    domain = _domain_map(inner)
    return None if domain is None else (domain, name)


def _domain_map(node: Node) -> str | None:
    is_index = node.kind == "call" and node.name == "_[_]" and len(node.args) == 2
    return _const_str(node.args[1]) if is_index and qualified_name(node.args[0]) == _ATTRIBUTES else None


def _quantity_literal(node: Node | None) -> str | None:
    if node is not None and node.kind == "call" and node.name == "quantity" and node.target is None:
        return _const_str(node.args[0]) if node.args else None
    return None


def _typed_accessor_hint(accessor: str, domain: str, name: str, parent: Node | None) -> str:
    qualified = domain if "." in domain else DEFAULT_DOMAIN
    if accessor == "quantity":
        amount = "40Gi"
        if parent is not None and parent.kind == "call" and parent.name in ("_>=_", "_>_", "_<=_", "_<_"):
            amount = next((q for q in map(_quantity_literal, parent.args) if q), amount)
        op = parent.name.strip("_") if parent is not None and parent.name.startswith("_") else ">="
        return (
            f"capacities live in device.capacity and compare with compareTo: "
            f'device.capacity["{qualified}"].{name}.compareTo(quantity("{amount}")) {op} 0'
        )
    return f'v1 attributes are typed values, read them directly: device.attributes["{qualified}"].{name}'


def lint(ast: Ast) -> Finding | None:
    """The first (leftmost) non-v1 form in the selector, or None."""
    parents: dict[int, Node | None] = {id(node): parent for node, parent in walk(ast.root)}
    findings = [
        f for node, parent in walk(ast.root) if (f := _lint_node(ast, node, parent, parents)) is not None
    ]
    return min(findings, key=lambda f: f.offset) if findings else None


def _lint_node(ast: Ast, node: Node, parent: Node | None, parents: dict[int, Node | None]) -> Finding | None:
    where = ast.positions.get(node.id, 0)
    if node.kind == "select" and node.target is not None and node.name in _TYPED_ACCESSORS:
        domain = _domain_map(node.target)
        if domain is not None and "." not in domain:
            hint = _typed_accessor_hint(node.name, domain, domain, parent)
            return Finding(
                f'"{domain}" is not an attribute domain and `.{node.name}` is not a field', where, hint
            )
    if node.kind == "select" and node.target is not None:
        inner = _attribute_value(node.target)
        if inner is not None:
            domain, name = inner
            if node.name in _TYPED_ACCESSORS:
                hint = _typed_accessor_hint(node.name, domain, name, parents.get(id(node)))
                return Finding(f"attribute values have no `.{node.name}` accessor", where, hint)
            return Finding(
                f"attribute `{name}` is a single int, bool, string or version; it has no field `{node.name}`",
                where,
                f'attribute names have no dots; select one attribute: device.attributes["{domain}"].{name}',
            )
    if node.kind == "call" and node.target is None and node.name in ("quantity", "semver") and node.args:
        literal = _const_str(node.args[0])
        if literal is None:
            return None
        normalize = len(node.args) > 1 and node.args[1].kind == "const" and node.args[1].value is True
        valid = (
            Quantity.is_valid(literal)
            if node.name == "quantity"
            else Semver.is_valid(literal, normalize=normalize)
        )
        if not valid:
            example = 'quantity("40Gi")' if node.name == "quantity" else 'semver("8.0.0")'
            return Finding(
                f"{node.name}({literal!r}): not a valid {node.name}", where, f"for example {example}"
            )
    return None


# an operand the hint can quote: a name, then [".."] lookups, .fields and (..) calls with one level of nesting
_OPERAND = (
    r"""(?:[A-Za-z_][\w.]*"""
    r"""(?:\[\s*"[^"]*"\s*\]|\[\s*'[^']*'\s*\]|\.[A-Za-z_]\w*|\((?:[^()]|\([^()]*\))*\))*)"""
)
_RIGHT = re.compile(rf"\s*({_OPERAND})")


def checker_hint(text: str, message: str, offset: int) -> str:
    """A fix for the type checker's complaint, naming the expression to write where it can."""
    typed = re.search(r"'_(>=|<=|>|<)_' applied to '\((kubernetes\.(?:Quantity|Semver)|dyn), ", message)
    if typed and ("kubernetes.Quantity" in message or "kubernetes.Semver" in message):
        op = typed.group(1)
        before = text[: offset + len(op)]
        left = re.search(rf"({_OPERAND})\s*{re.escape(op)}$", before)
        right = _RIGHT.match(text, offset + len(op))
        if left and right:
            fix = f"{left.group(1)}.compareTo({right.group(1)}) {op} 0"
        else:
            fix = 'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0'
        return (
            "quantities and versions have no relational operators in Kubernetes CEL; "
            f"use compareTo (or isGreaterThan/isLessThan): {fix}"
        )
    if "undeclared reference to 'includes'" in message:
        return "includes() needs the DRAListTypeAttributes feature gate on the API server"
    if "undeclared reference to 'device" in message:
        return "device has driver, attributes, capacity and allowMultipleAllocations"
    if "found no matching overload" in message and "kubernetes.Quantity" in message:
        return "quantities offer compareTo, isGreaterThan, isLessThan, add, sub, sign, isInteger, asInteger"
    if "found no matching overload for '_==_'" in message:
        return "both sides of == must have the same type (CEL does not convert int, double and string)"
    if "undeclared reference" in message:
        return (
            "see the DRA CEL environment: quantity(), semver(), strings, lists, sets, regex, cel.bind, has()"
        )
    return ""
