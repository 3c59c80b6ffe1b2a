"""Random allocation scenarios in resource.k8s.io/v1 wire form, for gpudra's allocator and Kubernetes' own.

A scenario is what one Allocate call on node ``n1`` sees: ResourceSlices (several pools and drivers, node-local,
other-node, allNodes, nodeSelector and perDeviceNodeSelection slices, counters-only slices, older generations,
incomplete and over-counted pools, duplicate device names), DeviceClasses, the claims of one pod, and the results
of claims allocated before (exclusive devices, shares of multi-allocatable devices, adminAccess results).

Every object is one the API server accepts (requestPolicy only on multi-allocatable devices, with a valid
default; counters and devices in separate slices; one nodeSelector term). Values are drawn from small
vocabularies so that selectors, constraints and counters collide often, and devices lack attributes or carry
them with another type often enough that selectors fail at runtime on some devices and not others.

About one scenario in six has list-typed attributes (DRAListTypeAttributes, ``"listTypeAttributes": true``, which
the oracle answers with the allocator implementation that supports them): devices carry ``peers`` (strings) and
``ranks`` (ints) as lists or as scalars, and claims select with ``includes()`` and ``in`` and constrain them with
``matchAttribute``/``distinctAttribute``.
"""

from __future__ import annotations

from random import Random
from typing import Any

from hypothesis import strategies as st

DRIVER = "gpu.nvidia.com"
OTHER_DRIVER = "net.example.com"
NODE = "n1"
NAMESPACE = "default"

Json = dict[str, Any]

CLASSES: list[Json] = [
    {"metadata": {"name": name}, "spec": {"selectors": [{"cel": {"expression": e}} for e in exprs]}}
    for name, exprs in (
        ("gpu", ['device.driver == "gpu.nvidia.com" && device.attributes["gpu.nvidia.com"].type == "gpu"']),
        ("mig", ['device.driver == "gpu.nvidia.com" && device.attributes["gpu.nvidia.com"].type == "mig"']),
        ("strict", ['device.attributes["gpu.nvidia.com"].type == "gpu"']),
        ("any", []),
        (
            "safe",
            [
                'device.driver == "gpu.nvidia.com"',
                'has(device.attributes["gpu.nvidia.com"].type) && device.attributes["gpu.nvidia.com"].type != "mig"',
            ],
        ),
    )
]

SELECTORS = [
    "true",
    'device.attributes["gpu.nvidia.com"].type == "gpu"',
    'has(device.attributes["gpu.nvidia.com"].group) && device.attributes["gpu.nvidia.com"].group <= 1',
    'device.attributes["gpu.nvidia.com"].model == 1',
    'device.attributes["gpu.nvidia.com"].model >= 1',
    'has(device.attributes["gpu.nvidia.com"].model) && device.attributes["gpu.nvidia.com"].model != 0',
    'device.attributes["gpu.nvidia.com"].healthy',
    'device.attributes["gpu.nvidia.com"].group in [0, 1]',
    'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("50Gi")) >= 0',
    'device.attributes["example.com"].zone == "a"',
    "device.allowMultipleAllocations == true",
]

CONSTRAINT_ATTRIBUTES = [
    "gpu.nvidia.com/group",
    "gpu.nvidia.com/model",
    "gpu.nvidia.com/parentUUID",
    "example.com/zone",
]

LIST_SELECTORS = [
    'device.attributes["gpu.nvidia.com"].peers.includes("p1")',
    'has(device.attributes["gpu.nvidia.com"].peers) && device.attributes["gpu.nvidia.com"].peers.includes("p2")',
    '"p0" in device.attributes["gpu.nvidia.com"].peers',
    'has(device.attributes["gpu.nvidia.com"].ranks) && device.attributes["gpu.nvidia.com"].ranks.includes(1)',
    'device.attributes["gpu.nvidia.com"].ranks.exists(r, r >= 2)',
]

LIST_CONSTRAINT_ATTRIBUTES = ["gpu.nvidia.com/peers", "gpu.nvidia.com/peers", "gpu.nvidia.com/ranks"]

TOLERATIONS: list[Json] = [
    {"key": "k1", "operator": "Exists"},
    {"key": "k1", "operator": "Equal", "value": "v1"},
    {"operator": "Exists", "effect": "NoSchedule"},
    {"key": "k2", "operator": "Exists", "effect": "NoExecute"},
]

