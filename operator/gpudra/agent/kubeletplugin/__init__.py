"""The kubelet DRA plugin: gRPC servers (DRAPlugin v1 + v1beta1, registration, health) on grpclib.

The kubelet's side, ``kubelet_client.KubeletClient`` (on grpcio: the embedded cluster's kubelets, bench, tests), is
imported from its module: a node's agent never loads grpcio."""

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
    "KubeletPlugin",
    "PluginHandler",
    "PluginInfo",
    "PrepareResult",
    "PreparedDevice",
    "RegistrationState",
    "UnprepareResult",
]
