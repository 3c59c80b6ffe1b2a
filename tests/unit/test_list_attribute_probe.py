"""The list-attribute probe: what the dry-run answer means, and when the agent checks again."""

from __future__ import annotations

from typing import Any

from gpudra.agent.listattributes import ListAttributes
from gpudra.devices.listprobe import probe_slice, support_from_answer, support_from_refusal
from gpudra.errors import KubeError


def test_a_kept_list_means_on_and_a_dropped_one_off() -> None:
    body = probe_slice(driver="gpu.nvidia.com", node_name="n1")
    assert support_from_answer(body).kept
    dropped = probe_slice(driver="gpu.nvidia.com", node_name="n1")
    dropped["spec"]["devices"][0]["attributes"] = {}
    support = support_from_answer(dropped)
    assert not support.kept and support.settled


def test_only_a_validation_refusal_settles_the_answer() -> None:
    assert support_from_refusal(422, "exactly one value must be specified").settled
    unreachable = support_from_refusal(0, "connection refused")
    assert not unreachable.kept and not unreachable.settled and "connection refused" in unreachable.reason


def publishing(lists: ListAttributes) -> bool:
    """``lists.publish`` read afresh (a plain attribute read would be narrowed by mypy across the checks)."""
    return lists.publish


class ProbeClient:
    """Answers dry-run creates from a queue: an object (returned) or a KubeError (raised)."""

    def __init__(self, *answers: dict[str, Any] | KubeError) -> None:
        self.answers = list(answers)
        self.probes = 0

    async def create(
        self, res: Any, body: dict[str, Any], namespace: str | None = None, *, dry_run: bool = False
    ) -> dict[str, Any]:
        assert dry_run
        self.probes += 1
        answer = self.answers.pop(0)
        if isinstance(answer, KubeError):
            raise answer
        return answer


async def test_the_agent_checks_once_then_again_after_a_refused_write() -> None:
    kept = probe_slice(driver="d", node_name="n1")
    client = ProbeClient(kept, KubeError("invalid", status=422))
    warnings: list[tuple[str, str]] = []

    async def warn(reason: str, message: str) -> None:
        warnings.append((reason, message))

    # the ignore below: a fake client with the calls the probe makes
    lists = ListAttributes(client, enabled=True, driver="d", node_name="n1", warn=warn)  # type: ignore[arg-type]
    await lists.check_if_needed()
    await lists.check_if_needed()
    assert publishing(lists) and client.probes == 1 and not warnings
    lists.write_refused(KubeError("conflict", status=409))
    await lists.check_if_needed()
    assert publishing(lists) and client.probes == 1
    lists.write_refused(KubeError("invalid", status=422))
    await lists.check_if_needed()
    assert not publishing(lists) and client.probes == 2
    assert [reason for reason, _ in warnings] == ["ListAttributesOff"]


async def test_with_the_setting_off_nothing_is_asked() -> None:
    client = ProbeClient()

    async def warn(reason: str, message: str) -> None:
        raise AssertionError("no warning expected")

    # the ignore below: a fake client with the calls the probe makes
    lists = ListAttributes(client, enabled=False, driver="d", node_name="n1", warn=warn)  # type: ignore[arg-type]
    await lists.check_if_needed()
    assert not publishing(lists) and client.probes == 0
