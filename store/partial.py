"""Partial items: committed with seconds that did not decode (a damaged or truncated input), so not damage (their
rows are as committed) but not whole either. Their record (the run report's `partial`, `verify`'s, `info`'s) and
the line that shows one."""

from __future__ import annotations

from typing import Any


def partial_record(feature: str, item: str, attrs: dict[str, Any], duration_s: float | None) -> dict[str, Any] | None:
    """feature, item, file, missing_s (the spans), missing_total_s, duration_s; None when nothing is missing."""
    spans = attrs.get("missing_s")
    if not spans:
        return None
    return {"feature": feature, "item": item, "file": (attrs.get("source") or {}).get("path"), "missing_s": spans,
            "missing_total_s": round(sum(b - a for a, b in spans), 6), "duration_s": duration_s}


def partial_line(p: dict[str, Any]) -> str:
    of = f" of {p['duration_s']:.2f}" if p["duration_s"] is not None else ""
    return (f"  PARTIAL {p['feature']}/{p['item']} {p['file'] or ''}: {p['missing_total_s']:.2f}{of} s "
            f"did not decode ({spans_text(p['missing_s'])})")


def spans_text(spans: list[list[float]], most: int = 3) -> str:
    """Missing spans as `a-b s`, neighbouring ones (consecutive seconds) joined, at most `most` of them."""
    joined: list[list[float]] = []
    for a, b in sorted(spans):
        if joined and a <= joined[-1][1] + 1e-6:
            joined[-1][1] = max(joined[-1][1], b)
        else:
            joined.append([a, b])
    text = ", ".join(f"{a:g}-{b:g} s" for a, b in joined[:most])
    return text + (f" and {len(joined) - most} more" if len(joined) > most else "")


