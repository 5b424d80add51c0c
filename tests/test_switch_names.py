"""On-prem switch names from a name map (``--switch-names FILE``, provider option ``switch_names``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_runner import invoke
from conftest import CONFORMANCE

from topocast.errors import ProviderError
from topocast.model.graph import graph_from_data
from topocast.providers import build_provider
from topocast.providers.base import ProviderInputs
from topocast.providers.switch_names import apply_switch_names, parse_switch_names, switch_key
from topocast.renderers import render

EXAMPLE = CONFORMANCE / "inputs" / "ibnetdiscover" / "example.out"

MAP = """\
# the spine and two leaves of Topograph's example.out, written three ways
0x2c5eab0300c25f00 core-1
S-2c5eab0300b879c0,leaf-a05
2c5eab0300b87a80 leaf-a06
S-0000000000000001 gone-switch
"""


def test_guids_are_read_in_every_spelling_and_other_ids_as_written() -> None:
    assert switch_key("0x2C5EAB0300C25F00") == switch_key("2c5eab0300c25f00") == "S-2c5eab0300c25f00"
    assert switch_key("leaf-sw-01") == "leaf-sw-01"  # a NetQ switch is its host name
    assert parse_switch_names(MAP, "m")["S-2c5eab0300b879c0"] == "leaf-a05"


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("a b c\n", r"^m:1: expected 'ID NAME' \(or 'ID,NAME'\), got 'a b c'$"),
        ("sw1 x\n\n0xAA sw1x\nsw1 y\n", r"^m:4: switch 'sw1' is named twice$"),
    ],
)
def test_a_bad_map_line_is_an_error_naming_it(text: str, error: str) -> None:
    with pytest.raises(ProviderError, match=error):
        parse_switch_names(text, "m")


def graph() -> object:
    nodes = [
        {"name": "a", "fabric": ["l1", "s1"]},
        {"name": "b", "fabric": ["l2", "s1"]},
        {"name": "c", "fabric": ["l3", "s1"]},
    ]
    return graph_from_data({"cluster": "c", "provider": "netq", "nodes": nodes}, "t")


def test_names_that_cannot_be_used_are_warned_about_and_those_switches_keep_their_ids() -> None:
    names = {"s1": "core", "l1": "rack-1", "l2": "rack 2", "l3": "l1", "x9": "gone"}
    named, warnings = apply_switch_names(graph(), names, "m")  # type: ignore[arg-type]
    # l2's name has a space: it keeps its ID; l1 is named rack-1, so the name 'l1' is free for l3
    assert named.switch_names == {"s1": "core", "l1": "rack-1", "l3": "l1"}
    assert warnings[0].startswith("switch name 'rack 2' of m: switch 'l2' contains whitespace")
    assert warnings[0].endswith("; the switch keeps its ID")
    assert warnings[1] == "m: 1 ID(s) name no switch of the graph: x9"
    assert render(named, "slurm-tree").content.splitlines() == [
        "# core=s1",
        "SwitchName=core Switches=l[1-2],rack-1",  # the children by their names: rack-1, l2 and l1 (l3)
        "# rack-1=l1",
        "SwitchName=rack-1 Nodes=a",
        "SwitchName=l2 Nodes=b",
        "# l1=l3",
        "SwitchName=l1 Nodes=c",
    ]


def test_two_switches_given_one_name_both_keep_their_ids() -> None:
    named, warnings = apply_switch_names(graph(), {"l1": "rack", "l2": "rack", "l3": "s1"}, "m")  # type: ignore[arg-type]
    assert named.switch_names == {}
    assert warnings == [
        "m: name 'rack' of switch 'l1' is not unique; the switch keeps its ID",
        "m: name 'rack' of switch 'l2' is not unique; the switch keeps its ID",
        "m: name 's1' of switch 'l3' is not unique; the switch keeps its ID",
    ]


@pytest.mark.skipif(not EXAMPLE.is_file(), reason="Topograph conformance data not here")
def test_the_ibnetdiscover_provider_applies_the_map_read_through_its_inputs() -> None:
    inputs = ProviderInputs(
        "dgx",
        {"switch_names": "s3://b/names.map"},
        uploads=lambda: {"example.out": EXAMPLE.read_bytes()},
        read_text={"s3://b/names.map": MAP}.__getitem__,
    )
    result = build_provider("ibnetdiscover", inputs).discover_full(None)
    assert {k: v for k, v in result.graph.switch_names.items()} == {
        "S-2c5eab0300c25f00": "core-1",
        "S-2c5eab0300b879c0": "leaf-a05",
        "S-2c5eab0300b87a80": "leaf-a06",
    }
    assert "s3://b/names.map: 1 ID(s) name no switch of the graph: S-0000000000000001" in result.warnings
    tree = render(result.graph, "slurm-tree").content.splitlines()
    assert tree[:3] == ["# core-1=S-2c5eab0300c25f00", tree[1], "# leaf-a05=S-2c5eab0300b879c0"]
    assert tree[1].startswith("SwitchName=core-1 Switches=") and tree[1].endswith(",leaf-a[05-06]")


@pytest.mark.skipif(not EXAMPLE.is_file(), reason="Topograph conformance data not here")
def test_discover_takes_switch_names_from_the_cli(tmp_path: Path) -> None:
    (tmp_path / "names.map").write_text(MAP)
    args = ["discover", "--provider", "ibnetdiscover", "--input", str(EXAMPLE), "--cluster", "dgx"]
    result = invoke([*args, "--switch-names", str(tmp_path / "names.map"), "--out", str(tmp_path / "g.json")])
    assert result.exit_code == 0, result.stderr
    tree = invoke(["render", "--graph", str(tmp_path / "g.json"), "-f", "slurm-tree"]).stdout
    assert "SwitchName=leaf-a05 Nodes=a05-p1-dgx-01-c[01,03-04,09,12-15,17-18]" in tree
    (tmp_path / "bad.map").write_text("a b c\n")
    bad = invoke([*args, "--switch-names", str(tmp_path / "bad.map")])
    assert bad.exit_code == 2 and "Traceback" not in bad.stderr
    assert (
        bad.stderr.strip()
        == f"topocast: error: {tmp_path / 'bad.map'}:1: expected 'ID NAME' (or 'ID,NAME'), got 'a b c'"
    )
