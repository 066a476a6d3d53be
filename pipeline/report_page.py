"""`python -m pipeline report STORE --out report.html`: one self-contained HTML page about a store.

What `info` says (pipeline/info.py: the page's counts are its counts), laid out for a person: coverage per
feature and split, every failed, partial, filtered, stale and damaged item with its reason, the run history
(when, how long, pairs per second, the stage that bound the run), distributions that show a bad run at a glance
(rows per item, face ratio, voiced share, missing seconds) as inline SVG, and the inspect picture
(reading/inspect.py, drawn with the pipeline's decoder) of items chosen from a list, with the item's caption,
questions and first transcript words.

Self-contained: the pictures are `data:` URIs, the styles and the one script are inline, and the page's
Content-Security-Policy allows nothing else (no network load, no other script: the script is allowed by its
SHA-256). Everything from a dataset (item ids, file names, captions, questions, words, error messages) goes
through Jinja2's autoescape, so a caption holding `<script>` shows as text and runs nothing.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import math
import tempfile
from collections import Counter
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jinja2
import numpy as np

from atomicio import atomic_write
from pipeline.info import StoreInfo, extractor_of, read_runs, store_info
from store import Store, open_store, spans_text

log = logging.getLogger("siqfeat")

INSPECT_MAX = 8  # default number of items drawn: each picture is a matplotlib figure and a decode (~1-2 s)
WORDS_SHOWN = 40
VOICED_SAMPLE = 2000  # items whose voiced share is computed from their rows when the store has no attribute
HIST_BINS = 20
STILL_PX = 480  # an image item's picture: its longer side at most this many pixels
KINDS = ("damaged", "failed", "partial", "stale", "filtered")  # the problems, the worst first

# The page's only script: shows the item chosen in the list. Allowed by its hash in the CSP, nothing else is.
# The list starts disabled and the body is marked once it is enabled: a page whose script did not run says so.
SCRIPT = """
var choice = document.getElementById('item-choice');
if (choice) {
  choice.addEventListener('change', function (ev) {
    document.querySelectorAll('.item-panel').forEach(function (p) { p.hidden = (p.id !== 'item-' + ev.target.value); });
  });
  choice.disabled = false;
}
document.body.dataset.ready = '1';
"""


def number(v: float) -> str:
    """A count or measure as a person reads it: `2,000`, `12.5`, `0.031` (never `2e+03`)."""
    v = float(v)
    if v == int(v) and abs(v) < 1e15:
        return f"{int(v):,}"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    return f"{v:.3g}" if abs(v) >= 1e-3 else f"{v:.2e}"


# the histogram's plot area inside its SVG (pixels): axes and their labels go around it
H_W, H_H, H_LEFT, H_TOP, H_PLOT_W, H_PLOT_H = 340, 150, 48, 8, 282, 100


def _svg_histogram(values: list[float], label: str, bins: int = HIST_BINS, unit: str = "items") -> dict[str, Any]:
    """Bars of a histogram as plain numbers for the template's inline SVG (no charting library, no network), with
    its axes: counts of `unit` up the side (0 and the tallest bar), the measure's range along the bottom."""
    vals = np.asarray([v for v in values if v is not None and math.isfinite(v)], float)
    if not len(vals):
        return {"label": label, "n": 0, "bars": []}
    lo, hi = float(vals.min()), float(vals.max())
    if hi == lo:  # one value: its bar in the middle of a unit range
        lo, hi = lo - 0.5, hi + 0.5
    counts, edges = np.histogram(vals, bins=bins, range=(lo, hi))
    top = int(counts.max()) or 1
    width = H_PLOT_W / bins
    bars = [{"x": round(H_LEFT + i * width, 2), "w": round(width - 1, 2), "h": round(H_PLOT_H * c / top, 2),
             "y": round(H_TOP + H_PLOT_H - H_PLOT_H * c / top, 2), "count": number(c), "lo": number(edges[i]),
             "hi": number(edges[i + 1])} for i, c in enumerate(counts)]
    base = H_TOP + H_PLOT_H
    ticks = [{"x": round(H_LEFT + f * H_PLOT_W, 2), "text": number(lo + f * (hi - lo))} for f in (0.0, 0.5, 1.0)]
    return {"label": label, "n": number(len(vals)), "bars": bars, "lo": number(float(vals.min())),
            "hi": number(float(vals.max())),
            "median": number(float(np.median(vals))), "top": number(top), "unit": unit, "x_ticks": ticks,
            "base": base, "left": H_LEFT, "right": H_LEFT + H_PLOT_W, "top_y": H_TOP, "w": H_W, "h": H_H,
            "measure": label.split(": ", 1)[-1]}


