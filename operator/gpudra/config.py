"""Settings of each process, read once at start from flags and GPUDRA_* environment variables and passed down.

Every flag has an environment twin (``--node-name`` = ``GPUDRA_NODE_NAME``). A bad value stops the process at start
with a ConfigurationError that names the setting.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import AliasChoices, Field, ValidationError, field_validator
from pydantic_core import PydanticCustomError
from pydantic_settings import BaseSettings, SettingsConfigDict, SettingsError

from gpudra.errors import ConfigurationError

MigPlannerPolicy = Literal["off", "suggest", "apply"]

DEFAULT_IGNORED_XIDS = frozenset({13, 31, 43, 45, 68, 109})
"""XIDs that report an application's error, not the GPU's: NVIDIA's driver ignores them too."""


class CommonSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="GPUDRA_", extra="forbid")

    log_format: Literal["console", "json"] = Field(
        "console", description="console (readable) or json (one object a line)"
    )
    log_level: str = Field("INFO", description="Python logging level name")
    kubeconfig: Path | None = Field(
        None, description="kubeconfig file; default: in-cluster, then ~/.kube/config"
    )
    metrics_host: str = Field(
        "",
        description="address of the /metrics, /healthz, /readyz server; empty: every address of the pod, IPv4 and "
        "IPv6 (a single-stack IPv6 cluster scrapes and probes the pod's IPv6 address)",
    )
    metrics_port: int = Field(0, ge=0, le=65535, description="port of the metrics server; 0 disables it")

    @field_validator("log_level")
    @classmethod
    def _known_level(cls, value: str) -> str:
        if not isinstance(logging.getLevelName(value.upper()), int):
            raise PydanticCustomError("log_level", "Input should be DEBUG, INFO, WARNING, ERROR or CRITICAL")
        return value