TAINTS: list[Json] = [
    {"key": "k1", "value": "v1", "effect": "NoSchedule"},
    {"key": "k1", "value": "v2", "effect": "NoExecute"},
    {"key": "k2", "effect": "NoExecute"},
    {"key": "k3", "effect": "None"},
]

RACK_SELECTOR: Json = {
    "nodeSelectorTerms": [{"matchExpressions": [{"key": "rack", "operator": "In", "values": ["r1"]}]}]
}


def _maybe(rng: Random, probability: float) -> bool:
    return rng.random() < probability


# ---------------------------------------------------------------- devices


def _attributes(rng: Random, lists: bool) -> Json:
    attrs: Json = {}
    kind = None if _maybe(rng, 0.015) else rng.choice(["gpu", "gpu", "gpu", "mig"])
    if kind is not None:
        attrs["type"] = {"string": kind}
    model = rng.choice([0, 1, 2, 1, 1, 2, None, "x"])
    if isinstance(model, int):
        attrs[rng.choice(["model", "gpu.nvidia.com/model"])] = {"int": model}
    elif model is not None:
        attrs["model"] = {"string": model}
    group = rng.choice([0, 1, 2, 0, 1, 2, None])
    if group is not None:
        attrs["group"] = {"int": group}
    if _maybe(rng, 0.5):
        attrs["parentUUID"] = {"string": rng.choice(["GPU-0", "GPU-1"])}
    healthy = rng.choice([True, True, True, False, None, "yes"])
    if isinstance(healthy, bool):
        attrs["healthy"] = {"bool": healthy}
    elif healthy is not None:
        attrs["healthy"] = {"string": healthy}
    if _maybe(rng, 0.75):
        attrs["example.com/zone"] = {"string": rng.choice(["a", "b"])}
    if lists:
        _list_attributes(rng, attrs)
    return attrs


def _list_attributes(rng: Random, attrs: Json) -> None:
    """``peers`` and ``ranks`` as lists (now and then a scalar, a list of one to constraints), sometimes absent."""
    if _maybe(rng, 0.85):
        peers = rng.sample(["p0", "p1", "p2", "p3"], rng.choice([1, 1, 2, 2, 3]))
        attrs["peers"] = {"string": peers[0]} if _maybe(rng, 0.15) else {"strings": peers}
    if _maybe(rng, 0.5):
        ranks = rng.sample([0, 1, 2], rng.randint(1, 2))
        attrs["ranks"] = {"int": ranks[0]} if _maybe(rng, 0.2) else {"ints": ranks}


def _capacity(rng: Random, multi: bool) -> Json:
    value = rng.choice(["40Gi", "80Gi"])
    memory: Json = {"value": value}
    if multi:
        policy = rng.choice(["none", "default", "range", "range-max", "values"])
        if policy == "default":
            memory["requestPolicy"] = {"default": "20Gi"}
        elif policy == "range":
            memory["requestPolicy"] = {"default": "10Gi", "validRange": {"min": "10Gi", "step": "10Gi"}}
        elif policy == "range-max":
            memory["requestPolicy"] = {
                "default": "10Gi",
                "validRange": {"min": "10Gi", "max": "30Gi", "step": "10Gi"},
            }
        elif policy == "values":
            memory["requestPolicy"] = {"default": "10Gi", "validValues": ["10Gi", "20Gi", "40Gi"]}
    capacity: Json = {"memory": memory}
    if _maybe(rng, 0.2):
        capacity["cores"] = {"value": rng.choice(["4", "8"])}
    return capacity


def _device(rng: Random, name: str, counter_sets: list[str], per_device: bool, lists: bool) -> Json:
    multi = _maybe(rng, 0.15)
    device: Json = {"name": name, "attributes": _attributes(rng, lists), "capacity": _capacity(rng, multi)}
    if multi:
        device["allowMultipleAllocations"] = True
    if _maybe(rng, 0.1):
        device["taints"] = [rng.choice(TAINTS)]
    if counter_sets and _maybe(rng, 0.8):
        counter_set = rng.choice([*counter_sets, "cs-missing"] if _maybe(rng, 0.01) else counter_sets)
        device["consumesCounters"] = [
            {"counterSet": counter_set, "counters": {"mem": {"value": str(rng.randint(1, 4))}}}
        ]
    if _maybe(rng, 0.05):
        device["bindingConditions"] = ["ready"]
        device["bindingFailureConditions"] = ["failed"]
    if per_device:
        where = rng.choice(["node", "node", "other", "all"])
        if where == "node":
            device["nodeName"] = NODE
        elif where == "other":
            device["nodeName"] = "n2"
        else:
            device["allNodes"] = True
    return device


