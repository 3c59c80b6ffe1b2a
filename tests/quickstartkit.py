"""The demo specs of NVIDIA's DRA driver quickstart (demo/specs/quickstart/v1 in kubernetes-sigs/dra-driver-nvidia-gpu)
that tell the user to read pod logs, restated here: the same namespaces, object names, labels, requests,
selectors, opaque configs, containers and commands, so that the quickstart's own `kubectl logs` commands apply."""

from __future__ import annotations

_GPU_CLASS = "exactly: {deviceClassName: gpu.nvidia.com}"
_SMI = 'command: ["bash", "-c"]\n    args: ["nvidia-smi -L; trap \'exit 0\' TERM; sleep 9999 & wait"]'
_NBODY = (
    'command: ["bash", "-c"]\n'
    "    args: [\"trap 'exit 0' TERM; /tmp/sample --benchmark --numbodies=4226000 & wait\"]"
)
_TOLERATE = 'tolerations: [{key: "nvidia.com/gpu", operator: "Exists", effect: "NoSchedule"}]'


def _pod(namespace: str, name: str, containers: str, claims: str, labelled: bool = True) -> str:
    labels = "\n  labels: {app: pod}" if labelled else ""
    return f"""---
apiVersion: v1
kind: Pod
metadata:
  namespace: {namespace}
  name: {name}{labels}
spec:
  containers:
{containers}
  resourceClaims:
{claims}
  {_TOLERATE}
"""


def _container(
    name: str, claim: str, command: str = _SMI, image: str = "ubuntu:22.04", request: str = ""
) -> str:
    wanted = f"{{name: {claim}, request: {request}}}" if request else f"{{name: {claim}}}"
    return f"""  - name: {name}
    image: {image}
    {command}
    resources:
      claims: [{wanted}]"""


def _namespace(name: str) -> str:
    return f"---\napiVersion: v1\nkind: Namespace\nmetadata: {{name: {name}}}\n"


def _template(namespace: str, name: str, devices: str) -> str:
    return f"""---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {{namespace: {namespace}, name: {name}}}
spec:
  spec:
    devices:
{devices}
"""


_ONE_GPU = f"      requests:\n      - name: gpu\n        {_GPU_CLASS}"

GPU_TEST1 = (
    _namespace("gpu-test1")
    + _template("gpu-test1", "single-gpu", _ONE_GPU)
    + "".join(
        _pod(
            "gpu-test1",
            pod,
            _container("ctr", "gpu"),
            "  - {name: gpu, resourceClaimTemplateName: single-gpu}",
        )
        for pod in ("pod1", "pod2")
    )
)
"""Two pods, one container each, each with a GPU of its own."""

GPU_TEST2 = (
    _namespace("gpu-test2")
    + _template("gpu-test2", "single-gpu", _ONE_GPU)
    + _pod(
        "gpu-test2",
        "pod",
        _container("ctr0", "shared-gpu") + "\n" + _container("ctr1", "shared-gpu"),
        "  - {name: shared-gpu, resourceClaimTemplateName: single-gpu}",
    )
)
"""One pod, two containers sharing one GPU."""

GPU_TEST3 = (
    _namespace("gpu-test3")
    + f"""---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {{namespace: gpu-test3, name: single-gpu}}
spec:
  devices:
    requests:
    - name: gpu
      {_GPU_CLASS}
"""
    + "".join(
        _pod(
            "gpu-test3",
            pod,
            _container("ctr", "shared-gpu"),
            "  - {name: shared-gpu, resourceClaimName: single-gpu}",
        )
        for pod in ("pod1", "pod2")
    )
)
"""Two pods sharing one GPU through one ResourceClaim."""