def _voiced(store: Store, feature: str, items: list[str]) -> list[float]:
    """Per item the share of voiced rows: the extractor's `voiced_fraction` attribute, else the mean of the
    `vuv` column over a sample of items (synthetic or older stores)."""
    out, missing = [], []
    for item in items:
        v = store.item_attrs(feature, item).get("voiced_fraction")
        (out.append(float(v)) if v is not None else missing.append(item))
    columns = [c.lower() for c in store.feature_attrs(feature).get("columns") or []]
    if missing and "vuv" in columns:
        k = columns.index("vuv")
        for item in missing[:VOICED_SAMPLE]:
            (rows,) = store.arrays(feature, item, ["features"])
            if len(rows):
                out.append(float(np.asarray(rows[:, k], np.float64).mean()))
    return out


def distributions(store: Store, info: StoreInfo) -> list[dict[str, Any]]:
    out = []
    for f in info.features:
        entries = store.index(f.name).entries.values()
        out.append(_svg_histogram([e.n_rows for e in entries], f"{f.name}: rows per item"))
        attrs = [e.attrs() for e in entries]
        missing = [sum(b - a for a, b in a.get("missing_s") or []) for a in attrs]
        if any(missing):
            out.append(_svg_histogram(missing, f"{f.name}: missing seconds per item"))
        for key, label in extractor_of(store.feature_attrs(f.name)).item_measures.items():  # faces: face ratio
            values = [float(a[key]) for a in attrs if a.get(key) is not None]
            if values:
                out.append(_svg_histogram(values, f"{f.name}: {label} per item"))
        # a voicing column, whichever extractor made it (covarep's, in either of its layouts)
        if "vuv" in [c.lower() for c in store.feature_attrs(f.name).get("columns") or []]:
            good = store.items(f.name, include_filtered=True)
            out.append(_svg_histogram(_voiced(store, f.name, good), f"{f.name}: voiced share per item"))
    return out


def coverage(store: Store, info: StoreInfo) -> dict[str, Any]:
    """Per feature and split: the items a reader gets (the features table's `items`: filtered, stale and damaged
    ones left out) of the manifest's items."""
    split_of = {m.id: m.split for m in store.media_items()}
    splits = sorted(set(split_of.values()))
    totals = Counter(split_of.values())
    rows = []
    for f in info.features:
        held = Counter(split_of.get(i, "unknown") for i in store.items(f.name))
        rows.append({"feature": f.name, "cells": [{"split": s, "stored": held.get(s, 0), "of": totals[s]} for s in splits]})
    return {"splits": splits, "totals": totals, "rows": rows}


def _problem_items(info: StoreInfo) -> list[str]:
    seen: dict[str, None] = {}
    for kind in KINDS:  # the worst first
        for f in info.features:
            for x in getattr(f, kind):
                seen.setdefault(x["item"], None)
    return list(seen)


def _picture(store_path: Path, item: str) -> tuple[str | None, str | None]:
    """(The inspect PNG of the item as a data: URI, None) or (None, why it could not be drawn)."""
    from reading.inspect import render_item

    with tempfile.TemporaryDirectory() as tmp:
        try:
            png = render_item(store_path, item, Path(tmp) / "item.png")
        except KeyError:  # no time-based rows to draw (a failed item): said on the page, nothing to warn about
            return None, "no frames, faces, acoustic or transcript rows for this item"
        except Exception as e:  # a damaged part or video: the page goes on without it
            why = f"{type(e).__name__}: {e.args[0] if e.args else e}"
            log.warning("report: no picture of %s: %s", item, why)
            return None, why
        return _data_uri(png.read_bytes()), None