class AgentSettings(CommonSettings):
    node_name: str = Field(..., min_length=1, description="this node's name (from the downward API)")
    driver_name: str = Field("gpu.nvidia.com", description="DRA driver name published in slices")
    backend: Literal["nvml", "simulated"] = Field(
        "nvml", description="real GPUs through NVML, or a simulated node"
    )
    simulated_profile: str = Field("dgx-h100", description="node profile when backend=simulated")
    simulated_fleet_index: int = Field(
        0,
        ge=0,
        description="backend=simulated: the node's place in its fleet (which NVLink rack a tray is in)",
    )
    simulated_state: Path | None = Field(
        None,
        description="backend=simulated: a file keeping the simulated GPUs' state (MIG instances, modes) across "
        "agent restarts, as real GPUs keep theirs; created from the profile when missing",
    )
    hardware_poll_seconds: float = Field(
        0.5, gt=0, description="how often the GPUs are re-read; slices follow a change within this time"
    )
    full_resync_seconds: float = Field(
        60.0, gt=0, description="how often slices are re-listed and repaired even without a hardware change"
    )
    health_checks: bool = Field(True, description="watch NVML XID/ECC events and taint unhealthy devices")
    health_recovery_seconds: float = Field(
        300.0, ge=0, description="remove a device's health taint after this long without events (0: never)"
    )
    health_report_seconds: float = Field(
        10.0,
        gt=0,
        le=600,
        description="how often the kubelet's health stream repeats the health of every device even without a "
        "change; the kubelet reads a device as Unknown after three times this long without a report",
    )
    health_ignored_xids: list[int] = Field(
        default_factory=lambda: sorted(DEFAULT_IGNORED_XIDS),
        description="XIDs that are application errors: tainted with effect None (visible, not repelling)",
    )
    health_noexecute_xids: list[int] = Field(
        default_factory=list,
        description="XIDs that mean a dead GPU (e.g. 48, 79, 95): tainted NoExecute instead of NoSchedule, so the"
        " pods using the device are evicted (Kubernetes' device-taint eviction controller); empty: none",
    )
    health_noexecute_gpu_lost: bool = Field(
        False,
        description="keep a lost GPU's devices published with taint gpu.nvidia.com/gpu-lost:NoExecute, so the"
        " pods using them are evicted (default: they leave the slices and their pods keep running)",
    )
    shared_gpu_replicas: int = Field(
        0,
        ge=0,
        le=64,
        description="publish every full GPU as a time-sliced GPU shared by up to this many claims "
        "(class shared.gpu.nvidia.com, extended resource nvidia.com/gpu.shared); 0: GPUs are exclusive",
    )
    passthrough_support: bool = Field(
        False,
        description="NVIDIA's PassthroughSupport gate (alpha, off by default): offer every whole GPU without MIG "
        "also as a gpu-vfio-<i> device (class vfio.gpu.nvidia.com) that prepare binds to vfio-pci for a virtual "
        "machine; the GPU's container use and its passthrough are never allocated together (docs/passthrough.md)",
    )
    mps_support: bool = Field(
        True,
        description="NVIDIA's MPSSupport gate: GpuConfig and MigDeviceConfig may ask for sharing.strategy MPS; "
        "false refuses such a config at prepare, saying so on the claim's pod",
    )
    time_slicing_settings: bool = Field(
        True,
        description="NVIDIA's TimeSlicingSettings gate: a GpuConfig may set sharing.timeSlicingConfig (the "
        "time-slice interval); false refuses such a config at prepare (TimeSlicing without settings still works)",
    )
    max_devices_per_slice: int = Field(
        128, ge=1, le=128, description="devices per ResourceSlice before splitting"
    )
    mig_policy: Literal["Static", "Dynamic"] = Field(
        "Static",
        description=(
            "Static: publish the MIG instances that exist; Dynamic: publish every MIG-capable GPU with MIG mode on "
            "as partitionable devices (each profile at each placement) and create the instance at prepare"
        ),
    )
    counter_layout: Literal["auto", "1.34", "1.35"] = Field(
        "auto",
        description=(
            "where dynamic MIG's shared counters go: 1.34 (in the device slice), 1.35 (a counters-only slice), "
            "or auto (from the API server's version)"
        ),
    )
    device_metadata: bool = Field(
        False,
        description="write each prepared claim's device metadata (KEP-5304: UUIDs, PCI bus ids, MIG profile and "
        "placement, sharing) as metadata.resource.k8s.io/v1alpha1 files mounted into its containers through the "
        "claim's CDI spec (docs/device-metadata.md); off by default, as NVIDIA's DeviceMetadata gate (alpha)",
    )
    list_attributes: bool = Field(
        False,
        description="publish list-typed attributes (gpudra.dev/nvlinkPeers: the UUIDs of the GPUs each GPU reaches "
        "over NVLink, itself included) where the API server keeps them (Kubernetes' DRAListTypeAttributes gate, "
        "alpha in 1.36, off by default); the agent checks with a dry-run write at start and after a refused "
        "write, and publishes scalar attributes only otherwise",
    )
    serve_kubelet_plugin: bool = Field(
        True, description="serve the kubelet DRA plugin (prepare / unprepare, CDI specs, checkpoint)"
    )
    plugin_dir: Path | None = Field(
        None, description="directory of the DRA socket; default /var/lib/kubelet/plugins/<driver>"
    )
    registry_dir: Path = Field(
        Path("/var/lib/kubelet/plugins_registry"), description="the kubelet's plugin registration directory"
    )
    cdi_dir: Path = Field(Path("/var/run/cdi"), description="where per-claim CDI spec files are written")
    driver_root: Path = Field(
        Path("/"),
        description="the NVIDIA driver's root on the host (NVIDIA's nvidiaDriverRoot): CDI specs point the "
        "runtime at <root>/dev/nvidia* for the GPUs' device nodes when <root>/dev is a directory, else at "
        "/dev/nvidia*; /run/nvidia/driver under the GPU Operator",
    )
    mig_caps_major: int | None = Field(
        None,
        ge=0,
        description="major of /dev/nvidia-caps/* (MIG capabilities), named by number in CDI specs so that the "
        "host need not have the nodes; default: read from /proc/devices with the nvml backend (simulated: named "
        "by host path)",
    )
    driver_root_mount: Path | None = Field(
        None,
        description="where this process sees the host's driver root (the chart mounts it at /driver-root); "
        "unset: at driver_root itself. Set, or with the nvml backend, the agent waits at start until the GPUs' "
        "device nodes are there",
    )
    instance_id: str = Field(
        "",
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$|^$",
        description="this agent instance's id (its pod's UID, from the downward API): sockets of its own, so that"
        " the new agent of a rolling update serves beside the old one and takes over from it (docs/upgrade.md);"
        " empty: the classic socket names",
    )
    state_dir: Path | None = Field(
        None, description="directory of the prepared-claims checkpoint; default the plugin directory"
    )
    compute_domains: Literal["auto", "enabled", "disabled"] = Field(
        "auto",
        description="serve the compute-domain driver: auto = on nodes whose GPUs have multi-node NVLink",
    )
    compute_domain_driver_name: str = Field(
        "compute-domain.nvidia.com", description="DRA driver name of the ComputeDomain channels and daemons"
    )
    compute_domain_plugin_dir: Path | None = Field(
        None, description="directory of its DRA socket; default /var/lib/kubelet/plugins/<that driver>"
    )
    compute_domain_daemon_mode: Literal["daemonset", "host-managed"] = Field(
        "daemonset",
        description="daemonset: one IMEX daemon pod per domain and node (one domain per node); "
        "host-managed: one nvidia-imex per node run outside Kubernetes, domains share nodes by channel",
    )
    compute_domain_daemon_wait_seconds: float = Field(
        40.0,
        gt=0,
        le=40,
        description="how long a channel claim's prepare waits for the node's IMEX daemon to be Ready before it "
        "fails and the kubelet retries it (below the kubelet's 45 s per call; a real kubelet retries a failed "
        "prepare only at its next periodic sync of the pod, a minute or more later)",
    )
    driver_namespace: str = Field(
        "gpudra", min_length=1, description="namespace of the ComputeDomainClique objects and daemons"
    )
    imex_channel_major: int | None = Field(
        None,
        ge=0,
        description="major of /dev/nvidia-caps-imex-channels/*; default: read from /proc/devices",
    )
    node_ip: str = Field("", description="this node's IP (host-managed IMEX daemon entries)")
    mig_retry_seconds: float = Field(
        5.0,
        gt=0,
        description="how often a MIG layout not yet reached (blocked, waiting for a reset) is retried",
    )
    handover_poll_seconds: float = Field(
        0.2,
        gt=0,
        description="how often the active agent looks whether a newer instance asks for the node (docs/upgrade.md)",
    )
    orphan_sweep_seconds: float = Field(
        30.0,
        gt=0,
        description="how often prepared claims are checked against the API server: a claim gone (by UID) for "
        "orphan_grace_seconds is unprepared, as the kubelet had not (docs/troubleshooting.md)",
    )
    orphan_grace_seconds: float = Field(
        60.0,
        ge=0,
        description="how long a prepared claim's ResourceClaim must stay gone before the agent unprepares it",
    )

    @property
    def plugin_path(self) -> Path:
        return self.plugin_dir or Path("/var/lib/kubelet/plugins") / self.driver_name

    @property
    def compute_domain_plugin_path(self) -> Path:
        return (
            self.compute_domain_plugin_dir
            or Path("/var/lib/kubelet/plugins") / self.compute_domain_driver_name
        )

    @property
    def compute_domain_state_path(self) -> Path:
        return self.state_dir / "compute-domain" if self.state_dir else self.compute_domain_plugin_path

    @property
    def state_path(self) -> Path:
        return self.state_dir or self.plugin_path


