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
from pipeline.info import StoreInfo, extractor_of, store_info
from store.partial import spans_text
from store.reader import Store, open_store

log = logging.getLogger("siqfeat")

INSPECT_MAX = 8  # default number of items drawn: each picture is a matplotlib figure and a decode (~1-2 s)
WORDS_SHOWN = 40
VOICED_SAMPLE = 2000  # items whose voiced share is computed from their rows when the store has no attribute
HIST_BINS = 20
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


def _svg_histogram(values: list[float], label: str, bins: int = HIST_BINS) -> dict[str, Any]:
    """Bars of a histogram as plain numbers for the template's inline SVG (no charting library, no network)."""
    vals = np.asarray([v for v in values if v is not None and math.isfinite(v)], float)
    if not len(vals):
        return {"label": label, "n": 0, "bars": []}
    lo, hi = float(vals.min()), float(vals.max())
    if hi == lo:
        hi = lo + 1.0
    counts, edges = np.histogram(vals, bins=bins, range=(lo, hi))
    top = int(counts.max()) or 1
    width = 300 / bins
    bars = [{"x": round(i * width, 2), "w": round(width - 1, 2), "h": round(100 * c / top, 2), "y": round(100 - 100 * c / top, 2),
             "count": int(c), "lo": f"{edges[i]:.3g}", "hi": f"{edges[i + 1]:.3g}"} for i, c in enumerate(counts)]
    return {"label": label, "n": len(vals), "bars": bars, "lo": f"{lo:.3g}", "hi": f"{float(vals.max()):.3g}",
            "median": f"{float(np.median(vals)):.3g}"}


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
        if f.extractor == "covarep" or "vuv" in [c.lower() for c in store.feature_attrs(f.name).get("columns") or []]:
            good = store.items(f.name, include_filtered=True)
            out.append(_svg_histogram(_voiced(store, f.name, good), f"{f.name}: voiced share per item"))
    return out


def coverage(store: Store, info: StoreInfo) -> dict[str, Any]:
    """Per feature and split: items stored (current, filtered included) of the manifest's items."""
    split_of = {m.id: m.split for m in store.media_items()}
    splits = sorted(set(split_of.values()))
    totals = Counter(split_of.values())
    rows = []
    for f in info.features:
        held = Counter(split_of.get(i, "unknown") for i in store.items(f.name, include_filtered=True))
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
        except Exception as e:  # a damaged part or video, an item without rows: the page goes on without it
            why = f"{type(e).__name__}: {e.args[0] if e.args else e}"
            log.warning("report: no picture of %s: %s", item, why)
            return None, why
        return "data:image/png;base64," + base64.b64encode(png.read_bytes()).decode("ascii"), None


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
        picture, why = _picture(store.path, item)
        panels.append({"item": item, "picture": picture, "no_picture": why,
                       "caption": m.caption if m else None, "split": m.split if m else None,
                       "video": str(m.video or m.image or "") if m else "",
                       "questions": [{"q": q.question, "answers": list(q.answers)} for q in questions.get(item, [])],
                       "words": words, "problems": problems})
    return panels