# ---------------------------------------------------------------- pools and slices


def _placement(rng: Random) -> str:
    return rng.choice(["node"] * 6 + ["other-node", "all-nodes", "node-selector", "per-device"])


def _node_fields(placement: str) -> Json:
    if placement == "node":
        return {"nodeName": NODE}
    if placement == "other-node":
        return {"nodeName": "n2"}
    if placement == "all-nodes":
        return {"allNodes": True}
    if placement == "node-selector":
        return {"nodeSelector": RACK_SELECTOR}
    return {"perDeviceNodeSelection": True}


def _pool(rng: Random, driver: str, pool: str, placement: str, lists: bool) -> list[Json]:
    prefix = "" if driver == DRIVER else "net-"  # slice names are unique in the cluster
    generation = rng.randint(1, 2)
    partitionable = _maybe(rng, 0.3)
    counter_sets = ["cs-0", "cs-1"][: rng.randint(1, 2)] if partitionable else []
    n_slices = rng.randint(1, 2)
    names: list[str] = []
    specs: list[Json] = []
    for s in range(n_slices):
        devices = []
        for _ in range(rng.randint(0 if n_slices > 1 else 1, 5)):
            name = f"d{len(names)}"
            if names and _maybe(rng, 0.01):
                name = names[0]  # a duplicate device name makes the pool invalid
            names.append(name)
            devices.append(_device(rng, name, counter_sets, placement == "per-device", lists))
        specs.append({"name": f"{prefix}{pool}-s{s}", "devices": devices})
    if partitionable:
        counters = [
            {"name": cs, "counters": {"mem": {"value": str(rng.randint(2, 8))}}} for cs in counter_sets
        ]
        # A counters-only slice (the 1.35 layout); it names a node like the device slices of the pool.
        specs.append({"name": f"{prefix}{pool}-counters", "sharedCounters": counters})
    count = len(specs)
    shape = rng.choice(["complete"] * 18 + ["incomplete", "over-counted"])
    if shape == "incomplete":
        count += 1
    elif shape == "over-counted" and count > 1:
        count -= 1
    node_fields = _node_fields(placement)
    counter_node = {"nodeName": NODE} if placement == "per-device" else node_fields
    slices = []
    for spec in specs:
        body: Json = {
            "driver": driver,
            "pool": {"name": pool, "generation": generation, "resourceSliceCount": count},
        }
        if "sharedCounters" in spec:
            body.update(counter_node)
            body["sharedCounters"] = spec["sharedCounters"]
        else:
            body.update(node_fields)
            if spec["devices"]:
                body["devices"] = spec["devices"]
        slices.append({"metadata": {"name": spec["name"]}, "spec": body})
    if _maybe(rng, 0.15):
        # A slice of an older generation: never allocated from.
        old = _device(rng, f"old{rng.randint(0, 1)}", [], placement == "per-device", lists)
        body = {
            "driver": driver,
            "pool": {"name": pool, "generation": generation - 1, "resourceSliceCount": 1},
        }
        body.update(node_fields)
        body["devices"] = [old]
        slices.append({"metadata": {"name": f"{prefix}{pool}-old"}, "spec": body})
    return slices


# ---------------------------------------------------------------- claims


def _selectors(rng: Random, lists: bool) -> list[Json]:
    exprs = rng.sample(SELECTORS + LIST_SELECTORS if lists else SELECTORS, rng.choice([0, 0, 0, 1, 1, 2]))
    return [{"cel": {"expression": e}} for e in exprs]


def _exact(rng: Random, sub: bool, lists: bool) -> Json:
    request: Json = {"deviceClassName": rng.choice(["gpu", "gpu", "gpu", "mig", "any", "safe", "strict"])}
    if _maybe(rng, 0.08):
        request["allocationMode"] = "All"
    else:
        request["allocationMode"] = "ExactCount"
        request["count"] = rng.choice([1, 1, 1, 1, 2, 2, 3])
    selectors = _selectors(rng, lists)
    if selectors:
        request["selectors"] = selectors
    if not sub and _maybe(rng, 0.1):
        request["adminAccess"] = True
    if _maybe(rng, 0.2):
        request["tolerations"] = rng.sample(TOLERATIONS, rng.randint(1, 2))
    if _maybe(rng, 0.2):
        name = rng.choice(["memory", "memory", "gpu.nvidia.com/memory", "cores"])
        request["capacity"] = {"requests": {name: rng.choice(["10Gi", "15Gi", "30Gi", "2"])}}
    return request


