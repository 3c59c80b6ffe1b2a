"""Settings of each process, read once at start from flags and GPUDRA_* environment variables and passed down.

Every flag has an environment twin (``--node-name`` = ``GPUDRA_NODE_NAME``). A bad value stops the process at start
with a ConfigurationError that names the setting.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import Field, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from gpudra.errors import ConfigurationError

MigPlannerPolicy = Literal["off", "suggest", "apply"]


class CommonSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="GPUDRA_", extra="forbid")

    log_format: Literal["console", "json"] = Field(
        "console", description="console (readable) or json (one object a line)"
    )
    log_level: str = Field("INFO", description="Python logging level name")
    kubeconfig: Path | None = Field(
        None, description="kubeconfig file; default: in-cluster, then ~/.kube/config"
    )
    metrics_host: str = Field("0.0.0.0", description="address of the /metrics, /healthz, /readyz server")
    metrics_port: int = Field(0, ge=0, le=65535, description="port of the metrics server; 0 disables it")


class AgentSettings(CommonSettings):
    node_name: str = Field(..., min_length=1, description="this node's name (from the downward API)")
    driver_name: str = Field("gpu.nvidia.com", description="DRA driver name published in slices")
    backend: Literal["nvml", "simulated"] = Field(
        "nvml", description="real GPUs through NVML, or a simulated node"
    )
    simulated_profile: str = Field("dgx-h100", description="node profile when backend=simulated")
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
    health_ignored_xids: list[int] = Field(
        default_factory=lambda: [13, 31, 43, 45, 68, 109],
        description="XIDs that are application errors: tainted with effect None (visible, not repelling)",
    )
    max_devices_per_slice: int = Field(
        128, ge=1, le=128, description="devices per ResourceSlice before splitting"
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
    state_dir: Path | None = Field(
        None, description="directory of the prepared-claims checkpoint; default the plugin directory"
    )
    mig_retry_seconds: float = Field(
        5.0,
        gt=0,
        description="how often a MIG layout not yet reached (blocked, waiting for a reset) is retried",
    )

    @property
    def plugin_path(self) -> Path:
        return self.plugin_dir or Path("/var/lib/kubelet/plugins") / self.driver_name

    @property
    def state_path(self) -> Path:
        return self.state_dir or self.plugin_path


class ControllerSettings(CommonSettings):
    driver_name: str = Field("gpu.nvidia.com", description="DRA driver whose claims the controller explains")
    pending_grace_seconds: float = Field(
        10.0, ge=0, description="how long a claim may stay unallocated before the controller explains it"
    )
    pending_interval_seconds: float = Field(
        30.0, gt=0, description="how often a pending claim is re-explained (Events are deduplicated)"
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
    mig_planner: MigPlannerPolicy = Field(
        "suggest",
        description="MIG planner for pending MIG claims: off; suggest (the repartition of idle GPUs that would "
        "satisfy them, in the claim's Event and `gpudra explain`); apply (also write it as the MigLayout "
        "gpudra-planner-<node>, never over a user's MigLayout)",
    )


S = TypeVar("S", bound=BaseSettings)


def load_settings(cls: type[S], **values: Any) -> S:
    """Build settings from explicit values (flags) over the environment; raise ConfigurationError on bad input."""
    try:
        return cls(**{k: v for k, v in values.items() if v is not None})
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'settings'}: {err['msg']}" for err in exc.errors()
        )
        raise ConfigurationError(f"invalid {cls.__name__}: {problems}") from exc