def _env(name: str, field: str) -> AliasChoices:
    return AliasChoices(name, field)  # the env name first: errors name the variable to set


class ImexDaemonSettings(CommonSettings):
    """``gpudra imex-daemon``: what the per-domain DaemonSet's pod env (and its claim's CDI env) says."""

    domain_uid: str = Field(
        ...,
        min_length=1,
        validation_alias=_env("COMPUTE_DOMAIN_UUID", "domain_uid"),
        description="the domain",
    )
    clique_id: str = Field(
        ..., min_length=1, validation_alias=_env("CLIQUE_ID", "clique_id"), description="set by the claim"
    )
    node_name: str = Field(..., min_length=1, validation_alias=_env("NODE_NAME", "node_name"))
    namespace: str = Field(..., min_length=1, validation_alias=_env("POD_NAMESPACE", "namespace"))
    ip_address: str = Field("", validation_alias=_env("POD_IP", "ip_address"))


class ControllerSettings(CommonSettings):
    driver_name: str = Field("gpu.nvidia.com", description="DRA driver whose claims the controller explains")
    pending_grace_seconds: float = Field(
        10.0, ge=0, description="how long a claim may stay unallocated before the controller explains it"
    )
    pending_interval_seconds: float = Field(
        30.0, gt=0, description="how often a pending claim is re-explained (Events are deduplicated)"
    )
    namespace: str = Field(
        "gpudra",
        min_length=1,
        description="the driver's namespace: ComputeDomain daemon DaemonSets and templates",
    )
    compute_domain_driver: str = Field(
        "compute-domain.nvidia.com", description="DRA driver name of ComputeDomain channels and daemons"
    )
    imex_daemon_mode: Literal["daemonset", "host-managed"] = Field(
        "daemonset",
        description="daemonset: one IMEX daemon DaemonSet per ComputeDomain (one domain per node); host-managed: "
        "one nvidia-imex per node run outside Kubernetes, domains share nodes by IMEX channel",
    )
    imex_daemon_image: str = Field(
        "ghcr.io/gpudra/gpudra:latest",
        description="image of the per-domain IMEX daemon pods (daemonset mode)",
    )
    imex_daemon_image_pull_secrets: list[str] = Field(
        default_factory=list,
        description="names of the Secrets the IMEX daemon pods pull their image with, as JSON (the chart's "
        "imagePullSecrets)",
    )
    imex_daemon_env: dict[str, str] = Field(
        default_factory=dict,
        description="more environment variables of the IMEX daemon pods, as JSON (the chart sets the API "
        "server's address here where it sets it on its own pods: kubernetesServiceHost)",
    )
    computedomain_span_cliques: bool = Field(
        True,
        description="a ComputeDomain over several NVLink cliques (racks) can be Ready, each clique its own IMEX "
        "domain as with NVIDIA's driver (a Warning says so); false: that is an error (CliqueMismatch, NotReady)",
    )
    computedomain_status_batch_seconds: float = Field(
        0.1, ge=0, description="changes within this window are coalesced into one ComputeDomain status write"
    )
    computedomain_resync_seconds: float = Field(
        5.0, gt=0, description="how often every NotReady ComputeDomain is re-evaluated without a change"
    )
    computedomain_event_grace_seconds: float = Field(
        10.0,
        ge=0,
        description="a node waiting for its IMEX daemon this long gets a Warning Event on the domain (fabric "
        "loss, clique mismatch and held nodes are reported at once)",
    )
    computedomain_cleanup_attempts: int = Field(
        5,
        ge=1,
        description="deletion passes over a domain's children before its finalizer is released anyway",
    )
    mig_config_map: str = Field(
        "",
        description="namespace/name of the ConfigMap holding the mig-parted config file that the node label "
        "nvidia.com/mig.config names configs from; empty: mig-parted's default configs",
    )
    mig_config_map_key: str = Field("config.yaml", description="key of that ConfigMap holding the file")
    mig_resync_seconds: float = Field(
        30.0, gt=0, description="how often MigLayouts are re-resolved without a change (ConfigMap edits)"
    )
    web_port: int | None = Field(
        None,
        ge=0,
        le=65535,
        description="port of the read-only web view of the fleet (GPUs, MIG slices, claims, why they wait); "
        "unset: no web view; 0: a free port",
    )
    web_host: str = Field("0.0.0.0", description="address the web view listens on")
    mig_planner: MigPlannerPolicy = Field(
        "suggest",
        description="MIG planner for pending MIG claims: off; suggest (the repartition of idle GPUs that would "
        "satisfy them, in the claim's Event and `gpudra explain`); apply (also write it as the MigLayout "
        "gpudra-planner-<node>, never over a user's MigLayout)",
    )


