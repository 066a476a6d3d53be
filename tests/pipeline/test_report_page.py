"""The report page (`python -m pipeline report`): its counts are `info --json`'s, it is one file that loads nothing
from the network, and what a dataset holds is shown as text. The browser tests run the page in Debian's headless
Chromium (`make install` installs it) and skip, saying so, where it is absent."""

from __future__ import annotations

import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from pipeline.report_page import write_report
from testing.info_store import IMG, SCRIPT, info_json

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
    # tiny-x has no rows to draw: the page says so in words (no exception name) and goes on
    assert "no picture: no frames, faces, acoustic or transcript rows for this item" in "".join(p.text)


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


# --- the report as a run page, and one page per store kind --------------------------------------------------------

LATER_RUN, NO_OP_RUN = "20261127T130000Z-def456", "20261127T140000Z-0a0b0c"


def _calls() -> dict[str, list[dict]]:
    """Call records of a run of 20 s on 2 cores: decodes first, then the frames model's one actor busy from 5 s
    to 20 s (the binding resource), the acoustic one's 3 calls longer in busy seconds summed over its 2 actors."""
    decode = [{"stage": "decode:frames", "start_s": 100.0 + k, "end_s": 101.0 + k, "cpu_s": 1.0, "units": 5,
               "items": 1, "unit": "frames"} for k in range(5)]
    frames = [{"stage": "model:frames", "start_s": 105.0 + 3 * k, "end_s": 108.0 + 3 * k, "cpu_s": 2.5, "units": 40,
               "items": 2, "unit": "frames"} for k in range(5)]
    acoustic = [{"stage": "model:acoustic", "start_s": 104.0 + 5 * k, "end_s": 110.0 + 5 * k, "cpu_s": 4.0,
                 "units": 30.0, "items": 1, "unit": "audio_s"} for k in range(3)]
    commit = [{"stage": "commit:frames", "start_s": 119.0, "end_s": 120.0, "cpu_s": 0.2, "units": 80, "items": 4,
               "unit": "frames"}]
    return {"decode:frames": decode, "model:frames": frames, "model:acoustic": acoustic, "commit:frames": commit}


