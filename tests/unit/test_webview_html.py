"""The web view's HTML: MIG instances drawn where they sit, every cluster value escaped, fragments addressable."""

from __future__ import annotations

import re

from gpudra.allocator.explain.explanation import NodeLine
from gpudra.controller.webview.html import (
    SECTIONS,
    layout_fragment,
    node_fragment,
    page,
    pending_fragment,
    summary_fragment,
)
from gpudra.planning.fleetview import GpuCard, MigGeometry, MigSlot, NodeCard
from gpudra.planning.workloads import LayoutCard, LayoutNode, PendingCard

A100 = "NVIDIA A100-SXM4-40GB"


def mig_node(*slots: MigSlot) -> NodeCard:
    gpu = GpuCard("gpu-0", 0, A100, 40 * 2**30, "GPU-0", mig=MigGeometry(8, 7, slots))
    return NodeCard("n0", "dgx-a100", True, False, (), (gpu,), 0)


def test_mig_instances_sit_on_their_memory_and_compute_slices() -> None:
    text = node_fragment(
        mig_node(
            MigSlot("gpu-0-mig-3g20gb-9-4", "3g.20gb", 4, 4, 3, holder="ml/infer"),
            MigSlot("gpu-0-mig-1g5gb-19-0", "1g.5gb", 0, 1, 1),
        )
    )
    blocks = re.findall(r'<i class="inst (\w+)" style="grid-column:(\d+)/span (\d+);--c:(\d+)%"', text)
    # 3g.20gb over memory slices 4-7 with 3 of its 4 columns of compute; 1g.5gb over slice 0 with its one
    assert blocks == [("held", "5", "4", "75"), ("idle", "1", "1", "100")]
    assert "--slices:8;--compute:7" in text  # the eighth memory slice has no compute slice under it
    assert (
        'data-holder="ml/infer"' in text
        and "gpu-0-mig-3g20gb-9-4: memory 4-7, compute 4-6, held by ml/infer" in text
    )
    assert 'data-frag="node/n0"' in text and "node wide" in text


def test_values_from_the_cluster_are_escaped() -> None:
    line = NodeLine("n0", 0, "NoMatchingDevice", 1, 0, 0, "<script>alert(1)</script>")
    card = PendingCard("ns", "c", "NoMatchingDevice", 'selector "<b>" & co', ("a <i>",), (line,))
    text = pending_fragment(card)
    assert "<script>" not in text and "&lt;script&gt;" in text and "&quot;&lt;b&gt;&quot; &amp; co" in text
    assert "a &lt;i&gt;" in text
    layout = layout_fragment(LayoutCard("l", "Static", "config <x>", "0/1", (LayoutNode("n", "blocked", "<i>", ()),),
                                        (), {"blocked": 1}))  # fmt: skip
    assert "<i>" not in layout.replace("<i class", "")


def test_long_pending_tables_fold_after_the_nearest_nodes() -> None:
    lines = tuple(NodeLine(f"n{i}", 1, "InsufficientDevices", 9, 8, 8, "8 of 9") for i in range(40))
    text = pending_fragment(PendingCard("ns", "c", "InsufficientDevices", "needs 9", (), lines))
    assert text.count("<tr>") == 40 + 2 and "<summary>24 more nodes</summary>" in text
    first = text.index("<td>n0</td>")
    more = text.index("<summary>24 more nodes</summary>")
    assert first < text.index("<td>n15</td>") < more < text.index("<td>n16</td>")
    assert text.index("<summary><b>ns/c</b>") < first  # the whole card folds to its line


def test_page_holds_every_section_in_order_and_the_version() -> None:
    text = page({"nodes": {"node/n0": node_fragment(mig_node())}}, 7)
    ids = re.findall(r'<div class="frags" id="(\w+)">', text)
    assert ids == [key for key, _ in SECTIONS]
    assert 'data-version="7"' in text and "new EventSource" in text
    assert 'class="pending empty"' in text and 'class="nodes"' in text


def test_summary_counts_claims_not_prepared_only_when_there_are_some() -> None:
    stats = re.compile(r'data-stat="([^"]+)"><b>(\d+)</b>')
    quiet = dict((label, n) for label, n in stats.findall(summary_fragment([mig_node()], 1, 3)))
    assert quiet["pending"] == "1" and "not prepared" not in quiet
    failing = dict((label, n) for label, n in stats.findall(summary_fragment([mig_node()], 0, 3, 2)))
    assert (failing["pending"], failing["not prepared"]) == ("0", "2")


def test_the_nodes_a_pending_claims_pod_cannot_go_to_are_listed_after_its_explanation() -> None:
    kept = tuple((f"n{i}", f"taint t{i}=x:NoSchedule not tolerated") for i in range(7))
    text = pending_fragment(PendingCard("ns", "c", "InsufficientDevices", "needs 9", (), kept_off=kept))
    listed = text.index("nodes its pod cannot go to (kube-scheduler&#x27;s node filters)")
    assert (
        listed
        < text.index("<li>n0: taint t0=x:NoSchedule not tolerated</li>")
        < text.index("<summary>2 more")
    )
    assert text.index("<summary>2 more") < text.index("<li>n5: ")  # the first five shown, the rest folded