TEMPLATE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src '{{ script_hash }}'">
<title>siqfeat report: {{ info.dataset }}</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222;background:#fff}
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}
td.l,th.l{text-align:left}.bad{background:#fdd}.warn{background:#ffe9b3}.random{color:#b00;font-weight:bold}
svg{background:#f6f6f6;margin:4px}.hist{display:inline-block;margin-right:1em;vertical-align:top}
.item-panel img{max-width:100%;border:1px solid #ccc}code{font-size:90%}
</style></head><body>
<h1>{{ info.dataset }} store</h1>
<p><code>{{ info.path }}</code>: schema {{ info.schema }}, written by siqfeat {{ info.package_version }};
<span id="media-items" data-info="media_items">{{ info.media_items }}</span> items,
<span id="questions" data-info="questions">{{ info.questions }}</span> questions.
Exit code of <code>info</code>: <span data-info="exit_code">{{ exit_code }}</span>. Generated {{ generated }}.</p>

<h2>Features</h2>
<table id="features"><tr><th class="l">feature</th><th class="l">extractor</th><th class="l">version</th><th class="l">weights</th>
<th>items</th><th>rows</th><th>MB</th><th>parts</th>{% for kind in kinds %}<th>{{ kind }}</th>{% endfor %}</tr>
{% for f in info.features %}<tr data-feature="{{ f.name }}"><td class="l">{{ f.name }}</td><td class="l">{{ f.extractor }}</td>
<td class="l">{{ f.version }}</td><td class="l{% if f.weights == 'random' %} random{% endif %}">{{ f.weights }}</td>
<td data-info="features.{{ f.name }}.items">{{ f['items'] }}</td><td data-info="features.{{ f.name }}.rows">{{ f.rows }}</td>
<td>{{ '%.1f' % (f.bytes / 1e6) }}</td><td data-info="features.{{ f.name }}.parts">{{ f.parts }}</td>
{% for kind in kinds %}{% set n = f[kind] | length %}<td data-info="features.{{ f.name }}.{{ kind }}"{% if n %} class="{{ 'bad' if kind in ('failed', 'damaged') else 'warn' }}"{% endif %}>{% if n %}<a href="#{{ kind }}-{{ f.name }}">{{ n }}</a>{% else %}0{% endif %}</td>{% endfor %}</tr>
{% endfor %}</table>
{% if random %}<p class="random">weights "random": these features test the pipeline; do not train on them.</p>{% endif %}

<h2>Coverage per split</h2>
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
<th>failed</th><th>partial</th><th>pairs/s</th><th class="l">binding stage</th><th class="l">stopped</th></tr>
{% for r in info.runs %}<tr><td class="l">{{ r.run_id }}</td><td class="l">{{ r.started or '' }}</td><td>{{ '%.1f' % r.seconds }}</td>
<td>{{ r.done }}</td><td>{{ r.skipped }}</td><td{% if r.failed %} class="bad"{% endif %}>{{ r.failed }}</td><td>{{ r.partial }}</td>
<td>{{ r.pairs_per_s if r.pairs_per_s is not none else '' }}</td><td class="l">{{ r.binding_stage or '' }}</td><td class="l">{{ r.stopped or '' }}</td></tr>
{% else %}<tr><td class="l" colspan="10">no run report in _runs/</td></tr>{% endfor %}</table>

<h2>Distributions</h2>
{% for h in hists %}<div class="hist"><div>{{ h.label }} (n={{ h.n }}{% if h.n %}, {{ h.lo }} to {{ h.hi }}, median {{ h.median }}{% endif %})</div>
<svg width="300" height="100" viewBox="0 0 300 100" role="img" aria-label="{{ h.label }}">{% for b in h.bars %}<rect x="{{ b.x }}" y="{{ b.y }}" width="{{ b.w }}" height="{{ b.h }}" fill="#4a7ab5"><title>{{ b.lo }} to {{ b.hi }}: {{ b.count }}</title></rect>{% endfor %}</svg></div>
{% endfor %}

<h2>Items</h2>
{% if panels %}<label for="item-choice">item: </label><select id="item-choice" disabled>
{% for p in panels %}<option value="{{ loop.index0 }}">{{ p.item }}{% if p.problems %} ({{ p.problems | map(attribute='kind') | unique | join(', ') }}){% endif %}</option>{% endfor %}
</select>
{% for p in panels %}<section class="item-panel" id="item-{{ loop.index0 }}" data-item="{{ p.item }}"{% if not loop.first %} hidden{% endif %}>
<h3>{{ p.item }}</h3><p>split {{ p.split or '?' }}; <code>{{ p.video }}</code></p>
{% for x in p.problems %}<p><a href="#{{ x.kind }}-{{ x.feature }}-{{ p.item }}">{{ x.kind }}: {{ x.feature }}</a></p>{% endfor %}
{% if p.caption %}<p class="caption">caption: {{ p.caption }}</p>{% endif %}
{% if p.picture %}<img alt="inspect picture of {{ p.item }}" src="{{ p.picture }}">{% else %}<p>no picture: {{ p.no_picture }}</p>{% endif %}
{% if p.words %}<p class="words">words: {{ p.words | join(' ') }}</p>{% endif %}
{% if p.questions %}<ol class="questions">{% for q in p.questions %}<li>{{ q.q }}<ul>{% for a in q.answers %}<li>{{ a }}</li>{% endfor %}</ul></li>{% endfor %}</ol>{% endif %}
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