def _data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def _still(path: Path) -> tuple[str | None, str | None]:
    """An image item's picture: the image itself, scaled down (its features are one timeless row: no timeline)."""
    import io

    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as im:
            im = im.convert("RGB")
            im.thumbnail((STILL_PX, STILL_PX))
            buf = io.BytesIO()
            im.save(buf, "PNG")
    except (OSError, UnidentifiedImageError, ValueError) as e:
        return None, f"image not readable: {path}: {e}"
    return _data_uri(buf.getvalue()), None


def _item_picture(store_path: Path, m: Any, item: str) -> tuple[str | None, str | None]:
    """What can be shown of the item: a video's inspect picture, an image, nothing for a text-only item (it has
    no media: not a problem, no message)."""
    if m is not None and m.video is None and m.audio is None and m.transcript is None:
        return _still(Path(m.image)) if m.image is not None else (None, None)
    return _picture(store_path, item)


def _question(q: Any) -> dict[str, Any]:
    correct = list(q.correct) if q.correct else [False] * len(q.answers)
    return {"q": q.question, "context": q.context, "type": q.q_type, "labelled": bool(q.correct),
            "answers": [{"text": a, "correct": c} for a, c in zip(q.answers, correct, strict=True)]}


def item_panels(store: Store, info: StoreInfo, chosen: list[str]) -> list[dict[str, Any]]:
    media = {m.id: m for m in store.media_items()}
    questions: dict[str, list[Any]] = {}
    for q in store.qa_items():
        questions.setdefault(q.item_id, []).append(q)
    panels = []
    for item in chosen:
        m = media.get(item)
        words: list[str] = []
        for feat in store.features():
            if item in store.items(feat, include_filtered=True) and "words" in store.read(feat, item).extras:
                words = [str(w) for w in np.asarray(store.read(feat, item).extras["words"][:WORDS_SHOWN])]
                break
        problems = [{"feature": f.name, "kind": kind, **x} for kind in KINDS for f in info.features
                    for x in getattr(f, kind) if x["item"] == item]
        picture, why = _item_picture(store.path, m, item)
        panels.append({"item": item, "picture": picture, "no_picture": why,
                       "caption": m.caption if m else None, "split": m.split if m else None,
                       "reactions": [{"emotions": ", ".join(r.emotions), "reasons": " / ".join(r.reasons)}
                                     for r in (m.reactions if m else ())],
                       "video": str(m.video or m.image or "") if m else "",
                       "questions": [_question(q) for q in questions.get(item, [])],
                       "words": words, "problems": problems})
    return panels


def feature_rows(store: Store, info: StoreInfo) -> dict[str, dict[str, int]]:
    """Per feature: `stored` (items with rows in the store: the `rows` column's items), the reader's `items`
    among them, and the rest by why a reader leaves them out."""
    return {f.name: {"stored": len(store.index(f.name).entries)} for f in info.features}


