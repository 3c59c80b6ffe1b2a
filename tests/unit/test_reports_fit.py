"""Tables fit a terminal, and are never cut without one."""

from __future__ import annotations

import io
import re

from rich.console import Console

from gpudra.planning.summaries import FleetRow
from gpudra.reports import fleet_table, print_fitted

ROW = FleetRow(
    node="ip-10-0-117-203.us-west-2.compute.internal",
    profile="-",
    gpus={"NVIDIA A100-SXM4-40GB": 8},
    mig_devices={"1g.5gb": 16, "3g.20gb": 8},
    slices=("ip-10-0-117-203.us-west-2.compute.internal-gpu.nvidia.com-abcde",),
)


def render(*, terminal: bool, width: int, wide: bool = False) -> str:
    out = io.StringIO()
    console = Console(file=out, width=width, force_terminal=terminal, color_system=None)
    print_fitted(console, fleet_table([ROW], wide=wide))
    return out.getvalue()


def test_without_a_terminal_every_value_is_whole_on_its_row() -> None:
    text = render(terminal=False, width=40, wide=True)
    assert "…" not in text
    line = next(line for line in text.splitlines() if ROW.node in line)
    assert "8x NVIDIA A100-SXM4-40GB" in line and "16x 1g.5gb" in line and ROW.slices[0] in line
    assert any(line.strip() == "8x 3g.20gb" for line in text.splitlines())  # the next value of the same cell


def test_on_a_terminal_the_table_fits_its_width_without_cutting_values() -> None:
    text = render(terminal=True, width=60)
    assert max(len(line.rstrip()) for line in text.splitlines()) <= 60
    assert "…" not in text
    first = next(line for line in text.splitlines() if line.startswith("ip-10"))
    assert "8x" in first and "16x 1g.5gb" in first  # long values fold inside their own cell


def test_default_columns_fit_80_columns_for_a_demo_node() -> None:
    row = FleetRow(node="dgx-a100-0", profile="dgx-a100", gpus={"NVIDIA A100-SXM4-40GB": 8},
                   mig_devices={"1g.5gb": 16, "2g.10gb": 8, "3g.20gb": 8})  # fmt: skip
    out = io.StringIO()
    print_fitted(Console(file=out, width=80, force_terminal=True, color_system=None), fleet_table([row]))
    assert re.search(r"^dgx-a100-0 +8x NVIDIA A100-SXM4-40GB +16x 1g\.5gb +0 +0", out.getvalue(), re.M)
