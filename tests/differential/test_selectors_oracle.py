"""gpudra's selector closures against Kubernetes' CEL: random selectors (tests/celgrammar.py) on random devices,
each asked of Kubernetes' allocator as a one-device scenario (allocated: true, unschedulable: false, a CEL runtime
error: error) and evaluated by ``CompiledSelector.matches``. Selectors that either side refuses to compile are
left out (compile-time differences are not the closures' business; they are counted in the message).

``GPUDRA_ORACLE_SEED`` replays a run, as for the allocator scenarios; ``GPUDRA_ORACLE_SELECTORS`` sets how many
selectors are checked (600 by default, 4 devices each, and half as many of the shapes that get a generated fast
path).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from random import Random
from typing import Any

from _oracle_run import SEED, Oracle, one_line

from celgrammar import DRIVER, device, selector, simple_selector
from gpudra.allocator.cel.selectors import CelCompileError, CelRuntimeError, cel_device, compile_selector
from gpudra.api.dra import Device

SELECTORS = int(os.environ.get("GPUDRA_ORACLE_SELECTORS") or 600)


def scenario(expression: str, wire_device: dict[str, Any]) -> dict[str, Any]:
    pool = {"name": "p", "generation": 1, "resourceSliceCount": 1}
    request = {
        "name": "r",
        "exactly": {
            "deviceClassName": "any",
            "allocationMode": "ExactCount",
            "count": 1,
            "selectors": [{"cel": {"expression": expression}}],
        },
    }
    return {
        "node": {"name": "n1"},
        "slices": [
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": "s"},
                "spec": {"driver": DRIVER, "nodeName": "n1", "pool": pool, "devices": [wire_device]},
            }
        ],
        "classes": [
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceClass",
                "metadata": {"name": "any"},
                "spec": {},
            }
        ],
        "claims": [
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": "c", "namespace": "default", "uid": "c-uid"},
                "spec": {"devices": {"requests": [request]}},
            }
        ],
        "allocated": [],
    }


def kubernetes(oracle: Oracle, expression: str, wire_device: dict[str, Any]) -> object:
    answer = oracle.ask(scenario(expression, wire_device))
    message = answer.get("message", "")
    if answer["outcome"] == "allocated":
        return True
    if answer["outcome"] == "unschedulable":
        return False
    if answer["outcome"] == "error" and "CEL runtime error" in message:
        return "error"
    if answer["outcome"] == "error" and "CEL compile error" in message:
        return None
    raise AssertionError(f"unexpected answer from the oracle: {answer}")


def gpudra(expression: str, wire_device: dict[str, Any]) -> object:
    view = cel_device(DRIVER, Device.model_validate(wire_device))
    try:
        return compile_selector(expression).matches(view)
    except CelRuntimeError:
        return "error"


@dataclass
class _Tally:
    compared: int = 0
    refused: int = 0
    translated: int = 0
    generated: int = 0
    mismatches: list[str] = field(default_factory=list)


def _check(oracle: Oracle, make: Callable[[Random], str], count: int, label: str) -> _Tally:
    tally = _Tally()
    for number in range(count):
        r = Random(f"{SEED}-{label}{number}")
        expression = make(r)
        try:
            compiled = compile_selector(expression)
        except CelCompileError:
            tally.refused += 1
            continue
        tally.translated += compiled.translated
        tally.generated += compiled.generated
        for i in range(4):
            wire_device = device(r, f"d{i}")
            kube = kubernetes(oracle, expression, wire_device)
            if kube is None:
                tally.refused += 1
                break
            tally.compared += 1
            ours = gpudra(expression, wire_device)
            if ours != kube:
                tally.mismatches.append(
                    f"selector {label}{number}: Kubernetes {kube}, gpudra {ours}\n"
                    f"  {one_line(scenario(expression, wire_device))}"
                )
    assert not tally.mismatches, f"{len(tally.mismatches)} of {tally.compared} differ (seed {SEED}):\n" + (
        "\n".join(tally.mismatches[:5])
    )
    return tally


def test_selectors_answer_as_kubernetes_cel(oracle: Oracle) -> None:
    tally = _check(oracle, selector, SELECTORS, "")
    assert tally.compared > SELECTORS, f"only {tally.compared} compared ({tally.refused} refused to compile)"
    assert tally.translated > SELECTORS // 2


def test_selectors_of_the_fast_path_shapes_answer_as_kubernetes_cel(oracle: Oracle) -> None:
    """Selectors of the shapes that get a generated fast path (``celfastpath``): an ``&&`` / ``||`` of tests of
    one attribute against a constant, over values of every type, missing ones included."""
    count = SELECTORS // 2
    tally = _check(oracle, simple_selector, count, "simple-")
    assert tally.compared > count, f"only {tally.compared} compared ({tally.refused} refused to compile)"
    assert tally.generated > count // 2
