"""Whether this agent publishes list-typed attributes (``settings.list_attributes``): only where the API server
keeps them. A server-side dry-run create of a small ResourceSlice (:mod:`gpudra.devices.listprobe`) finds out, at
the first publish and again after a write is refused; the outcome is logged and, when lists are off, posted as a
Warning Event on the Node."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from gpudra.devices import ListSupport, probe_slice, support_from_answer, support_from_refusal
from gpudra.errors import KubeError
from gpudra.kube.client import KubeClient
from gpudra.kube.resources import RESOURCE_SLICES
from gpudra.telemetry import get_logger

log = get_logger(__name__)

REASON_OFF = "ListAttributesOff"

Warn = Callable[[str, str], Awaitable[object]]
"""Posts a Warning Event on the Node: (reason, message)."""


class ListAttributes:
    """``publish``: whether list attributes go into the slices now. Checks when asked and not settled."""

    def __init__(self, client: KubeClient, *, enabled: bool, driver: str, node_name: str, warn: Warn) -> None:
        self._client = client
        self._enabled = enabled
        self._driver = driver
        self._node_name = node_name
        self._warn = warn
        self.support: ListSupport | None = None  # None: not checked (or to be checked again)

    @property
    def publish(self) -> bool:
        return self._enabled and self.support is not None and self.support.kept

    async def check_if_needed(self) -> None:
        """Run the probe when the setting is on and no settled answer is known."""
        if not self._enabled or (self.support is not None and self.support.settled):
            return
        body = probe_slice(driver=self._driver, node_name=self._node_name)
        try:
            answer = await self._client.create(RESOURCE_SLICES, body, dry_run=True)
            support = support_from_answer(answer)
        except KubeError as exc:
            support = support_from_refusal(exc.status, str(exc))
        changed = (
            self.support is None or support.kept != self.support.kept or support.reason != self.support.reason
        )
        self.support = support
        if support.kept:
            log.info("list-typed attributes published", node=self._node_name, reason=support.reason)
            return
        log.warning("list-typed attributes not published", node=self._node_name, reason=support.reason)
        if changed:
            await self._warn(REASON_OFF, support.reason)

    def write_refused(self, exc: BaseException) -> None:
        """A slice write failed: when it carried lists and the server refused it as invalid, check again before
        the next publish (the gate may have been turned off, or the server replaced by one without it)."""
        if self.publish and isinstance(exc, KubeError) and exc.status == 422:
            log.warning(
                "a slice write with list attributes was refused; checking again", node=self._node_name
            )
            self.support = None
