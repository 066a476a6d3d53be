"""facenet-pytorch's MTCNN detection with stages 2 and 3 vectorised over every candidate box of every frame.

`facenet_pytorch.models.utils.detect_face` crops and area-resizes each candidate box in a Python loop before the
R-net (24×24) and O-net (48×48); on a GPU that loop (one slice, one `interpolate` and a few launches per box, plus a
host copy in `pad`) bounds throughput. Here the same crops come from one summed-area table per frame:

- area resizing (`interpolate(mode="area")` = `adaptive_avg_pool2d`) averages output cell (i, j) over input rows
  floor(i·h/n) … ceil((i+1)·h/n) - 1 and the same for columns, then divides the sum by the row count and by the
  column count, in float32;
- the input pixels are integers (uint8 frames cast to float32), so every cell sum is an integer; below 2**24 it is
  exact in float32 in any summation order. A cell holds at most ceil(h/n + 1)**2 pixels of at most 255, which stays
  below 2**24 for crops up to ~6,000 px. The integer table gives that exact sum from four corners;
- dividing it by the row count and then by the column count in float32 repeats what PyTorch's kernel does, so the
  R-/O-net inputs, and with them boxes, probabilities and landmarks, equal facenet-pytorch's bit for bit.

Everything else is facenet-pytorch's own: its P-/R-/O-nets, `generateBoundingBox`, `batched_nms`, `bbreg`,
`rerec`, `pad`, `fixed_batch_process` and the final "Min" NMS. One difference: facenet-pytorch skips a box whose
clipped crop is empty without removing it from the box list and then fails on mismatched shapes; here such a
box is dropped with its crop.
"""

from __future__ import annotations

import numpy as np
import torch
from facenet_pytorch.models.utils.detect_face import (
    batched_nms_numpy,
    bbreg,
    fixed_batch_process,
    generateBoundingBox,
    imresample,
    pad,
    rerec,
)
from torchvision.ops.boxes import batched_nms

BOXES_PER_GATHER = 512  # bounds one gather's (boxes, n, n) int64 indices and sums: 512·48²·(8 + 3·4) B = 23 MiB


def pyramid_scales(height: int, width: int, min_face_size: int, factor: float) -> list[float]:
    """P-net scales: the smallest face maps to 12 px, then steps of `factor` while the frame stays >= 12 px."""
    m = 12.0 / min_face_size
    minl, scale, scales = min(height, width) * m, m, []
    while minl >= 12:
        scales.append(scale)
        scale, minl = scale * factor, minl * factor
    return scales


def summed_area(frames: torch.Tensor) -> torch.Tensor:
    """(B, H, W, C) uint8 frames → (B, H+1, W+1, C) integer sums of every top-left rectangle, channels last so that
    one gather fetches a pixel's C sums together."""
    height, width = frames.shape[1:3]
    # int32 holds the whole frame's sum when 255·H·W < 2**31 (up to ~8.4 Mpx); larger frames need int64
    dtype = torch.int32 if 255 * height * width < 2**31 else torch.int64
    table = torch.zeros((len(frames), height + 1, width + 1, frames.shape[3]), dtype=dtype, device=frames.device)
    # dtype= also for cumsum: torch widens integer sums to int64 by default
    table[:, 1:, 1:] = frames.to(dtype).cumsum(1, dtype=dtype).cumsum(2, dtype=dtype)
    return table