S = TypeVar("S", bound=BaseSettings)


def load_settings(cls: type[S], **values: Any) -> S:
    """Build settings from explicit values (flags) over the environment; raise ConfigurationError on bad input."""
    explicit = {k: v for k, v in values.items() if v is not None}
    try:
        return cls(**explicit)
    except SettingsError as exc:  # a list or map variable that is not JSON
        found = re.search(r'field "(\w+)"', str(exc))
        name = _setting_name(cls, (found.group(1),), explicit) if found else "a setting"
        why = f" ({exc.__cause__})" if exc.__cause__ is not None else ""
        got = _got({"input": os.environ[name]}) if name in os.environ else ""
        raise ConfigurationError(f"invalid {cls.__name__}: {name}: not JSON{why}{got}") from exc
    except ValidationError as exc:
        problems = "; ".join(
            f"{_setting_name(cls, err['loc'], explicit)}: {err['msg']}{_got(err)}" for err in exc.errors()
        )
        raise ConfigurationError(f"invalid {cls.__name__}: {problems}") from exc


def _setting_name(cls: type[BaseSettings], loc: tuple[int | str, ...], explicit: dict[str, Any]) -> str:
    """How the user set the failing value: its flag (``--web-port``) when the command line gave it, else its
    environment variable (``GPUDRA_WEB_PORT``, the name a Helm chart's env or a pod spec sets); a field read by
    an alias (the IMEX daemon's ``CLIQUE_ID``) is named by it already."""
    if not loc:
        return "settings"
    field, rest = str(loc[0]), "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc[1:])
    if field not in cls.model_fields:
        return field + rest
    if field in explicit:
        return "--" + field.replace("_", "-") + rest
    return str(cls.model_config.get("env_prefix") or "") + field.upper() + rest


def _got(err: Any) -> str:
    value = err.get("input")
    if err.get("type") == "missing" or not isinstance(value, str | int | float):
        return ""
    return f" (got {value!r:.80})"
