"""Social-IQ 2.0 trimmed transcripts: replay the dataset's own download script on a real YouTube file.

`download_all.py` (abwilf/Social-IQ-2.0-Challenge, ../shared/realdata/siq2/) trims each video's YouTube
auto-captions to the 60 s clip with webvtt-py 0.4.6 (its requirements.txt pin). `replay_download_all` below
redoes what that loop does, written from the script and from webvtt-py 0.4.6's source (not copied):
- 0.4.6 reads blocks split at empty lines (leading space-only lines of a block skipped, the header block
  skipped), a block's first or second line the timing, the rest its text lines;
- `caption.text` strips every `<...>` tag (`Caption.CUE_TEXT_TAGS`), so the script's literal
  `caption.text.replace("<.*?>", "")` assigns tag-free text: the saved file has no inline word times;
- the trim's fraction digits are read as milliseconds (`int(str(trim).split(".")[1]) * 1000` microseconds);
- cues wholly inside [misparsed trim, + 60 s] are kept, shifted by the misparsed trim, written with 0.4.6's
  writer (`WEBVTT`, then per cue an empty line, the id if any, `start --> end`, the text lines).
Checked once against the real webvtt-py 0.4.6 running the script's loop verbatim: byte-identical output for
the trims below (see /work/notes/i11-captions.md).

The source is lattifai-python's DoesFastChargingHurttheBatteryRaw.vtt (MIT, tests/data/captions), a real
YouTube auto-caption file with inline word times, stored with trailing spaces stripped: its empty line after
each timing line is put back to YouTube's line of one space, as the download script got it.
"""

from __future__ import annotations

import datetime
import io
import re
from pathlib import Path

import pytest

from media.captions import parse_captions, siq2_misparsed_trim

SOURCE = Path(__file__).parents[1] / "data" / "captions" / "lattifai__lattifai-python__DoesFastChargingHurttheBatteryRaw.vtt"
_TIMING_046 = re.compile(r"\s*((?:\d+:)?\d{2}:\d{2}.\d{3})\s*-->\s*((?:\d+:)?\d{2}:\d{2}.\d{3})")


def youtube_original(text: str) -> str:
    """YouTube's form of a stripped file: ' ' on an empty line between a timing line and text."""
    lines = text.split("\n")
    for i in range(1, len(lines) - 1):
        if lines[i] == "" and "-->" in lines[i - 1] and lines[i + 1].strip() and "-->" not in lines[i + 1]:
            lines[i] = " "
    return "\n".join(lines)


def _ms(ts: str) -> int:
    *hm, sec = ts.split(":")
    h, m = (int(hm[0]), int(hm[1])) if len(hm) == 2 else (0, int(hm[0]))
    return (h * 3600 + m * 60) * 1000 + round(float(sec) * 1000)


def _fmt(ms: int) -> str:
    return f"{ms // 3600000:02d}:{ms // 60000 % 60:02d}:{ms // 1000 % 60:02d}.{ms % 1000:03d}"


def _script_trim_ms(trim: float) -> int:
    """The script's own datetime arithmetic for the trim (microseconds = fraction digits * 1000)."""
    sec, frac = int(str(trim).split(".")[0]), int(str(trim).split(".")[1]) * 1000
    t = datetime.time(minute=sec // 60, second=sec % 60, microsecond=frac)
    return (t.minute * 60 + t.second) * 1000 + t.microsecond // 1000


def replay_download_all(source: str, trim: float) -> str:
    blocks, cur = [], []
    for line in source.split("\n"):
        if line == "":
            blocks, cur = blocks + [cur] if cur else blocks, []
        elif cur or line.strip():
            cur.append(line)
    blocks += [cur] if cur else []
    bad_ms, out = _script_trim_ms(trim), ["WEBVTT"]
    for block in blocks[1:]:
        k = 0 if "-->" in block[0] else 1
        start, end = (_ms(t) for t in _TIMING_046.match(block[k]).groups())
        text = re.sub("<.*?>", "", "\n".join(block[k + 1 :])).splitlines()
        if start >= bad_ms and end <= bad_ms + 60_000:
            out += ["", *block[:k], f"{_fmt(start - bad_ms)} --> {_fmt(end - bad_ms)}", *text]
    return "\n".join(out)


def source_cues(path: Path) -> list[tuple[float, float, list[str]]]:
    """(start, end, words) of each cue that brings new speech, read by webvtt-py: YouTube shows the new line
    last, under the previous one; its 10 ms cues only repeat."""
    import webvtt

    caps = webvtt.from_buffer(io.StringIO(youtube_original(path.read_text())))
    cues = [(c.start_time.in_milliseconds() / 1000, c.end_time.in_milliseconds() / 1000, c.text) for c in caps]
    return [(s, e, [ln for ln in t.split("\n") if ln.strip()][-1].split()) for s, e, t in cues if e - s > 0.1]


@pytest.mark.parametrize("trim", [0.7, 1.25, 2.5, 3.98, 4.125])
def test_replayed_siq2_transcript_gets_the_source_times(tmp_path: Path, trim: float) -> None:
    trimmed = replay_download_all(youtube_original(SOURCE.read_text()), trim)
    assert "<" not in trimmed  # the pinned webvtt-py strips the inline word times
    path = tmp_path / "clip.vtt"
    path.write_text(trimmed)
    w = parse_captions(path, trim_s=trim)

    bad = siq2_misparsed_trim(trim)
    truth = [(word, s - trim, e - trim) for s, e, ws in source_cues(SOURCE) for word in ws]
    words = [t[0] for t in truth]
    i0 = next(i for i in range(len(words)) if words[i : i + len(w.words)] == list(w.words))  # a contiguous run
    mine = truth[i0 : i0 + len(w.words)]
    for (s, e), (word, cs, ce) in zip(w.intervals, mine, strict=True):
        assert max(cs, 0) - 1e-6 <= s < e <= min(ce, 60) + 1e-6, (word, s, e, cs, ce)  # in its own source cue
    # Every cue the script kept that lies in the clip is there, and starts and ends exactly on the source's times.
    kept = [(s, e, ws) for s, e, ws in source_cues(SOURCE) if s >= bad - 1e-9 and e <= bad + 60 + 1e-9 and s >= trim]
    k = i0
    for s, e, ws in kept:
        k = next(j for j in range(k, len(truth)) if truth[j][1] == s - trim)
        j = k - i0
        assert list(w.words[j : j + len(ws)]) == ws
        assert w.intervals[j, 0] == pytest.approx(s - trim, abs=1e-6)
        assert w.intervals[j + len(ws) - 1, 1] == pytest.approx(min(e - trim, 60), abs=1e-6)
    assert len(kept) >= 10