def last_work(runs: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The latest run report that computed something (its stages timed): a no-op run after it times nothing."""
    return next((r for r in reversed(runs) if r.get("stages")), None)


# colours of the utilisation curves, in the order of the resources
COLOURS = ("#4a7ab5", "#d9822b", "#3a9a5b", "#b5443a", "#7a4ab5", "#8a8a8a", "#2aa6b5", "#b5a22a")
T_W, T_H, T_LEFT, T_TOP, T_PLOT_W, T_PLOT_H = 640, 190, 48, 10, 560, 140


def run_page(rep: dict[str, Any] | None) -> dict[str, Any] | None:
    """The run page's part from one run report: per stage its busy and CPU seconds, the resources' busy shares
    and the binding one (the summary's: `utilisation`), their curves over time where the report has them, the
    batch sizes each feature's actors used."""
    if rep is None:
        return None
    from pipeline.report import batch_lines

    u = rep.get("utilisation") or {}
    stages = [{"stage": name, "unit": st.get("unit") or "", "calls": number(st.get("calls") or 0),
               "items": number(st.get("items") or 0), "units": number(st.get("units") or 0),
               "busy_s": number(round(st.get("busy_s") or 0.0, 1)), "worker_s": number(round(st.get("worker_s") or 0.0, 1)),
               "cpu_s": number(round(st.get("cpu_s") or 0.0, 1)),
               "rate": number(round(st["units_per_busy_s"], 2)) if st.get("units_per_busy_s") else ""}
              for name, st in sorted((rep.get("stages") or {}).items())]
    windows = [{"name": name, "seconds": number(round(u[name]["seconds"], 1)),
                "busy": [{"resource": k, "pct": round(100 * v), "binding": k == u.get("binding")}
                         for k, v in sorted(u[name]["busy"].items(), key=lambda kv: (kv[0] != u.get("binding"), -kv[1]))]}
               for name in ("steady", "run") if isinstance(u.get(name), dict)]
    batches = []
    for feat, workers in sorted((rep.get("batches") or {}).items()):
        for inp, batch, source in sorted({(c["input"], c["batch"], c["source"]) for w in workers for c in w["choices"]}):
            batches.append({"feature": feat, "input": inp, "batch": batch, "source": source})
    kills = rep.get("worker_kills") or {}
    return {"run_id": rep.get("run_id"), "seconds": number(round(float(rep.get("seconds") or 0.0), 1)),
            "stages": stages, "windows": windows, "binding": u.get("binding"), "policy": u.get("policy"),
            "over_time": _curves(u.get("over_time") or {}), "batches": batches,
            "batch_lines": [line.strip() for line in batch_lines(rep.get("batches") or {})],
            "kills": kills if any(kills.values()) else None}


def _curves(ot: dict[str, Any]) -> dict[str, Any] | None:
    """Polylines of each resource's busy share per time bin (0-100 % up the side, seconds along the bottom)."""
    starts, busy = ot.get("start_s") or [], ot.get("busy") or {}
    if not starts or not busy:
        return None
    end = starts[-1] + float(ot.get("bin_s") or 0.0)
    span = end or 1.0

    def x(t: float) -> float:
        return round(T_LEFT + T_PLOT_W * t / span, 1)

    def y(v: float) -> float:
        return round(T_TOP + T_PLOT_H * (1 - v), 1)

    half = float(ot.get("bin_s") or 0.0) / 2
    lines = [{"resource": k, "colour": COLOURS[i % len(COLOURS)],
              "points": " ".join(f"{x(t + half)},{y(v)}" for t, v in zip(starts, vs, strict=False))}
             for i, (k, vs) in enumerate(busy.items())]
    return {"lines": lines, "w": T_W, "h": T_H, "left": T_LEFT, "right": T_LEFT + T_PLOT_W, "top": T_TOP,
            "base": T_TOP + T_PLOT_H, "mid": y(0.5), "end": number(round(end, 1)), "mid_t": number(round(end / 2, 1)),
            "x_mid": x(end / 2)}


TEMPLATE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src '{{ script_hash }}'">
<title>siqfeat report: {{ info.dataset }}</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222;background:#fff}
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}
td.l,th.l{text-align:left}.bad{background:#fdd}.warn{background:#ffe9b3}.random{color:#b00;font-weight:bold}
svg{background:#f6f6f6;margin:4px}.hist{display:inline-block;margin-right:1em;vertical-align:top}
svg text{font-size:10px;fill:#333}.axis{stroke:#333;stroke-width:1}.grid{stroke:#ccc;stroke-width:1}
.item-panel img{max-width:100%;border:1px solid #ccc}code{font-size:90%}.binding{font-weight:bold;background:#e6eefa}
li.correct{color:#075e1e;font-weight:bold}.context{color:#444;font-style:italic;margin:.2em 0}.q{margin:.2em 0}
.legend span{display:inline-block;margin-right:1em}.legend i{display:inline-block;width:1.5em;height:3px;vertical-align:middle;margin-right:.3em}
.note{color:#555;max-width:60em}
</style></head><body>
<h1>{{ info.dataset }} store</h1>
<p><code>{{ info.path }}</code>: schema {{ info.schema }}, written by siqfeat {{ info.package_version }};
<span id="media-items" data-info="media_items">{{ info.media_items }}</span> items,
<span id="questions" data-info="questions">{{ info.questions }}</span> questions.
Exit code of <code>info</code>: <span data-info="exit_code">{{ exit_code }}</span>. Generated {{ generated }}.</p>

<h2>Features</h2>
<table id="features"><tr><th class="l">feature</th><th class="l">extractor</th><th class="l">version</th><th class="l">weights</th>
<th>stored</th><th>items</th><th>rows</th><th>MB</th><th>parts</th>{% for kind in kinds %}<th>{{ kind }}</th>{% endfor %}</tr>
{% for f in info.features %}<tr data-feature="{{ f.name }}"><td class="l">{{ f.name }}</td><td class="l">{{ f.extractor }}</td>
<td class="l">{{ f.version }}</td><td class="l{% if f.weights == 'random' %} random{% endif %}">{{ f.weights }}</td>
<td data-stored="{{ f.name }}">{{ stored[f.name].stored }}</td><td data-info="features.{{ f.name }}.items">{{ f['items'] }}</td><td data-info="features.{{ f.name }}.rows">{{ f.rows }}</td>
<td>{{ '%.1f' % (f.bytes / 1e6) }}</td><td data-info="features.{{ f.name }}.parts">{{ f.parts }}</td>
{% for kind in kinds %}{% set n = f[kind] | length %}<td data-info="features.{{ f.name }}.{{ kind }}"{% if n %} class="{{ 'bad' if kind in ('failed', 'damaged') else 'warn' }}"{% endif %}>{% if n %}<a href="#{{ kind }}-{{ f.name }}">{{ n }}</a>{% else %}0{% endif %}</td>{% endfor %}</tr>
{% endfor %}</table>
<p class="note" id="counts-note"><b>stored</b>: items with rows in the store (<b>rows</b>, <b>MB</b> and <b>parts</b> count
theirs); <b>items</b>: the ones a reader gets (<code>Store.items</code>, the datasets, the coverage below): stored, less
the filtered, stale and damaged ones counted on the right.</p>
{% if random %}<p class="random">weights "random": these features test the pipeline; do not train on them.</p>{% endif %}

<h2>Coverage per split</h2>
<p class="note">Items a reader gets (the features table's <b>items</b>) of the manifest's items in each split.</p>
<table id="coverage"><tr><th class="l">feature</th>{% for s in cov.splits %}<th>{{ s }} ({{ cov.totals[s] }})</th>{% endfor %}</tr>
{% for r in cov.rows %}<tr><td class="l">{{ r.feature }}</td>{% for c in r.cells %}<td{% if c.stored < c.of %} class="warn"{% endif %}>{{ c.stored }} / {{ c.of }}</td>{% endfor %}</tr>
{% endfor %}</table>

<h2>Problems</h2>
{% set ns = namespace(any=false) %}
{% for f in info.features %}{% for kind in kinds %}{% if f[kind] %}{% set ns.any = true %}
<h3 id="{{ kind }}-{{ f.name }}">{{ kind }}: {{ f.name }} ({{ f[kind] | length }})</h3>
<table><tr><th class="l">item</th><th class="l">reason</th></tr>
{% for x in f[kind] %}<tr id="{{ kind }}-{{ f.name }}-{{ x.item }}"><td class="l">{{ x.item }}</td><td class="l">
{%- if kind == 'failed' %}[{{ x.stage }}] {{ x.file or '' }}: {{ x.error }} (run {{ x.run_id }})
{%- elif kind == 'partial' %}{{ '%g' % x.missing_total_s }} s did not decode ({{ spans(x.missing_s) }}) in {{ x.file or '' }}
{%- elif kind == 'damaged' %}{{ x.problem }} ({{ x.part }})
{%- else %}{{ x.reason }}{% endif %}</td></tr>
{% endfor %}</table>
{% endif %}{% endfor %}{% endfor %}
{% if not ns.any %}<p id="no-problems">No failed, partial, filtered, stale or damaged item.</p>{% endif %}

<h2>Runs</h2>
<table id="runs"><tr><th class="l">run</th><th class="l">started (UTC)</th><th>seconds</th><th>done</th><th>skipped</th>
<th>failed</th><th>partial</th><th>pairs/s</th><th class="l">binding</th><th class="l">stopped</th></tr>
{% for r in info.runs %}<tr><td class="l">{{ r.run_id }}</td><td class="l">{{ r.started or '' }}</td><td>{{ '%.1f' % r.seconds }}</td>
<td>{{ r.done }}</td><td>{{ r.skipped }}</td><td{% if r.failed %} class="bad"{% endif %}>{{ r.failed }}</td><td>{{ r.partial }}</td>
<td>{{ r.pairs_per_s if r.pairs_per_s is not none else '' }}</td><td class="l">{{ r.binding_stage or '' }}</td><td class="l">{{ r.stopped or '' }}</td></tr>
{% else %}<tr><td class="l" colspan="10">no run report in _runs/</td></tr>{% endfor %}</table>
<p class="note">binding: the resource that bound the run, as its summary says (the busiest in the run's steady part);
for a run reported before that was measured, the stage busy longest.</p>

{% if run %}<h2 id="run">Run {{ run.run_id }}: where the time went</h2>
<p>The latest run that computed something: {{ run.seconds }} s{% if run.policy %}, {{ run.policy }} policy{% endif %}.
{% if run.binding %}Binding: <span id="binding" class="binding">{{ run.binding }}</span>.{% endif %}</p>
{% if run.kills %}<p class="bad" id="kills">Ray ended {{ run.kills.oom or 0 }} worker(s) for lack of memory and {{ run.kills.crashed or 0 }} that crashed.</p>{% endif %}
{% if run.windows %}<table id="busy"><tr><th class="l">resource</th>{% for w in run.windows %}<th>busy, {{ w.name }} ({{ w.seconds }} s)</th>{% endfor %}</tr>
{% for b in run.windows[0].busy %}<tr{% if b.binding %} class="binding"{% endif %} data-resource="{{ b.resource }}"><td class="l">{{ b.resource }}{% if b.binding %} (binding){% endif %}</td>
{% for w in run.windows %}{% for x in w.busy if x.resource == b.resource %}<td>{{ x.pct }} %</td>{% else %}<td></td>{% endfor %}{% endfor %}</tr>
{% endfor %}</table>{% endif %}
{% if run.over_time %}{% set c = run.over_time %}<div id="over-time"><div>busy share over the run</div>
<svg width="{{ c.w }}" height="{{ c.h }}" viewBox="0 0 {{ c.w }} {{ c.h }}" role="img" aria-label="busy share over the run">
<line class="grid" x1="{{ c.left }}" y1="{{ c.mid }}" x2="{{ c.right }}" y2="{{ c.mid }}"/>
{% for l in c.lines %}<polyline fill="none" stroke="{{ l.colour }}" stroke-width="1.5" points="{{ l.points }}"><title>{{ l.resource }}</title></polyline>{% endfor %}
<line class="axis" x1="{{ c.left }}" y1="{{ c.base }}" x2="{{ c.right }}" y2="{{ c.base }}"/><line class="axis" x1="{{ c.left }}" y1="{{ c.top }}" x2="{{ c.left }}" y2="{{ c.base }}"/>
<text x="{{ c.left - 4 }}" y="{{ c.top + 4 }}" text-anchor="end">100 %</text><text x="{{ c.left - 4 }}" y="{{ c.mid + 3 }}" text-anchor="end">50 %</text><text x="{{ c.left - 4 }}" y="{{ c.base }}" text-anchor="end">0</text>
<text x="{{ c.left }}" y="{{ c.base + 13 }}" text-anchor="start">0 s</text><text x="{{ c.x_mid }}" y="{{ c.base + 13 }}" text-anchor="middle">{{ c.mid_t }} s</text><text x="{{ c.right }}" y="{{ c.base + 13 }}" text-anchor="end">{{ c.end }} s</text>
<text x="{{ (c.left + c.right) / 2 }}" y="{{ c.h - 4 }}" text-anchor="middle">seconds since the first decode</text></svg>
<div class="legend">{% for l in c.lines %}<span><i style="background:{{ l.colour }}"></i>{{ l.resource }}</span>{% endfor %}</div></div>{% endif %}
{% if run.stages %}<h3>Stages</h3><table id="stages"><tr><th class="l">stage</th><th>calls</th><th>items</th><th>units</th><th class="l">unit</th>
<th>busy s</th><th>worker s</th><th>CPU s</th><th>units per busy s</th></tr>
{% for st in run.stages %}<tr data-stage="{{ st.stage }}"><td class="l">{{ st.stage }}</td><td>{{ st.calls }}</td><td>{{ st['items'] }}</td><td>{{ st.units }}</td>
<td class="l">{{ st.unit }}</td><td>{{ st.busy_s }}</td><td>{{ st.worker_s }}</td><td>{{ st.cpu_s }}</td><td>{{ st.rate }}</td></tr>
{% endfor %}</table>
<p class="note">busy s: how long at least one call of the stage ran; worker s: the calls' durations summed; CPU s: the
calls' processes' CPU time (core-seconds).</p>{% endif %}
{% if run.batches %}<h3>Batch sizes</h3><table id="batches"><tr><th class="l">feature</th><th class="l">input</th><th>batch</th><th class="l">from</th></tr>
{% for b in run.batches %}<tr><td class="l">{{ b.feature }}</td><td class="l">{{ b.input }}</td><td>{{ b.batch }}</td><td class="l">{{ b.source }}</td></tr>
{% endfor %}</table>{% for line in run.batch_lines %}<p class="note">{{ line }}</p>{% endfor %}{% endif %}
{% endif %}

<h2>Distributions</h2>
{% for h in hists %}<div class="hist"><div>{{ h.label }} (n={{ h.n }}{% if h.bars %}, {{ h.lo }} to {{ h.hi }}, median {{ h.median }}{% endif %})</div>
{% if h.bars %}<svg width="{{ h.w }}" height="{{ h.h }}" viewBox="0 0 {{ h.w }} {{ h.h }}" role="img" aria-label="{{ h.label }}">{% for b in h.bars %}<rect x="{{ b.x }}" y="{{ b.y }}" width="{{ b.w }}" height="{{ b.h }}" fill="#4a7ab5"><title>{{ b.lo }} to {{ b.hi }}: {{ b.count }} {{ h.unit }}</title></rect>{% endfor %}
<line class="axis" x1="{{ h.left }}" y1="{{ h.base }}" x2="{{ h.right }}" y2="{{ h.base }}"/><line class="axis" x1="{{ h.left }}" y1="{{ h.top_y }}" x2="{{ h.left }}" y2="{{ h.base }}"/>
<text class="y-top" x="{{ h.left - 4 }}" y="{{ h.top_y + 8 }}" text-anchor="end">{{ h.top }}</text><text x="{{ h.left - 4 }}" y="{{ h.base }}" text-anchor="end">0</text>
<text transform="translate(11,{{ (h.top_y + h.base) / 2 }}) rotate(-90)" text-anchor="middle">{{ h.unit }}</text>
{% for t in h.x_ticks %}<text class="x-tick" x="{{ t.x }}" y="{{ h.base + 13 }}" text-anchor="{{ 'start' if loop.first else 'end' if loop.last else 'middle' }}">{{ t.text }}</text>{% endfor %}
<text x="{{ (h.left + h.right) / 2 }}" y="{{ h.h - 4 }}" text-anchor="middle">{{ h.measure }}</text></svg>{% endif %}</div>
{% endfor %}

<h2>Items</h2>
{% if panels %}<label for="item-choice">item: </label><select id="item-choice" disabled>
{% for p in panels %}<option value="{{ loop.index0 }}">{{ p.item }}{% if p.problems %} ({{ p.problems | map(attribute='kind') | unique | join(', ') }}){% endif %}</option>{% endfor %}
</select>
{% for p in panels %}<section class="item-panel" id="item-{{ loop.index0 }}" data-item="{{ p.item }}"{% if not loop.first %} hidden{% endif %}>
<h3>{{ p.item }}</h3><p>split {{ p.split or '?' }}; {% if p.video %}<code>{{ p.video }}</code>{% else %}text only{% endif %}</p>
{% for x in p.problems %}<p><a href="#{{ x.kind }}-{{ x.feature }}-{{ p.item }}">{{ x.kind }}: {{ x.feature }}</a></p>{% endfor %}
{% if p.caption %}<p class="caption">caption: {{ p.caption }}</p>{% endif %}
{% if p.picture %}<img alt="picture of {{ p.item }}" src="{{ p.picture }}">{% elif p.no_picture %}<p>no picture: {{ p.no_picture }}</p>{% endif %}
{% if p.reactions %}<table class="reactions"><tr><th class="l">emotion</th><th class="l">reason</th></tr>{% for r in p.reactions %}<tr><td class="l">{{ r.emotions }}</td><td class="l">{{ r.reasons }}</td></tr>{% endfor %}</table>{% endif %}
{% if p.words %}<p class="words">words: {{ p.words | join(' ') }}</p>{% endif %}
{% if p.questions %}<ol class="questions">{% for q in p.questions %}<li>{% if q.context %}<p class="context">{{ q.context }}</p>{% endif %}
<p class="q">{{ q.q }}{% if q.type %} <small>({{ q.type }})</small>{% endif %}</p><ul>{% for a in q.answers %}<li{% if a.correct %} class="correct"{% endif %}>{{ a.text }}{% if a.correct %} ✓ correct{% endif %}</li>{% endfor %}</ul>
{% if not q.labelled %}<p class="note">no answer labelled correct</p>{% endif %}</li>{% endfor %}</ol>{% endif %}
</section>
{% endfor %}{% else %}<p>no item to show</p>{% endif %}
<script>{{ script | safe }}</script>
</body></html>
"""


def render_report(store_path: Path | str, inspect_items: list[str] | None = None, config: str | None = None) -> str:
    store = open_store(store_path)
    info = store_info(store_path, config)
    if inspect_items is None:
        every = sorted({m.id for m in store.media_items()})
        problems = _problem_items(info)
        inspect_items = (problems + [i for i in every if i not in set(problems)])[:INSPECT_MAX]
    else:
        known = {m.id for m in store.media_items()}
        unknown = [i for i in inspect_items if i not in known]
        if unknown:
            raise ValueError(f"{store.path}: no item {', '.join(map(repr, unknown[:5]))}; "
                             f"e.g. {', '.join(sorted(known)[:5])}")
    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
    digest = base64.b64encode(hashlib.sha256(SCRIPT.encode()).digest()).decode()
    return env.from_string(TEMPLATE).render(
        info=asdict(info) | {"features": [asdict(f) for f in info.features], "runs": [asdict(r) for r in info.runs]},
        exit_code=info.exit_code, kinds=KINDS, random=any(f.weights == "random" for f in info.features),
        cov=coverage(store, info), hists=distributions(store, info), panels=item_panels(store, info, inspect_items),
        stored=feature_rows(store, info), run=run_page(last_work(read_runs(store))),
        spans=spans_text, script=SCRIPT, script_hash=f"sha256-{digest}",
        generated=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"))


def write_report(store_path: Path | str, out: Path | str, inspect_items: list[str] | None = None,
                 config: str | None = None) -> Path:
    """The page written whole (a temporary file renamed over `out`): a reader never sees half a page."""
    page = render_report(store_path, inspect_items, config)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(out, page)
    return out