@pytest.fixture(scope="module")
def run_store(info_store: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """info_store with a run that computed something (stages, utilisation with its curves, batch sizes, Ray's
    worker kills), then a no-op run after it (nothing timed)."""
    from pipeline.report import utilisation, utilisation_over_time
    from pipeline.stages import StageStats
    from store.writer import StoreWriter

    out = tmp_path_factory.mktemp("run") / "s.zarr"
    shutil.copytree(info_store, out)
    stats = StageStats()
    for group in _calls().values():
        for c in group:
            stats.add(c)
    workers = {"frames": 1, "acoustic": 2}
    util = utilisation(stats.calls, 2, workers, "balanced")
    util["over_time"] = utilisation_over_time(stats.calls, 2, workers, bins=10)
    counts = {f: {"done": 0, "skipped": 0, "failed": 0, "n/a": 0} for f in ("frames", "acoustic")}
    counts["frames"]["done"] = 4
    batches = {"frames": [{"choices": [{"input": "224x224", "batch": 16, "source": "calibrated", "unit": "frames"}],
                           "model_s": 15.0, "units": 200, "run_per_unit_s": 0.075}]}
    base = {"dataset": "sample", "store": str(out), "failures": [], "partial": [], "stopped": None}
    with StoreWriter(out, "sample") as w:
        w.write_run_report(LATER_RUN, {**base, "run_id": LATER_RUN, "counts": counts, "seconds": 31.0,
                                       "stages": stats.summary(), "utilisation": util, "batches": batches,
                                       "worker_kills": {"oom": 5, "crashed": 0}})
        skipped = {f: {"done": 0, "skipped": 4, "failed": 0, "n/a": 0} for f in counts}
        w.write_run_report(NO_OP_RUN, {**base, "run_id": NO_OP_RUN, "counts": skipped, "seconds": 0.4})
    return out


def test_utilisation_over_time_averages_to_the_run_s_share() -> None:
    """The curves and the one figure agree: the mean over equal bins is the share over the window, per resource;
    the frames actor is idle in the first quarter (decodes only) and busy through the last three."""
    from pipeline.report import utilisation, utilisation_over_time
    from pipeline.stages import StageStats

    stats = StageStats()
    for group in _calls().values():
        for c in group:
            stats.add(c)
    workers = {"frames": 1, "acoustic": 2}
    whole = utilisation(stats.calls, 2, workers)["run"]["busy"]
    ot = utilisation_over_time(stats.calls, 2, workers, bins=4)
    assert ot["start_s"] == [0.0, 5.0, 10.0, 15.0] and ot["bin_s"] == 5.0
    for resource, share in whole.items():
        assert np.mean(ot["busy"][resource]) == pytest.approx(share, abs=2e-3), resource
    assert ot["busy"]["actors frames"] == [0.0, 1.0, 1.0, 1.0]
    assert ot["busy"]["driver"] == [0.0, 0.0, 0.0, 0.2]


def test_the_run_page_shows_stages_busy_shares_batches_and_the_summary_s_binding(run_store: Path) -> None:
    import json

    from pipeline.report import RunReport

    rep = json.loads((run_store / "_runs" / f"{LATER_RUN}.json").read_text())
    summary = RunReport(**rep).summary()
    binding = re.search(r"steady\): (.+?) \d+ % binding", summary).group(1)  # the summary's busy line
    assert binding.startswith("actors frames")  # not model:acoustic, the stage with most busy seconds
    page = write_report(run_store, run_store.parent / "report.html", inspect_items=["tiny-b"])
    source = page.read_text()
    p = parse(source)
    text = "".join(p.text)
    assert f"Run {LATER_RUN}" in text  # the run that computed, not the no-op run after it
    assert source.count('id="binding"') == 1 and '<span id="binding" class="binding">actors frames</span>' in source
    runs = source.split('id="runs"', 1)[1].split("</table>", 1)[0]
    assert "<td class=\"l\">actors frames</td>" in runs and "model:acoustic" not in runs
    for stage, st in rep["stages"].items():  # each stage with its busy, worker and CPU seconds
        row = source.split(f'data-stage="{stage}"', 1)[1].split("</tr>", 1)[0]
        cells = re.findall(r"<td[^>]*>([^<]*)</td>", row)
        assert cells[5:8] == [f"{st['busy_s']:,.1f}".rstrip("0").rstrip("."), f"{st['worker_s']:,.1f}".rstrip(
            "0").rstrip("."), f"{st['cpu_s']:,.1f}".rstrip("0").rstrip(".")], (stage, cells)
    busy = rep["utilisation"]["steady"]["busy"]
    for resource, share in busy.items():
        row = source.split(f'data-resource="{resource}"', 1)[1].split("</tr>", 1)[0]
        assert f"<td>{round(100 * share)} %</td>" in row, resource
    assert source.count("<polyline") == len(rep["utilisation"]["over_time"]["busy"])  # one curve per resource
    batches = source.split('id="batches"', 1)[1].split("</table>", 1)[0]
    assert re.findall(r"<td[^>]*>([^<]*)</td>", batches) == ["frames", "224x224", "16", "calibrated"]
    assert "Ray ended 5 worker(s) for lack of memory" in text


def test_histogram_labels_are_counts_a_person_reads(page: Path) -> None:
    from pipeline.report_page import _svg_histogram, number

    assert [number(x) for x in (2000, 12.5, 0.031, 123456.7, 7)] == ["2,000", "12.5", "0.031", "123,457", "7"]
    h = _svg_histogram([2000.0] * 3 + [2500.0, 10000.0], "acoustic: rows per item")
    assert (h["lo"], h["hi"], h["top"], h["n"]) == ("2,000", "10,000", "3", "5")
    assert [t["text"] for t in h["x_ticks"]] == ["2,000", "6,000", "10,000"]
    source = page.read_text()
    svgs = re.findall(r'<svg width="340".*?</svg>', source, re.S)
    assert svgs and all('class="axis"' in s and 'class="y-top"' in s and 'class="x-tick"' in s for s in svgs)
    assert not re.search(r"\de[+-]\d", "".join(parse(source).text))  # no 2e+03 anywhere on the page


def test_one_count_per_feature_explained(page: Path, info_store: Path) -> None:
    """`stored` is the items the rows column counts; `items` is what a reader gets, and the coverage per split
    adds up to it (faces: 3 stored, 2 of them filtered: 1 item, 1 covered; it said items 1, coverage 3/3)."""
    from store.reader import open_store

    source = page.read_text()
    info = info_json(info_store)
    store = open_store(info_store)
    cov = source.split('id="coverage"', 1)[1].split("</table>", 1)[0]
    for f in info["features"]:
        stored = re.search(rf'data-stored="{f["name"]}">(\d+)<', source)
        assert stored and int(stored.group(1)) == len(store.index(f["name"]).entries)
        row = cov.split(f'<td class="l">{f["name"]}</td>', 1)[1].split("</tr>", 1)[0]
        assert sum(int(a) for a, _ in re.findall(r">(\d+) / (\d+)<", row)) == f["items"], f["name"]
    assert "stored: items with rows in the store" in "".join(parse(source).text).replace("\n", " ")


@pytest.fixture(scope="module")
def text_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """SocialIQA's layout: every item is one question with its context, no media."""
    from manifests.socialiqa import read_socialiqa, write_sample_socialiqa
    from testing.qa_store import write_qa_store

    root = tmp_path_factory.mktemp("text")
    write_sample_socialiqa(root / "raw", n=4)
    items, qa = read_socialiqa(root / "raw")
    return write_qa_store(root / "s.zarr", items, qa)


@pytest.fixture(scope="module")
def image_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Socratis's layout: a still and its caption per item, one timeless row per item."""
    from manifests.socratis import read_socratis, write_sample_socratis
    from rows import FeatureRows
    from store.writer import StoreWriter

    root = tmp_path_factory.mktemp("image")
    items = read_socratis(write_sample_socratis(root / "raw"))
    with StoreWriter(root / "s.zarr", "socratis") as w:
        w.write_manifests(items, [])
        w.set_feature("frames", {"extractor": "densenet161", "version": "synthetic", "config": {}, "rate_hz": None,
                                 "columns": ["d0", "d1"], "weights": "synthetic", "spec_hash": "synthetic"})
        for m in items:
            w.commit("frames", m.id, FeatureRows(np.ones((1, 2), np.float32), np.zeros((1, 2))),
                     {"duration_s": 0.0, "spec_hash": "synthetic", "fingerprint": "-"})
    return root / "s.zarr"


def test_a_text_only_store_shows_its_questions_context_and_correct_answers(
        text_store: Path, caplog: pytest.LogCaptureFixture) -> None:
    from store.reader import open_store

    caplog.set_level("INFO")
    page = write_report(text_store, text_store.parent / "report.html")
    assert [r.getMessage() for r in caplog.records if r.levelname in ("WARNING", "ERROR")] == []
    source = page.read_text()
    text = "".join(parse(source).text)
    assert "KeyError" not in source and "no picture" not in text and "<img" not in source
    shown = re.findall(r'data-item="([^"]+)"', source)
    qa = {q.item_id: q for q in open_store(text_store).qa_items()}
    assert shown and all(i in qa for i in shown)
    for item in shown:
        panel = source.split(f'data-item="{item}"', 1)[1].split("</section>", 1)[0]
        q = qa[item]
        assert q.context and _escaped(q.context) in panel and _escaped(q.question) in panel
        marked = re.findall(r'<li class="correct">([^<]*) ✓ correct</li>', panel)
        assert marked == [_escaped(a) for a, c in zip(q.answers, q.correct, strict=True) if c], item


def _escaped(text: str) -> str:
    """As the page's autoescape writes it."""
    import markupsafe

    return str(markupsafe.escape(text))


def test_an_image_store_shows_each_still_with_its_caption(image_store: Path) -> None:
    from store.reader import open_store

    page = write_report(image_store, image_store.parent / "report.html")
    source = page.read_text()
    media = {m.id: m for m in open_store(image_store).media_items()}
    for item in re.findall(r'data-item="([^"]+)"', source):
        panel = source.split(f'data-item="{item}"', 1)[1].split("</section>", 1)[0]
        assert _escaped(media[item].caption) in panel
        for r in media[item].reactions:  # each worker's emotion and reason
            assert _escaped(", ".join(r.emotions)) in panel and _escaped(" / ".join(r.reasons)) in panel
        (uri,) = re.findall(r'<img alt="picture of [^"]+" src="data:image/png;base64,([^"]+)"', panel)
        import base64
        import io

        shown = np.asarray(Image.open(io.BytesIO(base64.b64decode(uri))).convert("RGB"), float)
        original = Image.open(media[item].image).convert("RGB")
        original.thumbnail(shown.shape[1::-1])
        assert np.abs(shown - np.asarray(original, float)).mean() < 4  # the item's own image, scaled
    assert "KeyError" not in source


@needs_chromium
@pytest.mark.parametrize("kind", ["video", "text", "image"])
def test_each_kind_of_store_in_chromium(kind: str, run_store: Path, text_store: Path, image_store: Path,
                                        tmp_path: Path) -> None:
    """The page of each kind of store loads with no console message, and its screenshot is not blank (the
    screenshots are left in the test's tmp folder: look at them after a change to the page)."""
    store = {"video": run_store, "text": text_store, "image": image_store}[kind]
    page = write_report(store, tmp_path / f"{kind}.html")
    shot = tmp_path / f"{kind}.png"
    run = chromium(page, tmp_path, f"--screenshot={shot}", "--window-size=1280,1200")
    assert [line for line in run.stderr.splitlines() if ":CONSOLE" in line] == []
    pixels = np.asarray(Image.open(shot).convert("L"), float)
    assert pixels.std() > 15 and (pixels < 128).mean() > 0.005  # tables, text and bars, not a white page
    dom = parse(chromium(page, tmp_path, "--dump-dom").stdout)
    assert dom.body.get("data-ready") == "1" and "KeyError" not in "".join(dom.text)