def _cell_edges(start: torch.Tensor, length: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per box, adaptive pooling's first and one-past-last input index of each of `n` cells: (k, n) each."""
    i = torch.arange(n, device=start.device)
    lo = torch.div(i * length[:, None], n, rounding_mode="floor")
    hi = torch.div((i + 1) * length[:, None] + n - 1, n, rounding_mode="floor")
    return start[:, None] + lo, start[:, None] + hi


def crops_area_resized(
    table: torch.Tensor, image_inds: torch.Tensor, y0: torch.Tensor, y1: torch.Tensor, x0: torch.Tensor,
    x1: torch.Tensor, n: int,
) -> torch.Tensor:
    """Crops rows y0:y1, columns x0:x1 of frame image_inds[k], each area-resized to n×n: (k, C, n, n) float32.

    `table` is `summed_area(frames)`. Equal to `imresample(imgs[k:k+1, :, y0:y1, x0:x1], (n, n))` per box, with
    imgs the frames as (B, C, H, W) float32 (see the module doc for why exactly).
    """
    rows, cols, channels = table.shape[1:]
    r_lo, r_hi = _cell_edges(y0, y1 - y0, n)
    c_lo, c_hi = _cell_edges(x0, x1 - x0, n)
    base = image_inds[:, None, None] * (rows * cols)
    pixels = table.reshape(-1, channels)  # one row per (frame, y, x): its C sums

    def corner(r: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        return pixels[base + (r * cols)[:, :, None] + c[:, None, :]]  # (k, n, n, C)

    sums = corner(r_hi, c_hi) - corner(r_lo, c_hi) - corner(r_hi, c_lo) + corner(r_lo, c_lo)
    # contiguous (k, C, n, n): the R-/O-net convolutions round differently on a channels-last layout
    sums = sums.permute(0, 3, 1, 2).contiguous()
    rows_per_cell = (r_hi - r_lo).to(torch.float32)[:, None, :, None]
    cols_per_cell = (c_hi - c_lo).to(torch.float32)[:, None, None, :]
    return sums.to(torch.float32) / rows_per_cell / cols_per_cell


def _crops(table: torch.Tensor, boxes: torch.Tensor, image_inds: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """facenet-pytorch's crop of each box (via its `pad`), area-resized to n×n and normalised as it does; and the
    mask of boxes whose clipped crop is not empty."""
    height, width = table.shape[1] - 1, table.shape[2] - 1
    y, ey, x, ex = (torch.as_tensor(np.asarray(v, np.int64), device=boxes.device) for v in pad(boxes, width, height))
    ok = (ey > y - 1) & (ex > x - 1)
    y, ey, x, ex, inds = y[ok], ey[ok], x[ok], ex[ok], image_inds[ok]
    parts = [
        crops_area_resized(table, inds[s : s + BOXES_PER_GATHER], y[s : s + BOXES_PER_GATHER] - 1,
                           ey[s : s + BOXES_PER_GATHER], x[s : s + BOXES_PER_GATHER] - 1, ex[s : s + BOXES_PER_GATHER], n)
        for s in range(0, len(y), BOXES_PER_GATHER)
    ]
    im_data = torch.cat(parts) if parts else torch.zeros((0, 3, n, n), device=boxes.device)
    return (im_data - 127.5) * 0.0078125, ok


def stage_one(mtcnn, imgs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """P-net over the image pyramid of the whole batch; NMS per scale and frame, then per frame; boxes refined and
    squared as facenet-pytorch does. → (boxes (k, 5) x1 y1 x2 y2 score, frame index (k,))."""
    height, width = imgs.shape[2:]
    boxes, inds, picks, offset = [], [], [], 0
    for scale in pyramid_scales(height, width, mtcnn.min_face_size, mtcnn.factor):
        im_data = (imresample(imgs, (int(height * scale + 1), int(width * scale + 1))) - 127.5) * 0.0078125
        reg, probs = mtcnn.pnet(im_data)
        boxes_scale, inds_scale = generateBoundingBox(reg, probs[:, 1], scale, mtcnn.thresholds[0])
        picks.append(batched_nms(boxes_scale[:, :4], boxes_scale[:, 4], inds_scale, 0.5) + offset)
        boxes.append(boxes_scale)
        inds.append(inds_scale)
        offset += len(boxes_scale)
    pick = torch.cat(picks)
    all_boxes, all_inds = torch.cat(boxes)[pick], torch.cat(inds)[pick]
    pick = batched_nms(all_boxes[:, :4], all_boxes[:, 4], all_inds, 0.7)
    all_boxes, all_inds = all_boxes[pick], all_inds[pick]
    w, h = all_boxes[:, 2] - all_boxes[:, 0], all_boxes[:, 3] - all_boxes[:, 1]
    refined = torch.stack(
        [all_boxes[:, 0] + all_boxes[:, 5] * w, all_boxes[:, 1] + all_boxes[:, 6] * h,
         all_boxes[:, 2] + all_boxes[:, 7] * w, all_boxes[:, 3] + all_boxes[:, 8] * h, all_boxes[:, 4]], dim=1,
    )
    return rerec(refined), all_inds


def stage_two(mtcnn, table: torch.Tensor, boxes: torch.Tensor, inds: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """R-net on 24×24 crops of all candidates at once; threshold, NMS per frame, regression, squaring."""
    im_data, ok = _crops(table, boxes, inds, 24)
    boxes, inds = boxes[ok], inds[ok]
    reg, prob = fixed_batch_process(im_data, mtcnn.rnet)
    score = prob[:, 1]
    keep = score > mtcnn.thresholds[1]
    boxes = torch.cat((boxes[keep, :4], score[keep, None]), dim=1)
    inds, reg = inds[keep], reg[keep]
    pick = batched_nms(boxes[:, :4], boxes[:, 4], inds, 0.7)
    return rerec(bbreg(boxes[pick], reg[pick])), inds[pick]


def stage_three(
    mtcnn, table: torch.Tensor, boxes: torch.Tensor, inds: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """O-net on 48×48 crops of all candidates at once: scores, landmarks, regression, "Min" NMS per frame.
    → (boxes (k, 5), landmarks (k, 5, 2), frame index (k,))."""
    im_data, ok = _crops(table, boxes, inds, 48)
    boxes, inds = boxes[ok], inds[ok]
    reg, points, prob = fixed_batch_process(im_data, mtcnn.onet)
    score = prob[:, 1]
    keep = score > mtcnn.thresholds[2]
    boxes = torch.cat((boxes[keep, :4], score[keep, None]), dim=1)
    inds, reg, points = inds[keep], reg[keep], points[keep]
    # landmarks are relative to the box before regression, in facenet-pytorch's (x - 1) pixel convention
    w, h = boxes[:, 2] - boxes[:, 0] + 1, boxes[:, 3] - boxes[:, 1] + 1
    px = w[:, None] * points[:, :5] + boxes[:, 0, None] - 1
    py = h[:, None] * points[:, 5:10] + boxes[:, 1, None] - 1
    boxes = bbreg(boxes, reg)
    pick = batched_nms_numpy(boxes[:, :4], boxes[:, 4], inds, 0.7, "Min")
    return boxes[pick], torch.stack((px, py), dim=2)[pick], inds[pick]


@torch.no_grad()  # as `MTCNN.detect`: callers need not set a grad mode
def detect(mtcnn, frames: torch.Tensor) -> list[tuple[np.ndarray, np.ndarray]]:
    """Faces in a batch of same-size frames (B, H, W, 3) uint8 on the MTCNN's device, like `mtcnn.detect`.

    → per frame (boxes (k, 5) float32 x1 y1 x2 y2 prob, landmarks (k, 5, 2) float32), in facenet-pytorch's order.
    """
    imgs = frames.permute(0, 3, 1, 2).to(next(mtcnn.pnet.parameters()).dtype)
    boxes, inds = stage_one(mtcnn, imgs)
    points = torch.zeros((0, 5, 2), device=imgs.device)
    if len(boxes):
        table = summed_area(frames)
        boxes, inds = stage_two(mtcnn, table, boxes, inds)
        if len(boxes):
            boxes, points, inds = stage_three(mtcnn, table, boxes, inds)
    boxes_np, points_np, inds_np = boxes.cpu().numpy(), points.cpu().numpy(), inds.cpu().numpy()
    return [(boxes_np[inds_np == b], points_np[inds_np == b]) for b in range(len(frames))]
