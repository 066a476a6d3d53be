"""Conformance of `parse_captions` with real caption files, judged by two subtitle libraries (test-only).

The corpus: ../shared/realdata/captions (43 files from subtitle-library test suites, YouTube, Teams, HLS;
MANIFEST.tsv gives repo, path and commit of each), and the permissively licensed ones copied into
tests/data/captions (tests/data/captions/PROVENANCE.tsv) so the core runs without ../shared. pysrt's own
files are GPL and stay out of tests/data.

For each file that webvtt-py (.vtt, .srt) or pysrt (.srt) reads, the words must be the library's cue text
after the documented rules of docs/text.md, applied here by independent code:
- markup: the library strips tags; entities are decoded (`&lt;b&gt;` is the text `<b>`), SSA override blocks
  `{\\...}` vanish, `\\N`/`\\n` break lines and `\\h` is a space, format characters vanish;
- speaker labels (`JOHN:`, `>>`, a dialogue `- `), sound tags (`[...]`, `(...)`) and music notes are no words;
- rolling captions: a cue's leading lines equal to the previous cue's last lines go when the cue starts at most
  10 ms after that cue ends and either more lines follow, the cue lasts at most 0.1 s, or the file is an
  auto-caption file (inline word times);
- order: cues by start time (stable), a cue's words together;
- an empty line right after a timing line and before the cue's text is YouTube's line of one space with the
  space stripped: the libraries are given the file with the space put back (`restore_youtube_space`).
Each word must lie within its own cue's times, and only a zero-length cue may give a zero-length word.
Files that no library reads into a cue fail with `<file>:<line>:`.
"""

from __future__ import annotations

import html
import re
import tempfile
import unicodedata
import warnings
from dataclasses import dataclass
from difflib import SequenceMatcher
from pathlib import Path

import numpy as np
import pytest

from media.captions import parse_captions
from testing.realdata import realdata_dir

DATA = Path(__file__).parents[1] / "data" / "captions"
ROLL_GAP_S = 0.01
TRANSITION_S = 0.1
TOL_S = 1e-6

# Files with text that no reference library reads into a single cue: (file, line the error must name).
MALFORMED = {
    "glut23__webvtt-py__invalid.vtt": 1,  # no WEBVTT header
    "glut23__webvtt-py__invalid_format1.srt": 1,  # a lone "1"
    "byroot__pysrt__invalid.srt": 2,  # "00:00:01 --> 00:00:10": no milliseconds
    "byroot__pysrt__windows-1252.srt": 7,  # not UTF-8 (first bad byte on line 7: "É")
    "cdown__srt__gb2312.srt": 3,
}


def corpus() -> dict[str, Path]:
    """Every corpus file by name: tests/data/captions always, ../shared/realdata/captions where present."""
    files = {p.name: p for p in DATA.glob("*.*") if p.suffix in (".vtt", ".srt")}
    real = realdata_dir()
    if real is not None:
        files |= {p.name: p for p in (real / "captions").glob("*.*") if p.suffix in (".vtt", ".srt")}
    return dict(sorted(files.items()))


@dataclass
class RefCue:
    start_s: float
    end_s: float
    lines: list[str]


def read_webvtt(path: Path) -> list[RefCue] | None:
    import webvtt

    try:
        caps = webvtt.read(str(path)) if path.suffix == ".vtt" else webvtt.from_srt(str(path))
    except Exception:  # noqa: BLE001 - any refusal means "this library does not read the file"
        return None
    ms = [(c.start_time.in_milliseconds(), c.end_time.in_milliseconds()) for c in caps]
    return [RefCue(s / 1000, e / 1000, c.text.split("\n")) for (s, e), c in zip(ms, caps, strict=True)]


def read_pysrt(path: Path) -> list[RefCue] | None:
    if path.suffix != ".srt":
        return None
    import pysrt

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            items = pysrt.open(str(path))
    except Exception:  # noqa: BLE001
        return None
    return [RefCue(i.start.ordinal / 1000, i.end.ordinal / 1000, i.text_without_tags.split("\n")) for i in items]


READERS = {"webvtt-py": read_webvtt, "pysrt": read_pysrt}

_SOUND = re.compile(r"\[[^\]]*\]|\([^)]*\)|[♪♫♬]")
_SPEAKER = re.compile(r"^\s*(?:>>+\s*|-\s+)?[A-Z][A-Z0-9 .'\-]*[A-Z0-9]\s*:(?=\s|$)")


def ref_line_words(line: str) -> list[str]:
    text = re.sub(r"\{\\[^}]*\}", "", html.unescape(line)).replace("\\h", " ")
    text = "".join(" " if c == "\u200b" or unicodedata.category(c) == "Cc" else c for c in text)
    text = "".join(c for c in text if unicodedata.category(c) != "Cf")
    text = _SOUND.sub(" ", text)
    text = _SPEAKER.sub(" ", text)
    return [w for w in text.split() if not re.fullmatch(r">>+|-", w)]


