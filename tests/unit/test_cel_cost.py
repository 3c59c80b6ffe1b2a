"""A selector's estimated cost is kube-apiserver's number, and a new selector over the limit is refused.

Each cost below is what k8s.io/dynamic-resource-allocation/cel v0.37.2 (the compiler kube-apiserver 1.37 validates
selectors with) estimates for the expression: the first ones are the costs its own tests pin, the others were
computed with that compiler. tests/badinput holds the edge (1,000,000 accepted, 1,000,001 refused) as the real
kube-apiserver answered it."""

from __future__ import annotations

import pytest

from gpudra.allocator.cel.celview import CelDevice
from gpudra.allocator.cel.selectors import (
    COST_LIMIT,
    ITERATION_BUDGET,
    CelCostError,
    CelRuntimeError,
    check_new_selector,
    compile_selector,
    estimated_selector_cost,
)

A = 'device.attributes["gpu.nvidia.com"]'
COSTS = {
    # pinned by Kubernetes' compile_test.go
    'device.attributes["dra.example.com"].exists_one(x, x == "services")': 133,
    'device.attributes.exists_one(x, x == "dra.example.com")': 164,
    'device.capacity["dra.example.com"].exists_one(x, x == "memory")': 133,
    'device.attributes["dra.example.com"].services.split("example").size() >= 2': 19,
    'device.attributes["dra.example.com"].services.matches("[^a]?sym")': 18,
    '"name" in device.capacity["dra.example.com"] && device.capacity["dra.example.com"].name.isGreaterThan('
    'quantity("1Ki"))': 10,
    "device.allowMultipleAllocations == true": 3,
    "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10].all(x, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10].all(y, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]"
    ".all(z, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10].all(z2, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10].all(z3, [1, 2, 3, 4, 5, 6, 7, "
    "8, 9, 10].all(z4, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10].all(z5, int('1'.find('[0-9]*')) < 100)))))))": 85555551,
    # computed with the same compiler
    'device.driver == "x"': 3,
    f'has({A}.productName) && {A}.productName.lowerAscii().contains("h100")': 21,
    f'cel.bind(a, {A}, a.productName == "x" && a.brand == "y")': 19,
    f'{A}.productName.replace("a", "bb").replace("b", "cc").size() > 3': 45,
    f'{A}.productName + {A}.brand == "ab"': 22,
    f'sets.contains(["a", "b"], [{A}.productName])': 27,
    f'{A}.cudaComputeCapability.isGreaterThan(semver("8.0.0")) && {A}.driverVersion == semver("550.0.0")': 18,
    'device.capacity["gpu.nvidia.com"].memory == quantity("80Gi")': 6,
    f'{A}.productName.findAll("[0-9]").size() > 1': 20,
    f'{A}.?productName.orValue("") == "x"': 6,
    "[1,2,3].map(x, x * 2).filter(y, y > 2).size() == 2": 121,
    '{"a": 1, "b": 2}.all(k, k.size() == 1)': 43,
    f'string({A}["n"]) == "x"': 12,
    'device.attributes.all(d, device.attributes[d].all(n, device.attributes[d][n] == "x"))': 10499,
    f"{A}.all(n, {A}.all(m, string({A}[n]).contains(string({A}[m]))))": 78052,
    "device.attributes.all(d, device.attributes[d].all(n, device.attributes.all(e, device.attributes[e].all(m, "
    "device.attributes[e][m] == device.attributes[d][n]))))": 23337219,
    f'{A}.productName.split(",").map(x, x.trim()).exists(x, x == "q")': 2**64 - 1,
}


@pytest.mark.parametrize(("expression", "cost"), sorted(COSTS.items()))
def test_estimated_cost_is_kubernetes_estimate(expression: str, cost: int) -> None:
    assert estimated_selector_cost(expression) == cost


def test_a_new_selector_over_the_limit_is_refused_one_at_it_is_not() -> None:
    base = (
        "device.attributes.all(d, device.attributes[d].all(n, string(device.attributes[d][n]).matches("
        f'"{"a" * 548}"))) && {A}.productName.matches("{"a" * 764}")'
    )
    assert estimated_selector_cost(base) == COST_LIMIT
    check_new_selector(base, list_attributes=False)
    with pytest.raises(CelCostError) as refused:
        check_new_selector(base + " && 1 == 1", list_attributes=False)
    assert refused.value.cost == COST_LIMIT + 1
    assert "over the limit of 1000000" in str(refused.value)


def test_a_selector_over_the_library_iteration_budget_fails_with_a_sentence_naming_it() -> None:
    """Three loops over one domain's 32 attributes (33,824 iterations) cost 662,756, within Kubernetes' limit, and
    kube-scheduler evaluates them; gpudra's CEL library stops at 10,000 iterations. The error says so, instead of
    the library's "INTERNAL: Iteration budget exceeded" (docs/fidelity.md lists the difference)."""
    expression = f"{A}.all(a, {A}.all(b, {A}.all(c, {A}[a] == {A}[c])))"
    assert estimated_selector_cost(expression) == 662756 <= COST_LIMIT
    selector = compile_selector(expression)
    device = CelDevice("gpu.nvidia.com", {f"gpu.nvidia.com/a{i}": "x" for i in range(32)}, {}, False)
    with pytest.raises(CelRuntimeError) as failed:
        selector.matches(device)
    assert str(failed.value) == (
        f"more than {ITERATION_BUDGET} loop iterations in one evaluation: gpudra's CEL library stops there, where "
        "Kubernetes allows any number within a cost of 1000000"
    )
