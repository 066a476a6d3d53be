"""`make inspect`: reading/inspect.py's picture of one item, its frames panel drawn with the pipeline's decoder.

    python -m pipeline.inspect STORE ITEM OUT.png        (make inspect ITEM=<id>)

The store draws and owns no decoder; this module hands it `decode_thumbnails`, so each thumbnail is the very
frame the pipeline chose for that row (pipeline/decode.py).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from pipeline.decode import decode_frames
from reading import inspect
from store.reader import open_store

THUMB_HEIGHT_PX = inspect.THUMB_HEIGHT_PX


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
    return inspect.scaled(frames, height_px)


def render_item(store_path: Path | str, item_id: str, out_png: Path | str) -> Path:
    return inspect.render_item(store_path, item_id, out_png, decode_thumbnails)


def main(argv: list[str] | None = None) -> None:
    """An unknown item or a path that is no store ends in one line on stderr (exit 2), not a traceback."""
    import sys

    from pipeline import exitcodes

    try:
        inspect.main(argv, decode_thumbnails)
    except KeyError as e:  # the item: say which ones there are
        store = (argv if argv is not None else sys.argv[1:])[0]
        known = sorted({m.id for m in open_store(store).media_items()})
        print(f"{e.args[0]}; the store has {len(known)} item(s), e.g. {', '.join(known[:8])}", file=sys.stderr)
        sys.exit(exitcodes.BAD_INPUT)
    except (FileNotFoundError, ValueError) as e:
        print(e, file=sys.stderr)
        sys.exit(exitcodes.BAD_INPUT)


if __name__ == "__main__":
    main()
