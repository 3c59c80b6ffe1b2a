"""The worst-case cost of a selector, estimated as kube-apiserver estimates it before it stores one.

kube-apiserver refuses a new selector whose estimated cost exceeds ``COST_LIMIT`` ("too complex, exceeds cost
limit"). Its estimate is cel-go's static cost estimator (``checker.Cost``) with the CEL cost options of
Kubernetes' base environment (a presence test costs nothing, the sets extension's estimators) and Kubernetes'
library estimator, which sizes strings, maps and lists from the largest values a device can hold (the size
estimator of k8s.io/dynamic-resource-allocation/cel). This module computes the same number from the checked
syntax tree: the same rules, the same sizes, the same rounding. It reads the tree as the CEL library here
checks it; where that tree differs from cel-go's (``device.attributes`` is one qualified name here, a select of
a field of ``device`` there) it charges what cel-go charges.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpudra.allocator.cel.celast import DYN, Ast, CelType, Node
from gpudra.allocator.cel.celsizes import (
    DEVICE,
    MAX,
    UNKNOWN,
    Range,
    add,
    factor,
    fixed,
    literal_size,
    mul,
    union,
)

__all__ = ["COST_LIMIT", "estimated_cost"]

COST_LIMIT = 1_000_000  # resource.k8s.io/v1 CELSelectorExpressionMaxCost
_STRING_FACTOR = 0.1  # cel-go's StringTraversalCostFactor
_REGEX_FACTOR = 0.25  # RegexStringLengthCostFactor
_ACCUMULATORS = frozenset({"@result", "@__result__", "__result__"})


# ---- the estimator (cel-go's checker/cost.go with Kubernetes' library estimator) ------------------------------
@dataclass(slots=True)
class _Entry:
    container: str  # list | map
    key: Range
    val: Range


@dataclass(slots=True)
class _Local:
    path: tuple[str, ...] | None
    size: Range | None
    entry: _Entry | None


@dataclass(slots=True)
class _Arg:
    """What a function's estimator sees of an argument (cel-go's AstNode)."""

    node: Node | None
    path: tuple[str, ...] | None
    type: CelType
    size: Range | None


def _go_kind(t: CelType) -> str:
    if t.kind == "message" or (t.kind == "abstract" and t.name.startswith("kubernetes.")):
        return "struct"
    return t.kind


def _scalar(t: CelType) -> bool:
    if t.kind in ("bool", "double", "int", "uint") or (t.kind == "well_known" and t.name != "any"):
        return True
    return t.kind == "abstract" and t.name == "optional_type" and bool(t.params) and _scalar(t.params[0])


class _Coster:
    def __init__(self, ast: Ast) -> None:
        self.ast = ast
        self.paths: dict[int, tuple[str, ...]] = {}
        self.locals: dict[str, list[_Local]] = {}
        self.sizes: dict[int, Range] = {}
        self.entries: dict[int, _Entry] = {}

    # -- sizes and paths
    def type_of(self, node: Node) -> CelType:
        return self.ast.types.get(node.id, DYN)

    def local(self, name: str) -> _Local | None:
        stack = self.locals.get(name)
        return stack[-1] if stack else None

    def push(self, name: str, local: _Local) -> None:
        self.locals.setdefault(name, []).append(local)

    def pop(self, name: str) -> None:
        self.locals[name].pop()

    def path(self, node: Node) -> tuple[str, ...] | None:
        if node.kind == "ident":
            local = self.local(node.name)
            if local is not None:
                return local.path
        return self.paths.get(node.id)

    def size(self, node: Node) -> Range | None:
        if node.id in self.sizes:
            return self.sizes[node.id]
        literal = literal_size(node)
        if literal is not None:
            return literal
        estimated = DEVICE.size(self.path(node))
        if estimated is not None:
            self.sizes[node.id] = estimated
            return estimated
        if _scalar(self.type_of(node)):
            return fixed(1)
        if node.kind == "ident":
            local = self.local(node.name)
            if local is not None and local.size is not None:
                return local.size
        return None

    def size_or_unknown(self, node: Node) -> Range:
        found = self.size(node)
        return UNKNOWN if found is None else found

    def entry(self, node: Node) -> _Entry | None:
        if node.id in self.entries:
            return self.entries[node.id]
        if node.kind == "ident":
            local = self.local(node.name)
            if local is not None:
                return local.entry
        return None

    def arg(self, node: Node) -> _Arg:
        path = self.path(node)
        if path and path[0] in _ACCUMULATORS:
            path = None
        return _Arg(node, path, self.type_of(node), self.size(node))

    def arg_size(self, arg: _Arg) -> Range:
        """Kubernetes' sizeEstimate: the computed size, else the device's, else unknown."""
        if arg.size is not None:
            return arg.size
        found = DEVICE.size(arg.path)
        return UNKNOWN if found is None else found

    # -- costs
    def cost(self, node: Node) -> Range:
        if node.kind == "const":
            return 0, 0
        if node.kind == "ident":
            return self.ident(node)
        if node.kind == "select":
            return self.select(node)
        if node.kind == "call":
            return self.call(node)
        if node.kind == "list":
            return self.create_list(node)
        if node.kind == "struct":
            return self.create_struct(node)
        if node.kind == "comprehension":
            return self.bind(node) if _is_bind(node) else self.comprehension(node)
        return 0, 0

    def ident(self, node: Node) -> Range:
        local = self.local(node.name)
        if local is not None:
            self.paths[node.id] = local.path or ()
            return fixed(1)
        parts = tuple(node.name.split("."))
        self.paths[node.id] = parts
        # device.attributes is one name here, the field attributes of the object device in Kubernetes: an
        # identifier and a select of a struct's field, one each
        return fixed(len(parts))

    def select(self, node: Node) -> Range:
        assert node.target is not None
        if node.test_only:
            return self.cost(node.target)  # has(): Kubernetes' environment gives presence tests no cost
        total = self.cost(node.target)
        if _go_kind(self.type_of(node.target)) in ("map", "struct", "type_param"):
            total = add(total, fixed(1))
        self.paths[node.id] = (*(self.path(node.target) or ()), node.name)
        return total

    def call(self, node: Node) -> Range:
        if node.name == "dyn" and len(node.args) == 1:
            unwrapped = add(fixed(1), self.cost(node.args[0]))
            self.copy_sizes(node, node.args[0])
            return unwrapped
        arg_costs: list[Range] = []
        args: list[_Arg] = []
        for a in node.args:
            arg_costs.append(self.cost(a))
            args.append(self.arg(a))
        ids = self.ast.overloads.get(node.id, ())
        if not ids:
            return 0, 0
        total: Range = (0, 0)
        target: _Arg | None = None
        if node.target is not None:
            total = self.cost(node.target)
            target = self.arg(node.target)
        fn_cost: Range = (MAX, 0)
        result: Range | None = None
        for overload in ids:
            cost, size = self.function_cost(node, overload, target, args, arg_costs)
            fn_cost = union(fn_cost, cost)
            if size is not None:
                result = size if result is None else union(result, size)
            if overload in ("index_list", "index_map") and node.args:
                entry = self.entry(node.args[0])
                result = None if entry is None else entry.val
                step = "@items" if overload == "index_list" else "@values"
                self.paths[node.id] = (*(self.path(node.args[0]) or ()), step)
            if result is None:
                result = self.size(node)
        if result is not None:
            self.sizes[node.id] = result
        return add(total, fn_cost)

    def create_list(self, node: Node) -> Range:
        total: Range = (0, 0)
        item: Range = (0 if not node.args else MAX, 0)
        for element in node.args:
            total = add(total, self.cost(element))
            item = union(item, self.size_or_unknown(element))
        self.entries[node.id] = _Entry("list", fixed(1), item)
        return add(total, fixed(10))

    def create_struct(self, node: Node) -> Range:
        total: Range = (0, 0)
        if node.name:  # a message
            for value in node.args:
                total = add(total, self.cost(value))
            return add(total, fixed(40))
        empty = 0 if not node.args else MAX
        key: Range = (empty, 0)
        val: Range = (empty, 0)
        for k, value in zip(node.keys, node.args, strict=True):
            if isinstance(k, Node):
                total = add(total, self.cost(k))
                key = union(key, self.size_or_unknown(k))
            total = add(total, self.cost(value))
            val = union(val, self.size_or_unknown(value))
        self.entries[node.id] = _Entry("map", key, val)
        return add(total, fixed(30))

    def comprehension(self, node: Node) -> Range:
        iter_var, accu_var, iter_var2 = node.comp
        iter_range, accu_init, condition, step, result = node.parts
        total = add(self.cost(iter_range), self.cost(accu_init))
        self.push(accu_var, _Local(self.path(accu_init), self.size(accu_init), self.entry(accu_init)))
        entry = self.entry(iter_range)
        container = entry.container if entry is not None else self.type_of(iter_range).kind
        base = self.path(iter_range) or ()
        if iter_var2:
            key_step = "@indices" if container == "list" else "@keys"
            val_step = "@items" if container == "list" else "@values"
            self.push(iter_var, _Local((*base, key_step), entry.key if entry else None, None))
            self.push(iter_var2, _Local((*base, val_step), entry.val if entry else None, None))
        elif container == "list":
            self.push(iter_var, _Local((*base, "@items"), entry.val if entry else None, None))
        else:
            self.push(iter_var, _Local((*base, "@keys"), entry.key if entry else None, None))
        loop = self.cost(condition)
        step_cost = self.cost(step)
        self.pop(iter_var)
        if iter_var2:
            self.pop(iter_var2)
        total = add(total, self.cost(result))
        self.pop(accu_var)
        count = self.size_or_unknown(iter_range)
        total = add(total, mul(count, add(step_cost, loop)))
        if accu_init.kind == "const":
            init_size = self.size(accu_init)
            if init_size is not None:
                self.sizes[node.id] = init_size
        elif accu_init.kind in ("list", "struct"):
            self.sizes[node.id] = count
            step_entry = self.entry(step)
            if step_entry is not None:
                self.entries[node.id] = step_entry
        return total

    def bind(self, node: Node) -> Range:
        _, accu_var, _ = node.comp
        iter_range, accu_init, _, _, result = node.parts
        total = add(self.cost(iter_range), self.cost(accu_init))
        self.push(accu_var, _Local(self.path(accu_init), self.size(accu_init), self.entry(accu_init)))
        total = add(total, self.cost(result))
        self.pop(accu_var)
        self.copy_sizes(node, result)
        return total

    def copy_sizes(self, dst: Node, src: Node) -> None:
        size, entry = self.size(src), self.entry(src)
        if size is not None:
            self.sizes[dst.id] = size
        if entry is not None:
            self.entries[dst.id] = entry

    def function_cost(
        self, node: Node, overload: str, target: _Arg | None, args: list[_Arg], arg_costs: list[Range]
    ) -> tuple[Range, Range | None]:
        arg_sum: Range = (0, 0)
        for c in arg_costs:
            arg_sum = add(arg_sum, c)
        sets = _SETS.get(node.name)
        if sets is not None and len(args) == 2:
            product = factor(mul(self.arg_size(args[0]), self.arg_size(args[1])), sets)
            return add(add(product, fixed(1)), arg_sum), None
        library = self.library_cost(node.name, target, args)
        if library is not None:
            return add(library[0], arg_sum), library[1]
        return self.standard_cost(node, overload, target, args, arg_costs, arg_sum)

    def library_cost(
        self, function: str, target: _Arg | None, args: list[_Arg]
    ) -> tuple[Range, Range | None] | None:
        """Kubernetes' CostEstimator.EstimateCallCost, for the functions a selector can call."""
        if function in ("isSorted", "sum", "max", "min", "indexOf", "lastIndexOf", "includes"):
            if target is None:
                return None
            params = target.type.params
            if params:
                element = _Arg(
                    None, None if target.path is None else (*target.path, "@items"), params[0], None
                )
                each: Range = fixed(1)
                if element.type.kind in ("string", "bytes"):
                    each = add(each, factor(self.arg_size(element), _STRING_FACTOR))
                return mul(self.arg_size(target), each), None
            if function == "includes":
                return mul(self.arg_size(target), fixed(1)), None
            return factor(self.arg_size(target), _STRING_FACTOR), None
        if function in ("lowerAscii", "upperAscii", "substring", "trim") and target is not None:
            size = self.arg_size(target)
            return factor(size, _STRING_FACTOR), size
        if function == "replace" and target is not None and len(args) >= 2:
            return self.replace_cost(target, args)
        if function == "split" and target is not None:
            size = self.arg_size(target)
            most = size[1]
            if len(args) > 1 and args[1].node is not None and args[1].node.kind == "const":
                value = args[1].node.value
                if isinstance(value, int) and not isinstance(value, bool):
                    most = value % 2**64
            return factor(size, 2 * _STRING_FACTOR), (0, most)
        if function == "join" and target is not None:
            return self.join_cost(target, args)
        if function in ("find", "findAll") and target is not None and args:
            size = self.arg_size(target)
            text = factor(add(size, fixed(1)), _STRING_FACTOR)
            regex = factor(self.arg_size(args[0]), _REGEX_FACTOR)
            return mul(text, regex), (0, size[1])
        if function in ("quantity", "isQuantity", "semver", "isSemver") and args:
            return factor(self.arg_size(args[0]), _STRING_FACTOR), None
        if function in _CONSTANT_TIME:
            return fixed(1), None
        if function == "_==_" and len(args) == 2:
            lhs, rhs = args[0].type, args[1].type
            if lhs == rhs and lhs.kind == "abstract" and lhs.name in _KUBERNETES_TYPES:
                return fixed(1), None
        return None

    def replace_cost(self, target: _Arg, args: list[_Arg]) -> tuple[Range, Range | None]:
        size = self.arg_size(target)
        old, new = self.arg_size(args[0]), self.arg_size(args[1])
        count_max = retained_max = count_min = retained_min = 0
        if old[0] == 0:
            count_max = size[1] + 1 if size[1] < MAX else size[1]
            retained_max = size[1]
        elif new[1] <= old[0]:
            retained_max = size[1]
        else:
            count_max = math.ceil(float(size[1]) / float(old[0]))
        if old[1] == 0:
            count_min = size[0] + 1 if size[0] < MAX else size[0]
            retained_min = size[0]
        elif old[1] <= new[0]:
            retained_min = size[0]
        else:
            count_min = math.ceil(float(size[0]) / float(old[1]))
        count = (min(count_min, MAX), min(count_max, MAX))
        result = add(mul(count, new), (retained_min, retained_max))
        return factor(size, 2 * _STRING_FACTOR), result

    def join_cost(self, target: _Arg, args: list[_Arg]) -> tuple[Range, Range | None]:
        size: Range = (0, 0)
        count = self.arg_size(target)
        params = target.type.params
        if params:
            element = _Arg(None, None if target.path is None else (*target.path, "@items"), params[0], None)
            size = mul(count, self.arg_size(element))
        if args:
            separators = (max(count[0] - 1, 0), max(count[1] - 1, 0))
            size = add(size, mul(self.arg_size(args[0]), separators))
        return factor(size, _STRING_FACTOR), size

    def standard_cost(
        self,
        node: Node,
        overload: str,
        target: _Arg | None,
        args: list[_Arg],
        arg_costs: list[Range],
        arg_sum: Range,
    ) -> tuple[Range, Range | None]:
        """cel-go's own estimates, by overload."""
        size = self.arg_size_or_unknown
        if overload == "string_format" and target is not None:
            return add(factor(size(target), _STRING_FACTOR), arg_sum), None
        if overload in ("string_to_bytes", "bytes_to_string", "strings_quote") and len(args) == 1:
            length = size(args[0])
            cost = add(factor(length, _STRING_FACTOR), arg_sum)
            if overload == "string_to_bytes":
                return cost, (length[0], min(length[1] * 4, MAX))
            if overload == "bytes_to_string":
                return cost, (length[0] // 4, length[1])
            return cost, (min(length[0] + 2, MAX), min(length[1] * 2 + 2, MAX))
        if overload in ("starts_with_string", "ends_with_string") and len(args) == 1:
            return add(factor(size(args[0]), _STRING_FACTOR), arg_sum), None
        if overload == "in_list" and len(args) == 2:
            return add(factor(size(args[1]), 1), arg_sum), None
        if overload in ("matches", "matches_string"):
            pair: tuple[_Arg, _Arg] | None = None
            if overload == "matches_string" and target is not None and len(args) == 1:
                pair = target, args[0]
            elif overload == "matches" and target is None and len(args) == 2:
                pair = args[0], args[1]
            if pair is not None:
                text = factor(add(size(pair[0]), fixed(1)), _STRING_FACTOR)
                regex = factor(size(pair[1]), _REGEX_FACTOR)
                return add(mul(text, regex), arg_sum), None
        if overload == "contains_string" and target is not None and len(args) == 1:
            text = factor(size(target), _STRING_FACTOR)
            sub = factor(size(args[0]), _STRING_FACTOR)
            return add(mul(text, sub), arg_sum), None
        if overload in ("logical_or", "logical_and"):
            lhs, rhs = arg_costs[0], arg_costs[1]
            return (lhs[0], add(lhs, rhs)[1]), None
        if overload == "conditional":
            result = union(size(args[1]), size(args[2]))
            a, b = self.entry(node.args[1]), self.entry(node.args[2])
            if a is not None and b is not None:
                self.entries[node.id] = _Entry(a.container, union(a.key, b.key), union(a.val, b.val))
            return add(arg_costs[0], union(arg_costs[1], arg_costs[2])), result
        if overload in ("add_string", "add_bytes", "add_list") and len(args) == 2:
            result = add(size(args[0]), size(args[1]))
            a, b = self.entry(node.args[0]), self.entry(node.args[1])
            if a is not None and b is not None:
                self.entries[node.id] = _Entry(a.container, union(a.key, b.key), union(a.val, b.val))
            if overload == "add_list":
                return add(fixed(1), arg_sum), result
            return add(factor(result, _STRING_FACTOR), arg_sum), result
        if overload in _COMPARISONS:
            smallest = min(size(args[0])[1], size(args[1])[1])
            return add(factor((1 if smallest > 0 else 0, smallest), _STRING_FACTOR), arg_sum), None
        return add(fixed(1), arg_sum), None

    def arg_size_or_unknown(self, arg: _Arg) -> Range:
        """cel-go's sizeOrUnknown of an argument: its computed size only."""
        return UNKNOWN if arg.size is None else arg.size


_SETS = {"sets.contains": 1.0, "sets.intersects": 1.0, "sets.equivalent": 2.0}
_CONSTANT_TIME = frozenset(
    {
        "sign",
        "asInteger",
        "isInteger",
        "asApproximateFloat",
        "isGreaterThan",
        "isLessThan",
        "compareTo",
        "add",
    }
    | {"sub", "major", "minor", "patch"}
)
_KUBERNETES_TYPES = frozenset({"kubernetes.Quantity", "kubernetes.Semver"})
_COMPARISONS = frozenset(
    {"less_string", "greater_string", "less_equals_string", "greater_equals_string", "less_bytes"}
    | {"greater_bytes", "less_equals_bytes", "greater_equals_bytes", "equals", "not_equals"}
)


def _is_bind(node: Node) -> bool:
    iter_range, _, condition, _, _ = node.parts
    return (
        iter_range.kind == "list"
        and not iter_range.args
        and condition.kind == "const"
        and condition.value is False
        and node.comp[1] not in _ACCUMULATORS
    )


def estimated_cost(ast: Ast) -> int:
    """The worst-case cost kube-apiserver estimates for the checked selector ``ast`` (cel-go's ``Max``)."""
    return _Coster(ast).cost(ast.root)[1]