def _claim(rng: Random, index: int, lists: bool) -> Json:
    requests: list[Json] = []
    names: list[str] = []
    for r in range(rng.choice([1, 1, 1, 2, 2, 3])):
        name = f"r{r}"
        if _maybe(rng, 0.25):
            subs = []
            for s in range(rng.randint(1, 3)):
                subs.append({"name": f"s{s}", **_exact(rng, sub=True, lists=lists)})
                names.append(f"{name}/s{s}")
            requests.append({"name": name, "firstAvailable": subs})
        else:
            requests.append({"name": name, "exactly": _exact(rng, sub=False, lists=lists)})
        names.append(name)
    devices: Json = {"requests": requests}
    constraints = []
    for _ in range(rng.choice([0, 0, 0, 1, 1, 2])):
        constraint: Json = {}
        scope = rng.sample(names, min(len(names), rng.choice([0, 0, 1, 2])))
        if scope:
            constraint["requests"] = scope
        key = "distinctAttribute" if _maybe(rng, 0.35) else "matchAttribute"
        attributes = CONSTRAINT_ATTRIBUTES + LIST_CONSTRAINT_ATTRIBUTES if lists else CONSTRAINT_ATTRIBUTES
        constraint[key] = rng.choice(attributes)
        constraints.append(constraint)
    if constraints:
        devices["constraints"] = constraints
    return {"metadata": {"name": f"c{index}", "namespace": NAMESPACE}, "spec": {"devices": devices}}


# ---------------------------------------------------------------- allocated state


def _allocated(rng: Random, slices: list[Json]) -> list[Json]:
    results: list[Json] = []
    for s in slices:
        spec = s["spec"]
        for device in spec.get("devices") or ():
            if not _maybe(rng, 0.15):
                continue
            result: Json = {"request": "old", "driver": spec["driver"], "pool": spec["pool"]["name"],
                            "device": device["name"]}  # fmt: skip
            if _maybe(rng, 0.1):
                result["adminAccess"] = True
            elif device.get("allowMultipleAllocations"):
                for i in range(rng.randint(1, 2)):
                    share = dict(result, shareID=f"00000000-0000-0000-0000-00000000000{len(results) + i}")
                    share["consumedCapacity"] = {"memory": rng.choice(["10Gi", "20Gi", "40Gi"])}
                    results.append(share)
                continue
            results.append(result)
    return results


def scenario(rng: Random) -> Json:
    lists = _maybe(rng, 1 / 6)
    slices: list[Json] = []
    pools = rng.sample(["pool-a", "pool-b", "pool-c", "n1"], rng.randint(1, 3))
    for i, pool in enumerate(pools):
        slices += _pool(rng, DRIVER, pool, "node" if i == 0 else _placement(rng), lists)
    if _maybe(rng, 0.1):
        slices += _pool(rng, OTHER_DRIVER, "pool-a", _placement(rng), lists)
    rng.shuffle(slices)  # the order the informer lists them in means nothing
    claims = [_claim(rng, i, lists) for i in range(rng.choice([1, 1, 1, 2, 2, 3]))]
    labels = {"rack": "r1"} if _maybe(rng, 0.5) else {}
    extra: Json = {"listTypeAttributes": True} if lists else {}
    return {
        **extra,
        "node": {"name": NODE, "labels": labels},
        "slices": slices,
        "classes": CLASSES,
        "claims": claims,
        "allocated": _allocated(rng, slices),
    }


def scenarios() -> st.SearchStrategy[tuple[int, Json]]:
    """(seed, scenario): each scenario comes from a Random seeded by an integer hypothesis draws, so a failure
    names the seed that rebuilds it (``scenario(Random(seed))``). Drawing each choice from hypothesis instead
    would skew every probability towards the first choices and make the rare cases common."""
    return st.integers(0, 2**63).map(lambda seed: (seed, scenario(Random(seed))))
