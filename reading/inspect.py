"""One item at a glance, on one time axis: 1 fps frames with face boxes, F0 with voicing, words, frame features.

    python -m reading.inspect STORE ITEM OUT.png        (make inspect ITEM=<id>)

Every panel is drawn at the intervals the store records, so what belongs together lines up vertically. The
frames are re-decoded from the item's video by media/decode.py, the decoder the pipeline extracts with, so each
picture is the very frame it chose for that row."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

import numpy as np

from media.decode import decode_frames
from reading.align import item_duration_s
from store import ItemFeature, Store, open_store

FIG_SIZE_IN = (16.0, 10.0)
DPI = 100  # the PNG is FIG_SIZE_IN * DPI pixels: 1600 x 1000
THUMB_HEIGHT_PX = 96
HEATMAP_MAX_COLUMNS = 256


def _find(store: Store, item: str, feature: str) -> ItemFeature | None:
    """The item's rows of `feature` where the store holds them (filtered items too: this is for looking)."""
    if feature in store.features() and item in store.items(feature, include_filtered=True):
        return store.read(feature, item)
    return None


def scaled(frames: np.ndarray, height_px: int | None = THUMB_HEIGHT_PX) -> tuple[list[np.ndarray], tuple[int, int]]:
    """RGB frames (N, H, W, 3) scaled to `height_px` (None: as they are), and their full size (width, height)."""
    from PIL import Image

    h, w = frames.shape[1:3]
    if height_px is None:
        return list(frames), (w, h)
    size = (max(1, round(w * height_px / h)), height_px)
    return [np.asarray(Image.fromarray(f).resize(size, Image.BILINEAR)) for f in frames], (w, h)


def decode_thumbnails(video: Path, intervals: np.ndarray, height_px: int | None = THUMB_HEIGHT_PX,
                      ) -> tuple[list[np.ndarray], tuple[int, int]]:
    """One RGB image per interval, the frame the pipeline chose for that row (`decode_frames`), scaled to
    `height_px` (None: full size), and the full frame size (width, height) that face boxes refer to. A row whose
    second had no decodable frame is black."""
    decoded = decode_frames(video)
    row = {float(s): i for i, s in enumerate(decoded.intervals[:, 0])}
    blank = np.zeros((*decoded.pixels.shape[1:3], 3), np.uint8)
    frames = np.stack([decoded.pixels[row[float(s)]] if float(s) in row else blank
                       for s in np.asarray(intervals, np.float64)[:, 0]])
    return scaled(frames, height_px)


def _panel_frames(ax: Any, store: Store, item: str, frames: ItemFeature | None, faces: ItemFeature | None) -> None:
    ax.set_ylabel("frames\n+ faces")
    ax.set_yticks([])
    ax.set_ylim(1, 0)
    ref = frames or faces
    media = {m.id: m for m in store.media_items()}.get(item)
    video = Path(media.video) if media is not None and media.video is not None else None
    why = ("no frames feature" if ref is None
           else f"video not found ({video or 'no manifest entry'})" if video is None or not video.exists() else None)
    if why:
        ax.text(0.5, 0.5, f"frames not shown: {why}", transform=ax.transAxes, ha="center", va="center")
        return
    thumbs, (w, h) = decode_thumbnails(video, ref.intervals)
    for (s, e), img in zip(ref.intervals, thumbs, strict=True):
        ax.imshow(img, extent=(s, e, 1, 0), aspect="auto", interpolation="bilinear")
    if faces is None:
        return
    boxes, mask = np.asarray(faces.extras["boxes"][...]), np.asarray(faces.extras["mask"][...])
    for (s, e), bs, ms in zip(faces.intervals, boxes, mask, strict=True):
        for (x0, y0, x1, y1) in bs[ms]:
            xs = s + np.array([x0, x1, x1, x0, x0]) / w * (e - s)
            ax.plot(xs, np.array([y0, y0, y1, y1, y0]) / h, color="lime", lw=1.2)


def _column(r: ItemFeature, pattern: str) -> np.ndarray | None:
    for k, name in enumerate(r.columns):
        if re.fullmatch(pattern, name, flags=re.IGNORECASE):
            return np.asarray(r.features[:, k], np.float64)
    return None


def _panel_f0(ax: Any, acoustic: ItemFeature | None) -> None:
    ax.set_ylabel("F0 (Hz)")
    f0 = _column(acoustic, r"f0") if acoustic is not None else None
    if f0 is None:
        ax.text(0.5, 0.5, "no acoustic feature with an F0 column", transform=ax.transAxes, ha="center", va="center")
        return
    mid = acoustic.intervals.mean(axis=1)
    vuv = _column(acoustic, r"vuv|voic(ed|ing)")
    voiced = (vuv > 0.5) if vuv is not None else np.isfinite(f0) & (f0 > 0)
    shown = np.where(voiced & np.isfinite(f0) & (f0 > 0), f0, np.nan)  # unvoiced F0 is undefined: a gap
    ax.plot(mid, shown, color="tab:blue", lw=1.2, label="F0 where voiced")
    top = np.nanmax(shown) * 1.1 if np.isfinite(shown).any() else 1.0
    ax.fill_between(acoustic.intervals[:, 0], 0, top, where=voiced, step="post", color="tab:orange", alpha=0.2,
                    label="voiced" + (" (VUV)" if vuv is not None else " (F0 > 0)"))
    ax.set_ylim(0, top)
    ax.legend(loc="upper right", fontsize=8)


