"""KubernetesControlPlane: etcd, kube-apiserver, kube-scheduler and kube-controller-manager on loopback.

TLS everywhere the real components use it: a cluster CA, client certificates for the admin (system:masters), the
scheduler, the controller manager and each node's kubelet (system:node:<name>, so the Node authorizer and the
NodeRestriction admission plugin apply to it), and service-account tokens minted by the API server itself
(TokenRequest) for the product's components, bound to a Node where the real pod's token would carry its node.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import ssl
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from gpudra.cluster.apiserver.server import FAILED_TEST
from gpudra.cluster.kubernetes.binaries import Binaries
from gpudra.cluster.kubernetes.flags import (
    CONTROLLERS,
    PRODUCT_FEATURE_GATES,
    Layout,
    apiserver_args,
    controller_manager_args,
    etcd_args,
    gate_flag,
    known_gates,
    scheduler_args,
)
from gpudra.cluster.kubernetes.pki import CertFiles, ClusterPKI
from gpudra.cluster.processes import ManagedProcess, free_port
from gpudra.kube.client import KubeClient
from gpudra.kube.kubeconfig import Credentials, write_kubeconfig
from gpudra.kube.resources import Resource
from gpudra.telemetry import get_logger

log = get_logger(__name__)
SERVICE_ACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount", namespaced=True)
TOKEN_SECONDS = 7 * 24 * 3600


async def _help(binary: Path) -> str:
    process = await asyncio.create_subprocess_exec(
        str(binary), "--help", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    out, _ = await process.communicate()
    return out.decode(errors="replace")


def known_controllers(help_text: str) -> set[str]:
    """kube-controller-manager's controller names, from the "All controllers:" list of its ``--help``."""
    match = re.search(r"All controllers:\s*(.*?)\s*Disabled-by-default", help_text, re.S)
    return {name.strip() for name in (match.group(1) if match else "").split(",") if name.strip()}