def ref_words(cues: list[RefCue], auto: bool) -> list[tuple[str, RefCue]]:
    """The words the documented rules make of a library's cues, each with its cue."""
    out, prev, prev_end = [], [], -np.inf
    for cue in sorted(cues, key=lambda c: c.start_s):  # stable
        lines = [ws for ln in cue.lines for part in re.split(r"\\[Nn]", ln) if (ws := ref_line_words(part))]
        shown = [" ".join(ws) for ws in lines]
        if not shown:
            continue
        close = cue.start_s <= prev_end + ROLL_GAP_S + TOL_S
        for j in range(min(len(shown), len(prev)), 0, -1):
            whole_ok = j < len(shown) or auto or cue.end_s - cue.start_s <= TRANSITION_S
            if close and whole_ok and shown[:j] == prev[-j:]:
                lines = lines[j:]
                break
        out += [(w, cue) for ws in lines for w in ws]
        prev, prev_end = shown, cue.end_s
    return out


@dataclass
class Row:
    file: str
    library: str
    ref_words: int
    our_words: int
    mismatched: int  # reference words not matched in order, plus our words not in the reference
    outside_cue: int
    zero_length: int
    error: str = ""


def restore_youtube_space(path: Path, tmp: Path) -> Path:
    """The file with ' ' on each empty line that sits between a timing line and a line of text."""
    lines = path.read_bytes().split(b"\n")
    fix = [i for i in range(1, len(lines) - 2) if lines[i].strip() == b"" and b"-->" in lines[i - 1]
           and lines[i + 1].strip() and b"-->" not in lines[i + 1] + lines[i + 2]]
    if not fix:
        return path
    for i in fix:
        lines[i] = b" "
    out = tmp / path.name
    out.write_bytes(b"\n".join(lines))
    return out


def compare(path: Path, library: str) -> Row | None:
    with tempfile.TemporaryDirectory() as tmp:
        cues = READERS[library](restore_youtube_space(path, Path(tmp)))
    if cues is None or (not cues and path.name in MALFORMED):
        return None
    auto = bool(re.search(r"<\d+:\d+[.:]", path.read_text("utf-8", errors="replace")))
    ref = ref_words(cues, auto)
    try:
        w = parse_captions(path)
    except ValueError as e:
        return Row(path.name, library, len(ref), 0, len(ref), 0, 0, str(e).replace(str(path), "")[:70])
    ours = list(w.words)
    sm = SequenceMatcher(a=[x for x, _ in ref], b=ours, autojunk=False)
    matched = sum(b.size for b in sm.get_matching_blocks())
    outside = zero = 0
    for i, j in ((b.a + k, b.b + k) for b in sm.get_matching_blocks() for k in range(b.size)):
        (s, e), cue = w.intervals[j], ref[i][1]
        outside += not (cue.start_s - TOL_S <= s <= e <= cue.end_s + TOL_S)
        zero += e - s <= 0 < cue.end_s - cue.start_s
    return Row(path.name, library, len(ref), len(ours), len(ref) + len(ours) - 2 * matched, outside, zero)


def table() -> list[Row]:
    return [r for p in corpus().values() for lib in READERS if (r := compare(p, lib)) is not None]


@pytest.mark.parametrize("name", list(corpus()))
def test_real_file_gives_the_reference_words_within_their_cues(name: str) -> None:
    rows = [r for lib in READERS if (r := compare(corpus()[name], lib)) is not None]
    if name in MALFORMED:
        assert not rows
        return
    if not rows:  # no library reads a file without text (webvtt-py refuses an empty one): no words, no error
        assert not corpus()[name].read_bytes().strip(), f"{name}: no library reads it; add it to MALFORMED"
        assert parse_captions(corpus()[name]).words == ()
        return
    for r in rows:
        assert (r.error, r.mismatched, r.outside_cue, r.zero_length) == ("", 0, 0, 0), r


@pytest.mark.parametrize("name", sorted(n for n in MALFORMED if n in corpus()))
def test_malformed_real_file_fails_naming_file_and_line(name: str) -> None:
    with pytest.raises(ValueError, match=rf"{re.escape(name)}:{MALFORMED[name]}: "):
        parse_captions(corpus()[name])


def test_corpus_has_the_copied_files() -> None:
    names = {p.name for p in DATA.glob("*.*") if p.suffix in (".vtt", ".srt")}
    assert len(names) >= 30 and not any(n.startswith("byroot__pysrt__") for n in names)  # pysrt's are GPL


if __name__ == "__main__":  # the conformance table: PYTHONPATH=.:tests python tests/media/test_caption_conformance.py
    rows = table()
    print(f"{'file':58} {'library':9} {'ref':>6} {'ours':>6} {'mism':>5} {'out':>4} {'zero':>4}  error")
    for r in rows:
        print(f"{r.file:58} {r.library:9} {r.ref_words:6} {r.our_words:6} {r.mismatched:5} {r.outside_cue:4} "
              f"{r.zero_length:4}  {r.error}")
    bad = [r for r in rows if r.error or r.mismatched or r.outside_cue or r.zero_length]
    print(f"\n{len({r.file for r in rows})} files read by a library, {len(rows)} (file, library) pairs, "
          f"{sum(r.ref_words for r in rows)} reference words, {sum(r.mismatched for r in rows)} mismatched words, "
          f"{sum(r.outside_cue for r in rows)} words outside their cue, {sum(r.zero_length for r in rows)} "
          f"zero-length words from cues of positive length, {sum(bool(r.error) for r in rows)} pairs rejected; "
          f"{len(bad)} pairs not conforming")
