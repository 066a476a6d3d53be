"""The report page (`python -m pipeline report`): its counts are `info --json`'s, it is one file that loads nothing
from the network, and what a dataset holds is shown as text. The browser tests run the page in Debian's headless
Chromium (`make install` installs it) and skip, saying so, where it is absent."""

from __future__ import annotations

import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from pipeline.report_page import write_report
from tests.info_store import IMG, SCRIPT, info_json

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed: `make install` installs "
                                                             "Debian's chromium package (apt-get install chromium)")


class _Page(HTMLParser):
    """data-info values, every src/href, the body's attributes and the visible text, from a (dumped) DOM."""

    def __init__(self) -> None:
        super().__init__()
        self.info: dict[str, str] = {}
        self.links: list[tuple[str, str, str]] = []
        self.body: dict[str, str | None] = {}
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self._open: tuple[str, str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        self.tags.append((tag, a))
        if tag == "body":
            self.body = a
        for k in ("src", "href"):
            if a.get(k) is not None:
                self.links.append((tag, k, str(a[k])))
        if a.get("data-info") is not None:  # its text, links inside included, up to its end tag
            self._open = (tag, str(a["data-info"]))
            self.info[self._open[1]] = ""

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._open is not None:
            self.info[self._open[1]] += data

    def handle_endtag(self, tag: str) -> None:
        if self._open is not None and tag == self._open[0]:
            self._open = None


def parse(text: str) -> _Page:
    p = _Page()
    p.feed(text)
    return p


def expected_counts(info: dict) -> dict[str, str]:
    out = {"media_items": str(info["media_items"]), "questions": str(info["questions"]),
           "exit_code": str(info["exit_code"])}
    for f in info["features"]:
        for key in ("items", "rows", "parts"):
            out[f"features.{f['name']}.{key}"] = str(f[key])
        for kind in ("partial", "failed", "filtered", "stale", "damaged"):
            out[f"features.{f['name']}.{kind}"] = str(len(f[kind]))
    return out


@pytest.fixture(scope="module")
def page(info_store: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    # tiny-x: the planted item (no picture: it has no rows); tiny-b: a picture
    return write_report(info_store, tmp_path_factory.mktemp("page") / "report.html", inspect_items=["tiny-x", "tiny-b"])


def test_page_counts_are_info_json(page: Path, info_store: Path) -> None:
    found = parse(page.read_text()).info
    assert found == expected_counts(info_json(info_store))


def test_dataset_text_is_escaped_in_the_file(page: Path) -> None:
    source = page.read_text()
    p = parse(source)
    for planted in (SCRIPT, IMG):
        assert planted not in source  # never as markup ...
        assert planted in "".join(p.text)  # ... always as text
    assert source.count("<script") == 1  # the page's own, and no other
    assert [t for t, a in p.tags if any(k.startswith("on") for k in a)] == []  # no event handler attribute at all


def test_nothing_is_loaded_from_elsewhere(page: Path) -> None:
    p = parse(page.read_text())
    for tag, attr, value in p.links:
        assert value.startswith("data:image/png;base64,") if attr == "src" else value.startswith("#"), (tag, value)
    assert any(tag == "img" for tag, _, _ in p.links)  # the inspect picture of tiny-b is in the file
    assert "no picture: KeyError:" in "".join(p.text)  # tiny-x has no rows to draw: the page says so and goes on


def chromium(page: Path, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}",
           "--enable-logging=stderr", "--v=0", *args, page.as_uri()]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=True)


@needs_chromium
def test_page_in_chromium(page: Path, info_store: Path, tmp_path: Path) -> None:
    run = chromium(page, tmp_path, "--dump-dom")
    # Chromium logs each console message (errors, CSP violations, uncaught exceptions) as a CONSOLE line
    console = [line for line in run.stderr.splitlines() if ":CONSOLE" in line]
    assert console == []
    dom = parse(run.stdout)
    assert dom.info == expected_counts(info_json(info_store))
    # the planted caption, question, answer and error message are on the page as text, and ran nothing
    assert "pwned" not in str(dom.body)
    text = "".join(dom.text)
    for planted in (SCRIPT, IMG):
        assert planted in text
    assert [a for t, a in dom.tags if t == "img" and a.get("src") == "x"] == []
    # the page's own script ran (allowed by its hash): it enabled the item list and marked the body
    assert dom.body.get("data-ready") == "1"
    assert [a for t, a in dom.tags if t == "select"] == [{"id": "item-choice"}]
    panels = [a for t, a in dom.tags if t == "section"]
    assert [p.get("data-item") for p in panels] == ["tiny-x", "tiny-b"]
    assert "hidden" not in panels[0] and "hidden" in panels[1]


@needs_chromium
def test_screenshot_is_not_blank(page: Path, tmp_path: Path) -> None:
    shot = tmp_path / "shot.png"
    run = chromium(page, tmp_path, f"--screenshot={shot}", "--window-size=1280,1600")
    assert [line for line in run.stderr.splitlines() if ":CONSOLE" in line] == []
    pixels = np.asarray(Image.open(shot).convert("L"), float)
    assert pixels.shape == (1600, 1280)
    assert pixels.std() > 20  # text, tables and bars, not a white page
    assert (pixels < 128).mean() > 0.01