class KubernetesControlPlane:
    def __init__(
        self,
        root: Path,
        binaries: Binaries,
        *,
        port: int = 0,
        gates_on: tuple[str, ...] = (),
        gates_off: tuple[str, ...] = (),
        advertise_address: str | None = None,
        client_qps: float | None = None,
        wrap: Callable[[list[str]], list[str]] = lambda argv: argv,
        scheduling: bool = True,
    ) -> None:
        """``advertise_address``: the machine's address, where real nodes (in network namespaces of their own)
        and their pods reach the API server; None: loopback only. ``client_qps``: kube-scheduler's and
        kube-controller-manager's client rate limit (None: theirs). ``wrap``: how each binary's command line is
        started (real nodes put the control plane in their cluster's cgroup). ``scheduling``: False runs etcd and
        kube-apiserver alone (a benchmark that plays the scheduler's part)."""
        self.client_qps = client_qps
        self._scheduling = scheduling
        self.layout = Layout(root)
        self.advertise_address = advertise_address
        self._wrap = wrap
        self._gates_on = gates_on
        self._gates_off = gates_off
        self.binaries = binaries
        self.port = port or free_port()
        self._etcd_port = free_port()
        self._pki: ClusterPKI | None = None
        self._gates = ""
        self.etcd: ManagedProcess | None = None
        self.apiserver: ManagedProcess | None = None
        self.scheduler: ManagedProcess | None = None
        self.controller_manager: ManagedProcess | None = None

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def node_url(self) -> str:
        """Where real nodes and their pods reach the API server."""
        return f"https://{self.advertise_address}:{self.port}" if self.advertise_address else self.url

    @property
    def admin_kubeconfig(self) -> Path:
        return self.layout.kubeconfig("admin")

    @property
    def ca(self) -> Path:
        return self.layout.pki / "ca.crt"

    @property
    def gates(self) -> str:
        """The ``--feature-gates`` value every component runs with (the kubelet included)."""
        return self._gates

    def _ssl(self, cert: Path, key: Path) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.ca))
        context.load_cert_chain(str(cert), str(key))
        return context

    def _client_kubeconfig(self, who: str, user: str, *groups: str, server: str | None = None) -> Path:
        assert self._pki is not None
        files = self._pki.client(who, user, *groups)
        credentials = Credentials(
            server=server or self.url,
            ca_path=self.ca,
            certificate_path=files.cert,
            private_key_path=files.key,
        )
        return write_kubeconfig(self.layout.kubeconfig(who), credentials)

    async def start(self) -> None:
        layout = self.layout
        if layout.root.exists():
            shutil.rmtree(layout.root)
        layout.root.mkdir(parents=True)
        pki = self._pki = ClusterPKI(layout.pki)
        pki.serving(
            "apiserver",
            (
                "127.0.0.1",
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "10.0.0.1",
                *([self.advertise_address] if self.advertise_address else []),
            ),
        )
        pki.client("apiserver-kubelet-client", "kube-apiserver-kubelet-client", "system:masters")
        pki.service_account_key()
        admin = pki.client("admin", "gpudra-admin", "system:masters")
        self._client_kubeconfig("kube-scheduler", "system:kube-scheduler")
        self._client_kubeconfig("kube-controller-manager", "system:kube-controller-manager")
        write_kubeconfig(
            self.admin_kubeconfig,
            Credentials(
                server=self.url, ca_path=self.ca, certificate_path=admin.cert, private_key_path=admin.key
            ),
        )
        apiserver_help, manager_help = await asyncio.gather(
            _help(self.binaries.kube_apiserver), _help(self.binaries.kube_controller_manager)
        )
        self._gates = gate_flag(
            known_gates(apiserver_help), (*PRODUCT_FEATURE_GATES, *self._gates_on), off=self._gates_off
        )
        self.etcd = ManagedProcess(
            "etcd",
            self._wrap(etcd_args(self.binaries.etcd, layout, self._etcd_port, free_port())),
            layout.logs / "etcd.log",
            f"http://127.0.0.1:{self._etcd_port}/health",
            healthy=lambda status, body: status == 200 and '"health":"true"' in body,
            restart=True,
        )
        await self.etcd.start()
        self.apiserver = ManagedProcess(
            "kube-apiserver",
            self._wrap(
                apiserver_args(
                    self.binaries.kube_apiserver,
                    layout,
                    etcd_port=self._etcd_port,
                    port=self.port,
                    gates=self._gates,
                    runtime_config=runtime_config_flag(self.binaries.minor, self._gates_on),
                    advertise_address=self.advertise_address,
                )
            ),
            layout.logs / "kube-apiserver.log",
            f"{self.url}/readyz",
            ssl_context=self._ssl(admin.cert, admin.key),
            restart=True,
        )
        await self.apiserver.start(timeout=120)
        if self._scheduling:
            await self._start_scheduling(manager_help)
        log.info(
            "kubernetes control plane up", url=self.url, version=self.binaries.version, gates=self._gates
        )

    async def _start_scheduling(self, manager_help: str) -> None:
        """kube-scheduler and kube-controller-manager."""
        layout = self.layout
        scheduler_port, manager_port = free_port(), free_port()
        self.scheduler = ManagedProcess(
            "kube-scheduler",
            self._wrap(
                scheduler_args(
                    self.binaries.kube_scheduler,
                    layout,
                    port=scheduler_port,
                    gates=self._gates,
                    qps=self.client_qps,
                )
            ),
            layout.logs / "kube-scheduler.log",
            f"https://127.0.0.1:{scheduler_port}/healthz",
            ssl_context=False,
            restart=True,
        )
        controllers = known_controllers(manager_help)
        self.controller_manager = ManagedProcess(
            "kube-controller-manager",
            self._wrap(
                controller_manager_args(
                    self.binaries.kube_controller_manager,
                    layout,
                    port=manager_port,
                    gates=self._gates,
                    controllers=tuple(c for c in CONTROLLERS if not controllers or c in controllers),
                    qps=self.client_qps,
                )
            ),
            layout.logs / "kube-controller-manager.log",
            f"https://127.0.0.1:{manager_port}/healthz",
            ssl_context=False,
            restart=True,
        )
        await asyncio.gather(self.scheduler.start(), self.controller_manager.start())

    async def conflicts_by_resource(self) -> Counter[str]:
        """409s kube-apiserver answered so far, by resource (``plural`` or ``plural/subresource``), from its own
        ``apiserver_request_total`` metric: the same count the embedded server keeps; and its 422s to PATCH under
        ``plural`` + FAILED_TEST (the metric does not tell a failed JSON patch test from another invalid patch)."""
        admin = self.layout.pki
        context = self._ssl(admin / "admin.crt", admin / "admin.key")
        async with (
            aiohttp.ClientSession(trust_env=False) as session,
            session.get(f"{self.url}/metrics", ssl=context) as response,
        ):
            text = await response.text()
        counts: Counter[str] = Counter()
        for family in text_string_to_metric_families(text):
            if family.name != "apiserver_request":
                continue
            for sample in family.samples:
                labels = sample.labels
                if sample.name != "apiserver_request_total":
                    continue
                resource = labels.get("resource", "")
                if labels.get("subresource"):
                    resource += f"/{labels['subresource']}"
                if labels.get("code") == "409":
                    counts[resource] += int(sample.value)
                elif labels.get("code") == "422" and labels.get("verb") == "PATCH":
                    counts[resource + FAILED_TEST] += int(sample.value)  # a failed JSON patch test, mostly
        return counts

    async def restart_apiserver(self, *, kill: bool = True) -> None:
        """Stop kube-apiserver (SIGKILL by default, as a crash would) and start it again on the same port."""
        assert self.apiserver is not None
        await self.apiserver.stop(kill=kill)
        await self.apiserver.start(timeout=120)

    def kubelet_serving_certificate(self, node: str, ip: str) -> CertFiles:
        """The serving certificate of a real kubelet of ``node`` on ``ip``, from the cluster CA that
        kube-apiserver's ``--kubelet-certificate-authority`` trusts."""
        assert self._pki is not None
        return self._pki.serving(f"kubelet-{node}-serving", (ip, node, "127.0.0.1"))

    def node_kubeconfig(self, node: str, *, server: str | None = None) -> Path:
        """The credentials a kubelet of ``node`` has: a client certificate for system:node:<node> (``server``:
        the URL it reaches the API server at, loopback by default)."""
        return self._client_kubeconfig(
            f"kubelet-{node}", f"system:node:{node}", "system:nodes", server=server
        )

    async def service_account_kubeconfig(
        self,
        client: KubeClient,
        namespace: str,
        name: str,
        *,
        who: str,
        bound_node: tuple[str, str] | None = None,
        bound_pod: tuple[str, str] | None = None,
    ) -> Path:
        """A token for the service account from the API server's TokenRequest, asked for by ``client``.
        ``bound_node`` (name, uid) binds it to a Node, ``bound_pod`` to a Pod (as a kubelet asks for a pod's
        projected token); either way it carries ``authentication.kubernetes.io/node-name``."""
        spec: dict[str, object] = {"expirationSeconds": TOKEN_SECONDS}
        for kind, bound in (("Node", bound_node), ("Pod", bound_pod)):
            if bound is not None:
                spec["boundObjectRef"] = {"kind": kind, "apiVersion": "v1", "name": bound[0], "uid": bound[1]}
        request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}
        answer = await client.create_subresource(SERVICE_ACCOUNTS, name, "token", request, namespace)
        credentials = Credentials(
            server=self.url, ca_path=self.ca, token=str(answer["status"]["token"]), namespace=namespace
        )
        return write_kubeconfig(self.layout.kubeconfig(who), credentials)

    async def stop(self) -> None:
        for process in (self.controller_manager, self.scheduler, self.apiserver, self.etcd):
            if process is not None:
                await process.stop()


def runtime_config_flag(minor: int, gates_on: tuple[str, ...] = ()) -> str:
    """API versions off by default that the product's features use (DeviceTaintRule before it is v1), and the
    PodGroup API (scheduling.k8s.io: v1alpha2 on 1.36, v1beta1 on 1.37) when ``GenericWorkload`` is asked for:
    the gate alone does not serve a group version that is off by default."""
    versions = (
        [] if minor >= 37 else ["resource.k8s.io/v1alpha3" if minor <= 35 else "resource.k8s.io/v1beta2"]
    )
    if "GenericWorkload" in gates_on and minor >= 36:
        versions.append("scheduling.k8s.io/v1beta1" if minor >= 37 else "scheduling.k8s.io/v1alpha2")
    return ",".join(f"{v}=true" for v in versions)
