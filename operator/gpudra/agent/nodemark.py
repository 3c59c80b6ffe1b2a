"""The Node's word on this node's slices, for autoscalers and admins: the label
``gpudra.dev/resourceslices-published`` (``true`` once the slices are published and current, ``false`` on a clean
shutdown) and the annotation ``gpudra.dev/resourceslices-generation`` (the pool generation they carry)."""

from __future__ import annotations

from gpudra.errors import GpudraError
from gpudra.kube.client import KubeClient
from gpudra.kube.resources import NODES
from gpudra.telemetry import get_logger

log = get_logger(__name__)
PUBLISHED_LABEL = "gpudra.dev/resourceslices-published"
GENERATION_ANNOTATION = "gpudra.dev/resourceslices-generation"


class NodeMark:
    """Writes the label and annotation on change only."""

    def __init__(self, client: KubeClient, node: str) -> None:
        self._client = client
        self._node = node
        self._written: tuple[str, str] | None = None

    @property
    def written(self) -> bool:
        """Whether this agent has marked the Node yet."""
        return self._written is not None

    async def mark(self, *, published: bool, generation: int) -> bool:
        """Say whether the slices are published and current, and their generation; True when it must be retried."""
        mark = ("true" if published else "false", str(generation))
        if self._written == mark:
            return False
        value, generation_text = mark
        patch = {
            "metadata": {
                "labels": {PUBLISHED_LABEL: value},
                "annotations": {GENERATION_ANNOTATION: generation_text},
            }
        }
        try:
            await self._client.patch(NODES, self._node, patch)
        except GpudraError as exc:
            log.warning("marking the node failed; will retry", node=self._node, error=str(exc))
            return True
        self._written = mark
        return False
