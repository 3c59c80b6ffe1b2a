"""The web view's versions: a subscriber gets only the fragments that changed, a section's order when fragments
come or go, nothing when nothing changed, and a reader too slow for its backlog starts again from a snapshot."""

from __future__ import annotations

from gpudra.controller.webview.updates import UpdateFeed


def test_a_subscriber_gets_only_what_changed_and_a_slow_one_starts_again() -> None:
    feed = UpdateFeed()
    with feed.subscribe(backlog=2) as queue:
        feed.publish({"nodes": {"node/a": "<a>", "node/b": "<b>"}})
        feed.publish({"nodes": {"node/a": "<a>", "node/b": "<b2>"}})
        feed.publish({"nodes": {"node/a": "<a>", "node/b": "<b2>"}})  # the same again: no new version
        first, second = queue.get_nowait(), queue.get_nowait()
        assert queue.empty() and feed.version == 2
        assert first is not None and first.sections["nodes"]["order"] == ["node/a", "node/b"]
        assert second is not None and second.sections == {"nodes": {"set": {"node/b": "<b2>"}, "order": None}}
        for i in range(3):  # more than the backlog holds
            feed.publish({"nodes": {"node/a": f"<a{i}>"}})
        assert queue.get_nowait() is None and queue.empty()  # start again from a snapshot
    snapshot = feed.snapshot()
    assert snapshot.version == 5 and snapshot.sections == {
        "nodes": {"set": {"node/a": "<a2>"}, "order": ["node/a"]}
    }
