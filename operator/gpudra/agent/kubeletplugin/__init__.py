"""The kubelet DRA plugin: gRPC servers (DRAPlugin v1 + v1beta1, registration, health), kubelet client."""

from gpudra.agent.kubeletplugin.kubelet_client import KubeletClient
from gpudra.agent.kubeletplugin.messages import (
    CallCounters,
    CallObserver,
    CallRecord,
    ClaimRef,
    DeviceHealth,
    HealthSource,
    HealthStatus,
    HealthVersion,
    PluginHandler,
    PluginInfo,
    PreparedDevice,
    PrepareResult,
    RegistrationState,
    UnprepareResult,
)
from gpudra.agent.kubeletplugin.plugin import KubeletPlugin

__all__ = [
    "CallCounters",
    "CallObserver",
    "CallRecord",
    "ClaimRef",
    "DeviceHealth",
    "HealthSource",
    "HealthStatus",
    "HealthVersion",
    "KubeletClient",
    "KubeletPlugin",
    "PluginHandler",
    "PluginInfo",
    "PrepareResult",
    "PreparedDevice",
    "RegistrationState",
    "UnprepareResult",
]
