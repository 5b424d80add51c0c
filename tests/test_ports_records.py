"""The one "already published" rule the three use cases share (render, publish, discover's catch-up)."""

from __future__ import annotations

import pytest

from topocast.ports.records import Manifest, PublishedRecord, already_published

MANIFEST = Manifest(generation=7, graph_sha256="a" * 64, artifacts=(), rendered_at="t")


@pytest.mark.parametrize(
    ("published", "expected"),
    [
        (None, False),  # nothing was ever published
        (PublishedRecord(7, "a" * 64, ["n1"]), True),  # this very generation and graph
        (PublishedRecord(6, "a" * 64, ["n1"]), False),  # same graph, older generation: the record catches up
        (PublishedRecord(7, "b" * 64, ["n1"]), False),  # same number, another graph (a healed store)
    ],
)
def test_a_manifest_is_already_published_only_when_generation_and_graph_both_match(
    published: PublishedRecord | None, expected: bool
) -> None:
    assert already_published(published, MANIFEST) is expected
