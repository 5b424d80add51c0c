"""Fabric view benchmark: how long the page script takes to draw in headless Chromium.

Renders fat trees of 256, 2,000 and 10,000 nodes with ``topocast.renderers.html.render_page`` (the
same shape as ``tests/test_html.py``'s), opens each ``#search=<node>`` in headless Chromium
(``--dump-dom``) and prints the page's own ``data-render-ms`` (what the script measures from its
start to the last drawn node) next to its goal: 1.5 s, 2 s and 4 s. The browser tests check that the
page draws and finds the node; how fast is measured here, not asserted.

    .venv/bin/python bench/html_view.py [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from test_html import HEADLESS, fat_tree  # the page and browser flags the browser tests use

from topocast.renderers.html import render_page

CASES = [(256, "gpu-000200", 1500), (2000, "gpu-001234", 2000), (10_000, "gpu-009876", 4000)]


def render_ms(chromium: str, url: str) -> int | None:
    with tempfile.TemporaryDirectory() as profile:
        dom = subprocess.run(
            [chromium, *HEADLESS, f"--user-data-dir={profile}", "--window-size=1400,1000", "--dump-dom", url],
            capture_output=True, text=True, timeout=120,
        ).stdout  # fmt: skip
    found = re.search(r'<body[^>]*data-render-ms="(\d+)"', dom)
    return int(found.group(1)) if found else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(chromium).is_file():
        sys.exit("bench/html_view.py: chromium not found")
    print(f"load average {os.getloadavg()[0]:.1f}; median of {args.runs} runs")
    print(f"{'nodes':>7}  {'render ms':>9}  {'goal ms':>7}  ratio to goal")
    with tempfile.TemporaryDirectory() as tmp:
        for n, target, goal in CASES:
            page = Path(tmp) / f"view-{n}.html"
            page.write_text(render_page(fat_tree(n)))
            times = [render_ms(chromium, f"{page.as_uri()}#search={target}") for _ in range(args.runs)]
            drawn = [t for t in times if t is not None]
            if not drawn:
                print(f"{n:>7}  the page script did not finish")
                continue
            ms = statistics.median(drawn)
            print(f"{n:>7}  {ms:>9.0f}  {goal:>7}  {ms / goal:.2f}")


if __name__ == "__main__":
    main()
