"""The committed example report in a real browser: headless Chromium (Debian's ``chromium``,
installed by ``.ci/run``) opens reports/mooncake-arxiv-200/index.html; every image must load
(natural width > 0) and nothing may log an error. A full-page screenshot is saved (to
``$KVPLAN_SCREENSHOT_DIR`` when set, else the test's temporary directory).

Without Chromium the tests skip, unless ``KVPLAN_REQUIRE_CHROMIUM=1`` (CI), where they fail.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tests.headless_chromium import check_page, find_chromium

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "reports" / "mooncake-arxiv-200" / "index.html"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def chromium() -> str:
    found = find_chromium()
    if found is None:
        if os.environ.get("KVPLAN_REQUIRE_CHROMIUM") == "1":
            pytest.fail("KVPLAN_REQUIRE_CHROMIUM=1 but no chromium on PATH (apt-get install chromium)")
        pytest.skip("no chromium on PATH (Debian: apt-get install chromium); CI requires it")
    return found


def test_the_example_report_loads_every_image_without_errors(chromium: str, tmp_path: Path) -> None:
    shots = Path(os.environ.get("KVPLAN_SCREENSHOT_DIR") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    shot = shots / "example_report.png"
    html = EXAMPLE.read_text()
    assert "http://" not in html and "https://" not in html  # self-contained: no network
    result = check_page(EXAMPLE, shot)
    expected = len(re.findall(r"<img\b", html))
    assert expected >= 7  # two heatmaps, capacity, usage, three Pareto frontiers
    assert len(result["images"]) == expected
    broken = [img for img in result["images"] if not img["complete"] or img["naturalWidth"] <= 0]
    assert not broken, broken
    assert result["console_errors"] == []
    assert result["title"].startswith("kvplan capacity report")
    data = shot.read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 10_000


def test_the_checker_sees_a_broken_image_and_a_console_error(chromium: str, tmp_path: Path) -> None:
    """The check above can fail: a page with a missing image and a console error is caught."""
    page = tmp_path / "bad.html"
    page.write_text('<html><body><img src="missing.png"><script>console.error("boom")</script></body></html>')
    result = check_page(page)
    assert [img["naturalWidth"] for img in result["images"]] == [0]
    assert "boom" in result["console_errors"]
    assert any("ERR_FILE_NOT_FOUND" in e for e in result["console_errors"])
