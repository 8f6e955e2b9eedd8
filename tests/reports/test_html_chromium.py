"""The example's HTML report in headless Chromium: it renders, shows what it must, and fetches nothing.

Needs Debian's `chromium` (`apt-get install chromium`; .ci/run installs it). Chromium runs with every host
name mapped to NOTFOUND, so a resource fetched from the network would fail to load; the page is also checked
statically for anything that would fetch (script src, link, @import, url(), src=).
"""

from __future__ import annotations

import re
import shutil
import struct
import subprocess

import pytest

from neuron_migrate.reports.render import render_html

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)"
)
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--host-resolver-rules=MAP * ~NOTFOUND",
    "--window-size=1280,2000",
]


def chromium(tmp_path, page, *args: str) -> subprocess.CompletedProcess:
    profile = tmp_path / "profile"
    return subprocess.run(
        [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args, page.as_uri()],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )


@pytest.fixture(scope="module")
def page(example_report, tmp_path_factory):
    path = tmp_path_factory.mktemp("html") / "report.html"
    path.write_text(render_html(example_report), encoding="utf-8")
    return path


def test_html_fetches_nothing(page):
    html = page.read_text()
    assert re.search(r"<script|<link\b|<iframe|<object|<embed|@import|url\s*\(", html, re.IGNORECASE) is None
    assert re.search(r"\b(src|srcset|poster|data)\s*=", html, re.IGNORECASE) is None
    # links may point at the rule docs (navigation), never at a stylesheet, script, font or image
    assert all(h.startswith(("https://", "#")) for h in re.findall(r'href="([^"]*)"', html))


def test_page_shows_headline_charts_and_tables(page, tmp_path, example_report):
    result = chromium(tmp_path, page, "--dump-dom")
    assert result.returncode == 0, result.stderr[-2000:]
    dom = result.stdout
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", dom))
    assert f'<h1 id="verdict">{example_report.verdict}</h1>' in dom
    assert "Pre-release op data." in text
    for heading in (
        "Effort by category",
        "Op coverage on Neuron",
        "What unblocks most",
        "Files by effort",
        "Ops by effort",
        "Findings by file",
        "How this estimate is made",
        "Where the op data comes from",
    ):
        assert heading in text, heading
    assert dom.count("<svg") >= 3 and 'aria-label="Effort by category"' in dom
    for name in (
        "examples/cuda_project/model.py",
        "aten::split.Tensor",
        "q, k, v = self.qkv(x).split(C, dim=2)",
        "custom-kernel",
    ):
        assert name in text, name
    assert 'href="https://github.com/neuron-migrate/neuron-migrate/blob/main/docs/rules.md#nm101"' in dom


def test_screenshot_is_a_real_picture(page, tmp_path):
    shot = tmp_path / "report.png"
    result = chromium(tmp_path, page, f"--screenshot={shot}")
    assert result.returncode == 0 and shot.exists(), result.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == (1280, 2000)
    assert len(data) > 50_000  # a blank page compresses to a few kB; this one has text, charts and tables