def _panel_words(ax: Any, transcript: ItemFeature | None) -> None:
    ax.set_ylabel("words")
    ax.set_yticks([])
    ax.set_ylim(0, 3)
    if transcript is None or "words" not in transcript.extras:
        ax.text(0.5, 0.5, "no transcript", transform=ax.transAxes, ha="center", va="center")
        return
    words = np.asarray(transcript.extras["words"][...])
    for k, ((s, e), word) in enumerate(zip(transcript.intervals, words, strict=True)):
        y = 0.5 + k % 3 * 0.9  # three staggered rows so neighbouring words do not overprint
        if e > s:
            ax.broken_barh([(s, e - s)], (y - 0.3, 0.6), color="tab:green", alpha=0.35)
        else:
            ax.vlines(s, y - 0.3, y + 0.3, color="tab:red")
        ax.text((s + e) / 2, y, str(word), ha="center", va="center", fontsize=7)


def _panel_heatmap(ax: Any, fig: Any, frames: ItemFeature | None) -> None:
    ax.set_ylabel("frame features\n(z-scored)")
    if frames is None or len(frames.intervals) == 0:
        ax.text(0.5, 0.5, "no frame features", transform=ax.transAxes, ha="center", va="center")
        return
    x = np.asarray(frames.features[...], np.float64)
    x = np.where(np.isfinite(x), x, np.nan)
    groups = np.array_split(np.arange(x.shape[1]), min(HEATMAP_MAX_COLUMNS, x.shape[1]))
    x = np.stack([np.nanmean(x[:, g], axis=1) if len(g) else np.zeros(len(x)) for g in groups], axis=1)
    sd = np.nanstd(x, axis=0)
    z = (x - np.nanmean(x, axis=0)) / np.where(sd > 0, sd, 1.0)
    order = np.argsort(frames.intervals[:, 0], kind="stable")
    iv = frames.intervals[order]
    edges = np.r_[iv[:, 0], iv[-1, 1]]
    mesh = ax.pcolormesh(edges, np.arange(z.shape[1] + 1), z[order].T, cmap="RdBu_r", vmin=-3, vmax=3)
    ax.set_yticks([])
    # The colour bar sits in an inset outside the axes, so this panel keeps the shared time axis' width.
    fig.colorbar(mesh, cax=ax.inset_axes((1.005, 0.0, 0.008, 1.0)))


def render_item(store_path: Path | str, item_id: str, out_png: Path | str) -> Path:
    """Write the PNG (1600 x 1000 px) for one item and return its path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = open_store(store_path)
    frames, faces, acoustic, transcript = (_find(s, item_id, f) for f in ("frames", "faces", "acoustic", "transcript"))
    present = [r for r in (frames, faces, acoustic, transcript) if r is not None]
    if not present:
        raise KeyError(f"{store_path}: no frames, faces, acoustic or transcript rows for item {item_id!r}")
    duration = item_duration_s(s, item_id, [r.feature for r in present])
    fig, axes = plt.subplots(4, 1, figsize=FIG_SIZE_IN, dpi=DPI, sharex=True,
                             gridspec_kw={"height_ratios": [1.3, 1, 0.8, 1.4]})
    _panel_frames(axes[0], s, item_id, frames, faces)
    _panel_f0(axes[1], acoustic)
    _panel_words(axes[2], transcript)
    _panel_heatmap(axes[3], fig, frames)
    axes[-1].set_xlabel("seconds on the clip's timeline")
    axes[-1].set_xlim(0, max(duration, 1e-3))
    notes = [f"{r.feature}: {len(r.intervals)} rows" + (" (filtered)" if r.attrs.get("filtered") else "")
             for r in present]
    fig.suptitle(f"{item_id} — {duration:.2f} s — " + "; ".join(notes), fontsize=11)
    fig.subplots_adjust(left=0.07, right=0.95, top=0.94, bottom=0.06, hspace=0.12)
    out = Path(out_png)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=DPI)  # no bbox_inches="tight": the size stays FIG_SIZE_IN * DPI
    plt.close(fig)
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description="Render one item of a feature store as a PNG.")
    p.add_argument("store", type=Path)
    p.add_argument("item")
    p.add_argument("out", type=Path)
    args = p.parse_args(argv)
    print(render_item(args.store, args.item, args.out))


if __name__ == "__main__":
    main()
