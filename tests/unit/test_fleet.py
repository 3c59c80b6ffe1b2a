"""`gpudra up --nodes PROFILE:COUNT,...` parsing and the Node objects of simulated nodes."""

import pytest

from gpudra.cluster.fleet import DEFAULT_FLEET, node_object, parse_fleet
from gpudra.cluster.up import fleet_ready_timeout
from gpudra.errors import ConfigurationError

KNOWN = {"dgx-h100", "dgx-a100", "l4x4", "gb200-nvl72"}


def test_default_fleet_is_two_h100_nodes_one_a100_and_one_l4() -> None:
    nodes = parse_fleet(DEFAULT_FLEET, KNOWN)
    assert [n.name for n in nodes] == ["dgx-h100-0", "dgx-h100-1", "dgx-a100-0", "l4x4-0"]


def test_counts_give_indexed_names_and_fleet_positions() -> None:
    nodes = parse_fleet("gb200-nvl72:3, l4x4", KNOWN)
    assert [(n.name, n.profile, n.fleet_index) for n in nodes] == [
        ("gb200-nvl72-0", "gb200-nvl72", 0),
        ("gb200-nvl72-1", "gb200-nvl72", 1),
        ("gb200-nvl72-2", "gb200-nvl72", 2),
        ("l4x4-0", "l4x4", 0),
    ]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("dgx-x:1", "unknown node profile 'dgx-x'; known: dgx-a100, dgx-h100"),
        ("dgx-h100:two", "the count after ':' must be a number"),
        ("dgx-h100:0", "count must be between 1 and 10000"),
        ("dgx-h100:1,dgx-h100:2", "listed twice"),
        (" , ", "no nodes given"),
    ],
)
def test_bad_fleet_specs_name_the_problem(spec: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message.replace("(", r"\(")):
        parse_fleet(spec, KNOWN)


def test_node_object_is_ready_and_labelled() -> None:
    body = node_object(parse_fleet("dgx-a100:1", KNOWN)[0])
    assert body["metadata"]["labels"]["gpudra.dev/node-profile"] == "dgx-a100"
    assert body["metadata"]["labels"]["kubernetes.io/hostname"] == "dgx-a100-0"
    assert {"type": "Ready", "status": "True"}.items() <= body["status"]["conditions"][0].items()


def test_a_large_fleet_is_given_longer_to_come_up() -> None:
    assert fleet_ready_timeout(4) == fleet_ready_timeout(1000) == 120
    assert fleet_ready_timeout(5000) == 500  # more than two minutes: a 5,000-node fleet on a loaded machine