MIG_REQUESTS = {
    "mig-1g-5gb-0": "1g.5gb",
    "mig-1g-5gb-1": "1g.5gb",
    "mig-2g-10gb": "2g.10gb",
    "mig-3g-20gb": "3g.20gb",
}
_MIG_DEVICES = (
    "      requests:\n"
    + "".join(
        f"      - name: {request}\n        exactly:\n          deviceClassName: mig.nvidia.com\n"
        f"          selectors:\n"
        f"          - cel: {{expression: \"device.attributes['gpu.nvidia.com'].profile == '{profile}'\"}}\n"
        for request, profile in MIG_REQUESTS.items()
    )
    + '      constraints:\n      - {requests: [], matchAttribute: "gpu.nvidia.com/parentUUID"}'
)
_MIG_CONTAINERS = "\n".join(
    "    " + _container(f"ctr{i}", "mig-devices", request=request).replace("\n", "\n    ")
    for i, request in enumerate(MIG_REQUESTS)
)
GPU_TEST4 = (
    _namespace("gpu-test4")
    + _template("gpu-test4", "mig-devices", _MIG_DEVICES)
    + f"""---
apiVersion: apps/v1
kind: Deployment
metadata:
  namespace: gpu-test4
  name: pod
  labels: {{app: gpu-test4-pod}}
spec:
  replicas: 4
  selector:
    matchLabels: {{app: pod}}
  template:
    metadata:
      labels: {{app: pod}}
    spec:
      resourceClaims:
      - {{name: mig-devices, resourceClaimTemplateName: mig-devices}}
      containers:
{_MIG_CONTAINERS}
      {_TOLERATE}
"""
)
"""A Deployment of four pods, each with four containers, each with one MIG device; a pod's four share a GPU."""

_MPS_CONFIG = """        opaque:
          driver: gpu.nvidia.com
          parameters:
            apiVersion: resource.nvidia.com/v1beta1
            kind: GpuConfig
            sharing:
              strategy: MPS
              mpsConfig: {defaultActiveThreadPercentage: 50, defaultPinnedDeviceMemoryLimit: 10Gi}"""
_NBODY_IMAGE = "nvcr.io/nvidia/k8s/cuda-sample:nbody-cuda11.6.0-ubuntu18.04"

GPU_TEST5 = (
    _namespace("gpu-test5")
    + _template(
        "gpu-test5",
        "multiple-gpus",
        f"""      requests:
      - name: ts-gpu
        {_GPU_CLASS}
      - name: mps-gpu
        {_GPU_CLASS}
      config:
      - requests: ["ts-gpu"]
        opaque:
          driver: gpu.nvidia.com
          parameters:
            apiVersion: resource.nvidia.com/v1beta1
            kind: GpuConfig
            sharing: {{strategy: TimeSlicing, timeSlicingConfig: {{interval: Long}}}}
      - requests: ["mps-gpu"]
{_MPS_CONFIG}""",
    )
    + _pod(
        "gpu-test5",
        "pod0",
        "\n".join(
            _container(name, "shared-gpus", _NBODY, _NBODY_IMAGE, request)
            for name, request in (
                ("ts-ctr0", "ts-gpu"),
                ("ts-ctr1", "ts-gpu"),
                ("mps-ctr0", "mps-gpu"),
                ("mps-ctr1", "mps-gpu"),
            )
        ),
        "  - {name: shared-gpus, resourceClaimTemplateName: multiple-gpus}",
        labelled=False,
    )
)
"""One pod: two containers time-slice one GPU, two share another through MPS."""

GPU_TEST_MPS = (
    _namespace("gpu-test-mps")
    + _template(
        "gpu-test-mps",
        "shared-gpu",
        f"""      requests:
      - name: mps-gpu
        {_GPU_CLASS}
      config:
      - requests: ["mps-gpu"]
{_MPS_CONFIG}""",
    )
    + _pod(
        "gpu-test-mps",
        "test-pod",
        "\n".join(
            _container(name, "shared-gpu", _NBODY, _NBODY_IMAGE, "mps-gpu")
            for name in ("mps-ctr0", "mps-ctr1")
        ),
        "  - {name: shared-gpu, resourceClaimTemplateName: shared-gpu}",
    )
)
"""One pod, two containers sharing one GPU through MPS."""
