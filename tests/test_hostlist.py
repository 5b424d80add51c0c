"""Slurm hostlists: compression and expansion."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from topocast.errors import HostlistError
from topocast.model.hostlist import compact, compact_str, expand


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
        # numbers of different zero padding: Slurm reads n[9-010] as n9,n10 and gpu[98-100] as gpu98,gpu99,gpu100
        (["n9", "n010"], "n[9,010]"),
        (["gpu98", "gpu099", "gpu100"], "gpu[98,099-100]"),
        (["gpu098", "gpu099", "gpu100"], "gpu[098-100]"),
        (["n08", "n09", "n10", "n11"], "n[08-11]"),
        (["n099", "n100", "n101", "n1000"], "n[099-101,1000]"),
        (["n8", "n9", "n010", "n011"], "n[8-9,010-011]"),
        (["n1", "n2", "n3", "n01", "n02", "n03"], "n[01-03,1-3]"),
        (["n0", "n1", "n2"], "n[0-2]"),
        (["n00", "n01", "n1", "n2"], "n[00-01,1-2]"),
        (["n7", "n08", "n9"], "n[7,08,9]"),
        (["a1b07", "a1b08", "a1b9"], "a1b[07-08,9]"),
        (["gpu07-ib", "gpu08-ib"], "gpu07-ib,gpu08-ib"),
        (["n", "n0", "n1"], "n,n[0-1]"),  # a plain name that is also a prefix
        (["x\u066307", "x\u066308"], "x\u0663[07-08]"),
    ],
)
def test_compact_examples(names: list[str], expected: str) -> None:
    assert compact_str(names) == expected


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("n[9-010]", ["n9", "n10"]),  # the width is the first number's: what Slurm reads
        ("gpu[98-100]", ["gpu98", "gpu99", "gpu100"]),
        ("gpu[098-100]", ["gpu098", "gpu099", "gpu100"]),
        ("n[9,010]", ["n9", "n010"]),
    ],
)
def test_expand_reads_widths_as_slurm_does(expr: str, expected: list[str]) -> None:
    assert expand(expr) == expected


@pytest.mark.parametrize("bad", ["n[1-\u00b2]", "n[\u0663]"])
def test_expand_rejects_non_ascii_digits(bad: str) -> None:
    with pytest.raises(HostlistError, match="hostlist"):
        expand(bad)


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


#: names as clusters have them: mixed padding, prefixes holding digits, a suffix after the number, plain names
_NAME = st.one_of(
    st.builds(
        lambda prefix, n, width, suffix: f"{prefix}{str(n).zfill(width)}{suffix}",
        st.sampled_from(["n", "gpu", "gpu-", "a1b", "rack1-n", "r07n", "x.1.", ""]),
        st.one_of(st.integers(0, 130), st.integers(990, 1010), st.integers(0, 100_000)),
        st.integers(1, 5),
        st.sampled_from(["", "", "", "-ib", "b", ".eth0"]),
    ),
    st.sampled_from(["login", "head-a", "gpu07-ib", "n", "0"]),
)


@given(st.lists(_NAME, min_size=1, max_size=60, unique=True))
def test_expand_of_compact_gives_back_the_names(names: list[str]) -> None:
    text = compact_str(names)
    back = expand(text)
    assert sorted(back) == sorted(names), text  # the same names, none twice, none lost
    in_order = sorted(names)  # the shape the renderers pass: the fast paths
    assert sorted(expand(compact_str(in_order))) == in_order


def _reference_compact(names: list[str]) -> list[str]:
    """The hostlist rule written out plainly, one number at a time, from Slurm's reading of a range.

    The number is a name's trailing ASCII digits. Slurm prints every number of ``[a-b]`` at the width
    of ``a``'s digits, so a number joins an open range ending just below it only when that printing
    gives back its digits exactly; with two such ranges the unpadded one wins.
    """
    import re

    groups: dict[tuple[str, bool], dict[str, int]] = {}
    for name in names:
        m = re.match(r"^(.*?)([0-9]+)$", name, re.DOTALL)
        if m is None:
            groups.setdefault((name, False), {})
        else:
            groups.setdefault((m.group(1), True), {})[m.group(2)] = int(m.group(2))
    out = []
    for prefix, numbered in sorted(groups):
        nums = sorted(groups[prefix, numbered].items(), key=lambda kv: (kv[1], kv[0]))
        if not nums:
            out.append(prefix)
        elif len(nums) == 1:
            out.append(prefix + nums[0][0])
        else:
            runs: list[list[tuple[str, int]]] = []
            for digits, value in nums:
                fits = [r for r in runs if r[-1][1] == value - 1 and str(value).zfill(len(r[0][0])) == digits]
                fits.sort(key=lambda r: len(r[0][0]) > 1 and r[0][0].startswith("0"))  # unpadded first
                if fits:
                    fits[0].append((digits, value))
                else:
                    runs.append([(digits, value)])
            runs.sort(key=lambda r: (r[0][1], r[0][0]))
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
