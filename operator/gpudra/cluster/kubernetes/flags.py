"""The flags each control-plane binary runs with, as pure functions of where things are.

Feature gates are taken from the binary's own ``--help``: a gate the version does not know is an error at start,
and a gate it locked on (GA) is still accepted, so the product's DRA gates are passed wherever the version lists
them and left out where it does not.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

PRODUCT_FEATURE_GATES = (
    "DynamicResourceAllocation",
    "DRAPrioritizedList",
    "DRAAdminAccess",
    "DRAResourceClaimDeviceStatus",
    "DRAPartitionableDevices",
    "DRAConsumableCapacity",
    "DRADeviceTaints",
    "DRADeviceTaintRules",
    "DRAExtendedResource",
    "DRADeviceBindingConditions",
    "ResourceHealthStatus",
    "ResourceHealthStatusMessage",
)
"""The DRA features gpudra publishes or relies on (partitionable devices, consumable capacity, device taints and
taint rules, extended resources, binding conditions, the kubelet's device health in pod status ...)."""

CONTROLLERS = (
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "garbage-collector-controller",
    "namespace-controller",
    "resourceclaim-controller",
    "resourcequota-controller",
    "job-controller",
    "cronjob-controller",
    "deployment-controller",
    "replicaset-controller",
    "daemonset-controller",
    "statefulset-controller",
    "clusterrole-aggregation-controller",
    "root-ca-certificate-publisher-controller",
    "pod-garbage-collector-controller",
    "ttl-after-finished-controller",
    "device-taint-eviction-controller",
    "podgroup-protection-controller",
)
"""kube-controller-manager's controllers for claims from templates, workloads and garbage collection. Left out on
purpose: node-lifecycle (simulated nodes send no heartbeats, it would taint and evict them), and everything about
networking, volumes and cloud providers. A controller the version does not list is left out
(podgroup-protection-controller, which releases deleted PodGroups, exists from 1.36 and runs only with
GenericWorkload on)."""

_GATE = re.compile(r"^\s+(?:kube:)?([A-Z][A-Za-z0-9]+)=true\|false \(([A-Z]+)")


def known_gates(help_text: str) -> dict[str, str]:
    """gate -> stage (ALPHA, BETA, GA, DEPRECATED) as the binary's ``--help`` lists them."""
    return {m.group(1): m.group(2) for m in map(_GATE.match, help_text.splitlines()) if m}


def gate_flag(
    known: dict[str, str], wanted: tuple[str, ...] = PRODUCT_FEATURE_GATES, *, off: tuple[str, ...] = ()
) -> str:
    """The wanted gates this version lists, on; the ``off`` ones off (an unknown one is passed as asked, so the
    binary says it does not know it)."""
    return ",".join([f"{gate}=true" for gate in wanted if gate in known] + [f"{gate}=false" for gate in off])


@dataclass(frozen=True)
class Layout:
    """Where one cluster's files live, under one directory."""

    root: Path

    @property
    def pki(self) -> Path:
        return self.root / "pki"

    @property
    def etcd_data(self) -> Path:
        return self.root / "etcd"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    def kubeconfig(self, who: str) -> Path:
        return self.root / "kubeconfigs" / f"{who}.kubeconfig"


def etcd_args(binary: Path, layout: Layout, client_port: int, peer_port: int) -> list[str]:
    client = f"http://127.0.0.1:{client_port}"
    peer = f"http://127.0.0.1:{peer_port}"
    return [
        str(binary),
        "--name=gpudra",
        f"--data-dir={layout.etcd_data}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=gpudra={peer}",
        "--unsafe-no-fsync=true",
        "--log-level=warn",
    ]


def apiserver_args(
    binary: Path,
    layout: Layout,
    *,
    etcd_port: int,
    port: int,
    gates: str,
    runtime_config: str,
    advertise_address: str | None = None,
) -> list[str]:
    """``advertise_address``: the machine's address, for real nodes in namespaces of their own (they reach the API
    server there, and it then answers on every address); None: loopback only."""
    pki = layout.pki
    args = [
        str(binary),
        f"--etcd-servers=http://127.0.0.1:{etcd_port}",
        f"--secure-port={port}",
        f"--bind-address={'0.0.0.0' if advertise_address else '127.0.0.1'}",
        f"--advertise-address={advertise_address or '127.0.0.1'}",
        f"--tls-cert-file={pki / 'apiserver.crt'}",
        f"--tls-private-key-file={pki / 'apiserver.key'}",
        f"--client-ca-file={pki / 'ca.crt'}",
        f"--kubelet-client-certificate={pki / 'apiserver-kubelet-client.crt'}",
        f"--kubelet-client-key={pki / 'apiserver-kubelet-client.key'}",
        f"--kubelet-certificate-authority={pki / 'ca.crt'}",
        # A real kubelet's Node lists its Hostname (the simulated node's name, which no DNS resolves) besides its
        # InternalIP, and Hostname comes first by default: logs, exec and the node proxy must dial the IP.
        "--kubelet-preferred-address-types=InternalIP",
        # as the embedded API server: every request authenticates (a client certificate or a token), none is
        # anonymous, the health endpoints included (401)
        "--anonymous-auth=false",
        "--authorization-mode=Node,RBAC",
        "--enable-admission-plugins=NodeRestriction",
        # Simulated nodes have no node-lifecycle controller to lift the not-ready taint this plugin puts on a new
        # Node (Kubernetes' own scheduler integration tests disable it for the same reason).
        "--disable-admission-plugins=TaintNodesByCondition",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        f"--service-account-key-file={pki / 'sa.pub'}",
        f"--service-account-signing-key-file={pki / 'sa.key'}",
        "--service-cluster-ip-range=10.0.0.0/24",
        "--allow-privileged=true",
        "--profiling=false",
        "--endpoint-reconciler-type=none",
        f"--cert-dir={pki}",
    ]
    if gates:
        args.append(f"--feature-gates={gates}")
    if runtime_config:
        args.append(f"--runtime-config={runtime_config}")
    return args


def _component_args(binary: Path, kubeconfig: Path, port: int, layout: Layout, name: str) -> list[str]:
    return [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--leader-elect=false",
        f"--secure-port={port}",
        "--bind-address=127.0.0.1",
        f"--cert-dir={layout.root / name}",
    ]


def client_rate_args(qps: float | None) -> list[str]:
    """A component's client rate limit toward the API server (kube-scheduler 50, kube-controller-manager 20 QPS by
    default), with a burst of twice the rate; None: the binary's default."""
    return [] if qps is None else [f"--kube-api-qps={qps:g}", f"--kube-api-burst={round(2 * qps)}"]


def scheduler_args(
    binary: Path, layout: Layout, *, port: int, gates: str, qps: float | None = None
) -> list[str]:
    args = _component_args(binary, layout.kubeconfig("kube-scheduler"), port, layout, "kube-scheduler")
    if gates:
        args.append(f"--feature-gates={gates}")
    return args + client_rate_args(qps)


def controller_manager_args(
    binary: Path,
    layout: Layout,
    *,
    port: int,
    gates: str,
    controllers: tuple[str, ...],
    qps: float | None = None,
) -> list[str]:
    name = "kube-controller-manager"
    args = _component_args(binary, layout.kubeconfig(name), port, layout, name)
    args += [
        f"--controllers={','.join(controllers)}",
        "--use-service-account-credentials=true",
        f"--service-account-private-key-file={layout.pki / 'sa.key'}",
        f"--root-ca-file={layout.pki / 'ca.crt'}",
    ]
    if gates:
        args.append(f"--feature-gates={gates}")
    return args + client_rate_args(qps)


@dataclass(frozen=True)
class KubeletPaths:
    """Where one real kubelet's files live (gpudra up --real-kubelet), all under its node's directory."""

    root: Path

    @property
    def root_dir(self) -> Path:
        """``--root-dir``: pods, the DRA plugin directories (``plugins/``, ``plugins_registry/``), checkpoints."""
        return self.root / "kubelet"

    @property
    def plugins(self) -> Path:
        return self.root_dir / "plugins"

    @property
    def plugins_registry(self) -> Path:
        return self.root_dir / "plugins_registry"

    @property
    def cri_socket(self) -> Path:
        return self.root / "cri.sock"

    @property
    def cri_record(self) -> Path:
        """gpudra-fake-cri's record: one JSON line per sandbox or container call."""
        return self.root / "cri-calls.jsonl"

    @property
    def config(self) -> Path:
        return self.root / "kubelet-config.json"

    @property
    def sysctls(self) -> Path:
        """Private copies of the kernel settings the kubelet writes (see realkubelet.py)."""
        return self.root / "sysctl"


def kubelet_config(
    paths: KubeletPaths,
    *,
    address: str,
    port: int,
    healthz_port: int,
    ca: Path,
    serving: tuple[Path, Path],
    gates: str,
) -> dict[str, object]:
    """A KubeletConfiguration for a kubelet that shares its machine with others and runs no real containers.

    Served on the node IP (a kubelet refuses a loopback one) with a certificate of the cluster CA (kube-apiserver
    checks it), clients authenticated by that CA or by token and authorized by the API server, as kubeadm sets a
    kubelet up; /healthz on 127.0.0.1. Everything that would
    reach into the machine is off: no QOS or node-allocatable cgroups, no swap or cgroup v1 check, no local
    storage isolation or eviction thresholds, no image garbage collection, no iptables chains; pod logs and
    volume plugins under its own root."""
    cert, key = serving
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": address,
        "port": port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": healthz_port,
        "tlsCertFile": str(cert),
        "tlsPrivateKeyFile": str(key),
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(ca)},
        },
        "authorization": {"mode": "Webhook"},
        "containerRuntimeEndpoint": f"unix://{paths.cri_socket}",
        "cgroupDriver": "cgroupfs",
        "cgroupsPerQOS": False,
        "enforceNodeAllocatable": [],
        "failSwapOn": False,
        "failCgroupV1": False,
        "localStorageCapacityIsolation": False,
        "evictionHard": {},
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "makeIPTablesUtilChains": False,
        "podLogsDir": str(paths.root_dir / "pod-logs"),
        "volumePluginDir": str(paths.root_dir / "volume-plugins"),
        "registerNode": True,
        "clusterDNS": ["10.0.0.10"],
        "clusterDomain": "cluster.local",
        "featureGates": {
            name: value == "true" for name, _, value in (g.partition("=") for g in gates.split(",") if g)
        },
    }


def kubelet_args(
    binary: Path, paths: KubeletPaths, *, node: str, node_ip: str, kubeconfig: Path, labels: dict[str, str]
) -> list[str]:
    return [
        str(binary),
        f"--config={paths.config}",
        f"--kubeconfig={kubeconfig}",
        f"--root-dir={paths.root_dir}",
        f"--cert-dir={paths.root_dir / 'pki'}",
        f"--hostname-override={node}",
        f"--node-ip={node_ip}",
        f"--node-labels={','.join(f'{k}={v}' for k, v in sorted(labels.items()))}",
        "--v=3",
        # each call to a DRA plugin and its answer, with the claims and a microsecond time (bench/kubeletprepare.py)
        "--vmodule=dra_plugin=4",
    ]
