"""Slurm hostlists: compression and expansion."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from topocast.errors import HostlistError
from topocast.hostlist import compact, compact_str, expand


def test_topograph_cluset_cases(conformance_dir) -> None:
    cases = json.loads((conformance_dir / "expected" / "cluset-cases.json").read_text())
    for case in cases["compact"]:
        assert compact(case["expanded"]) == case["compacted"]
    for case in cases["compact_of_expandlist"]:
        assert compact(expand(case["input"])) == case["output"]
    for expr, message in cases["expand_with_limit"].items():
        if expr == "limit":
            continue
        with pytest.raises(HostlistError, match=message.removeprefix("error: ")):
            expand(expr, limit=cases["expand_with_limit"]["limit"])


@pytest.mark.parametrize(
    ("names", "expected"),
    [
        (["dgx-01", "dgx-02", "dgx-03", "dgx-04"], "dgx-[01-04]"),
        (["1101", "1102"], "[1101-1102]"),
        (["switch.1.2", "switch.1.10"], "switch.1.[2,10]"),
        (["node001", "node002", "node003", "node004", "node010"], "node[001-004,010]"),
        (["a"], "a"),
        (["x9", "x10", "x11"], "x[9-11]"),
    ],
)
def test_compact_examples(names: list[str], expected: str) -> None:
    assert compact_str(names) == expected


def test_expand_keeps_width_and_order() -> None:
    assert expand("a-n[08-11],b[1,3]") == ["a-n08", "a-n09", "a-n10", "a-n11", "b1", "b3"]
    assert expand("rack[1-2]-n[1-2]") == ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]


@pytest.mark.parametrize("bad", ["n[1-", "n]1[", "n[a-b]", "n[3-1]", "n[1,,2]"])
def test_expand_rejects_malformed(bad: str) -> None:
    with pytest.raises(HostlistError):
        expand(bad)


@given(
    st.sets(st.integers(min_value=0, max_value=3000), min_size=1, max_size=60), st.sampled_from(["n", "gpu-", "r1n"])
)
def test_compact_then_expand_is_identity(nums: set[int], prefix: str) -> None:
    names = {f"{prefix}{n:04d}" for n in nums}
    assert sorted(expand(compact_str(names))) == sorted(names)


def _reference_compact(names: list[str]) -> list[str]:
    """The hostlist rule written out plainly (the regex split, every run one by one)."""
    import re

    groups: dict[str, dict[str, int]] = {}
    for name in names:
        m = re.match(r"^(.*?)(0*\d+)$", name, re.DOTALL)
        if m is None:
            groups.setdefault(name, {})
        else:
            groups.setdefault(m.group(1), {})[m.group(2)] = int(m.group(2))
    out = []
    for prefix in sorted(groups):
        nums = sorted(groups[prefix].items(), key=lambda kv: (kv[1], kv[0]))
        if not nums:
            out.append(prefix)
        elif len(nums) == 1:
            out.append(prefix + nums[0][0])
        else:
            runs = [[nums[0]]]
            for item in nums[1:]:
                if item[1] == runs[-1][-1][1] + 1:
                    runs[-1].append(item)
                else:
                    runs.append([item])
            body = ",".join(r[0][0] if len(r) == 1 else f"{r[0][0]}-{r[-1][0]}" for r in runs)
            out.append(f"{prefix}[{body}]")
    return out


@given(
    st.lists(
        st.builds(
            lambda p, n, w: p + (str(n).zfill(w) if n is not None else ""),
            st.sampled_from(["gpu-", "n", "rack1-n", "", "x.y", "a\nb-", "x\u0663"]),  # a newline, an Arabic 3
            st.one_of(st.none(), st.integers(0, 40)),
            st.integers(1, 3),
        ),
        max_size=40,
    )
)
def test_compact_matches_the_plain_rule(names: list[str]) -> None:
    assert compact(names) == _reference_compact(names)
    in_order = sorted(set(names))  # the shape the renderers pass (leaves, blocks): its own fast path
    assert compact(in_order) == _reference_compact(in_order)
