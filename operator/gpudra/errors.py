"""The one error hierarchy of gpudra.

Every layer raises subclasses of :class:`GpudraError`, chained ``from`` the original cause (an NVMLError, an HTTP
error, a pydantic ValidationError). Edges (kopf handlers, the gRPC plugin, the CLI) map them to what their caller
understands: kopf's Temporary/PermanentError, a per-claim error string, an exit code. Nothing below the edges knows
about those.
"""

from __future__ import annotations


class GpudraError(Exception):
    """Base of every error gpudra raises on purpose."""


class ConfigurationError(GpudraError):
    """A setting, flag or input file is invalid; the message says which and why."""


class InvalidInputError(GpudraError):
    """A user-supplied object (claim, layout, opaque config, CEL expression) is invalid."""


class HardwareError(GpudraError):
    """The GPU seam failed. ``code`` names the NVML return code when there is one."""

    def __init__(self, message: str, *, code: str = "UNKNOWN") -> None:
        super().__init__(message)
        self.code = code


class HardwareNotSupported(HardwareError):
    """The GPU does not support the operation (NVML_ERROR_NOT_SUPPORTED)."""


class HardwareInsufficientResources(HardwareError):
    """No room for the requested MIG instance (NVML_ERROR_INSUFFICIENT_RESOURCES)."""


class HardwareInUse(HardwareError):
    """The GPU or instance is busy (NVML_ERROR_IN_USE)."""


class HardwareNotFound(HardwareError):
    """No such device or instance (NVML_ERROR_NOT_FOUND)."""


class HardwareInvalidArgument(HardwareError):
    """NVML rejected an argument (NVML_ERROR_INVALID_ARGUMENT), e.g. a placement not in the profile's list."""


class HardwareTimeout(HardwareError):
    """An NVML wait timed out (NVML_ERROR_TIMEOUT); normal for event polling."""


class HardwareGpuLost(HardwareError):
    """The GPU fell off the bus or stopped answering (NVML_ERROR_GPU_IS_LOST); it needs a reset or a reboot."""


class KubeError(GpudraError):
    """The Kubernetes API answered with an error. ``status`` is the HTTP status, ``reason`` Kubernetes' reason."""

    def __init__(self, message: str, *, status: int = 0, reason: str = "", detail: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.detail = detail or message
        """The API server's own message (its Status object's), as kubectl prints it."""


class KubeConnectionError(KubeError):
    """The API server could not be reached, or the connection broke mid-answer (a restart, a network blip)."""


def is_transient(exc: KubeError) -> bool:
    """An API error that waiting can fix: no connection, too many requests (429, a server still starting), or
    the server's own failure (5xx)."""
    return isinstance(exc, KubeConnectionError) or exc.status == 429 or exc.status >= 500


class NotFoundError(KubeError):
    """404 from the API server."""


class ConflictError(KubeError):
    """409 from the API server: a stale resourceVersion or an existing name."""


class KubeletPluginError(GpudraError):
    """The kubelet plugin gRPC exchange failed: an RPC error, or a plugin that broke the protocol (wrong
    plugin type, no supported version, a response map missing a requested claim)."""


class PrepareError(GpudraError):
    """A claim cannot be prepared (or unprepared) on this node. ``reason`` is a short CamelCase code for the
    claim's Ready condition, Events and metrics (ClaimNotFound, ClaimReplaced, NotAllocated, WrongNode,
    UnknownDevice, InvalidConfig, DeviceInUse, Hardware; dynamic MIG: PlacementOccupied, GpuPartitioned)."""

    def __init__(self, message: str, *, reason: str = "PrepareFailed") -> None:
        super().__init__(message)
        self.reason = reason


class CheckpointError(GpudraError):
    """The prepared-claims checkpoint cannot be trusted. ``path`` names the file; subclasses say why. The
    agent logs it and reports it as a Node Event; it never silently overwrites what it could not read."""

    def __init__(self, message: str, *, path: str = "") -> None:
        super().__init__(message)
        self.path = path


class CheckpointCorrupt(CheckpointError):
    """The file is truncated, not JSON, not shaped like a checkpoint, or fails its checksum."""


class CheckpointChecksumMismatch(CheckpointCorrupt):
    """The file parses but its checksum does not match its payload (a partial or manual edit)."""


class CheckpointForeign(CheckpointError):
    """The file belongs to another node, another driver, or is not a gpudra checkpoint at all."""


class CheckpointTooNew(CheckpointError):
    """The file was written by a newer gpudra (higher version); it is kept aside, never overwritten."""


class ComputeDomainError(GpudraError):
    """A ComputeDomain cannot be served as asked; the message names the domain, nodes and cliques
    involved. ``retryable`` is True when waiting can fix it (a daemon not Ready yet, a node still held by
    another domain) and False when only a change of the request or the cluster can (a full clique)."""

    retryable: bool = False


class CliqueFullError(ComputeDomainError):
    """A node cannot join a ComputeDomain's clique: all 18 daemon indices of that clique are taken."""


class ComputeDomainPlacementError(ComputeDomainError):
    """A node or clique cannot serve one more ComputeDomain (its IMEX daemon or channels are spoken for)."""

    retryable = True


class DaemonNotReadyError(ComputeDomainError):
    """A channel cannot be prepared yet: the node's IMEX daemon for the domain is not Ready."""

    retryable = True
