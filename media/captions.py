"""WebVTT and SRT captions -> `Words` (each word with [start, end) seconds on the clip's timeline).

Rules (docs/text.md has the long form):
- Markup (<i>, <c.colorE5E5E5>, <v Name>, {\\an8} even inside a word), SSA breaks (\\N, \\n) and hard spaces
  (\\h), speaker labels ("JOHN:", ">>", a dialogue "- ") and format characters (soft hyphen, zero-width joiners)
  are removed; entities are decoded after tags go ("&lt;b&gt;" is the text "<b>"); a zero-width space and
  control characters become spaces. Sound tags in brackets or parentheses ("[Music]", "(laughs)") and music
  notes never become words.
- Rolling captions (YouTube auto-captions repeat the previous line above the new one, and show it again in
  10 ms "transition" cues) are not doubled: a cue's leading lines equal to the previous cue's last lines are
  dropped when the cue starts within 10 ms of the previous cue's end (or overlaps it), those lines carry no
  inline word times, and either more lines follow them, the cue lasts at most 0.1 s, or the file is an
  auto-caption file (it has inline word times).
- A cue starts at a blank line or at a timing line ('-->'); a number just before a timing line is its id.
- Inline word times (`word<00:00:00.450><c> next</c>`) give the start of the word they precede; the cue's
  start is that of its first word. Words without a time share the span between the nearest known times in
  proportion to len(word) + 1 characters (the +1 stands for the following space). A word ends where the next
  word of its cue starts; the last one at the cue's end.
- Cues are ordered by start (stable), a cue's words together; every word keeps its own cue's times, so words of
  overlapping cues overlap, and only a zero-length cue gives zero-length words.
- A block without a timing line, or with an unreadable one, is skipped and listed in attrs["skipped_blocks"];
  a file with text but no readable cue is an error naming file and line.
- Times are shifted by -clip_start_s; words wholly outside [0, clip_duration_s) are dropped, the rest clipped.
- Social-IQ 2.0 trimmed files (trim_s given): see `siq2_misparsed_trim` and `_siq2_correct`.
"""

from __future__ import annotations

import codecs
import html
import logging
import re
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from extractors.base import Words
from manifests import limits

SIQ2_CLIP_S = 60.0
_TS = r"(?:(\d+):)?(\d{1,2}):(\d{1,2})[.,](\d{1,6})"  # one-digit fields too (Teams 0:0:0.0, HLS 00:0.120)
_TS_RE = re.compile(rf"^{_TS}$")
_TIMING_RE = re.compile(r"^\s*(\S+?)\s*-->\s*(\S+)(?:\s.*)?$")  # spaces around the arrow optional
_TAG_RE = re.compile(r"(<[^>]*>)")
_INLINE_TS_RE = re.compile(rf"^<{_TS}>$")
# Sound tags, music notes, and the speaker-change marks ">>" and a lone "-" anywhere in a line.
_SOUND_RE = re.compile(r"\[[^\]]*\]|\([^)]*\)|[♪♫♬]|(?<!\S)(?:>>+|-)(?!\S)")
# A speaker label in capitals at the start of a line ("JOHN:", "MALE SPEAKER:"), after optional ">>" / "-".
_SPEAKER_RE = re.compile(r"^\s*(?:>>+\s*|-\s+)?[A-Z][A-Z0-9 .'\-]*[A-Z0-9]\s*:(?=\s|$)")
_ASS_RE = re.compile(r"\{\\[^}]*\}")  # SSA/ASS override blocks ({\an8}, {\i1}): zero-width, also inside a word
_ASS_BREAK_RE = re.compile(r"\\[Nn]")  # SSA/ASS line breaks in SRT text, as pysubs2 reads them
_TRANSITION_S = 0.1  # YouTube's repeat-only cues last 10 ms
_ROLL_GAP_S = 0.01  # a rolled-up line shows again at most this long after the previous cue ends
_INDEX_RE = re.compile(r"^\s*\d+\s*$")
_log = logging.getLogger(__name__)


@dataclass
class _Word:
    text: str
    start_s: float | None  # from an inline tag; None: spread over the cue
    end_s: float | None = None  # an inline tag before a dropped sound tag ends the word before it


@dataclass
class _Cue:
    start_s: float
    end_s: float
    line_no: int
    lines: list[list[_Word]] = field(default_factory=list)  # non-empty lines only
    inline_ignored: bool = False  # its inline times did not fit the cue


def parse_timestamp(text: str, where: str, srt: bool = False) -> float:
    """'HH:MM:SS.mmm', 'MM:SS.mmm' (or with ',' as in SRT) -> seconds; fields may have one digit.

    The fraction is a decimal fraction (WebVTT: '.5' is 500 ms, as webvtt-py reads it), except a one- or
    two-digit SRT fraction, which SRT readers (pysrt, webvtt-py) take as milliseconds: ',5' is 5 ms.
    """
    m = _TS_RE.match(text.strip())
    if not m:
        raise ValueError(f"{where}: bad timestamp {text!r} (expected HH:MM:SS.mmm)")
    h, mi, s, frac = m.groups()
    if int(mi) >= 60 or int(s) >= 60:
        raise ValueError(f"{where}: bad timestamp {text!r} (minutes/seconds over 59)")
    frac_s = int(frac) / 1000 if srt and len(frac) < 3 else int(frac) / 10 ** len(frac)
    return int(h or 0) * 3600 + int(mi) * 60 + int(s) + frac_s


def _invisible(c: str) -> str:
    # Format characters (soft hyphen, joiners, BOM, direction marks) sit inside words: removing them keeps
    # "co\u00adoperate" and ZWJ emoji one word. A zero-width space and control characters (tab) separate words.
    cat = unicodedata.category(c)
    if cat == "Cf":
        return " " if c == "\u200b" else ""
    return " " if cat == "Cc" else c


def _clean_text(text: str) -> str:
    # Override blocks go before entities are decoded, so an escaped brace stays text; '\h' is a hard space.
    text = html.unescape(_ASS_RE.sub("", text).replace("\\h", " "))
    return "".join(_invisible(c) for c in text)


def _line_words(line: str) -> list[_Word]:
    """Words of one caption line, each with the inline time tag that precedes it (if any)."""
    text, marks = "", []  # marks: (position in text, time) of inline timestamps
    for piece in _TAG_RE.split(line):
        if piece.startswith("<") and piece.endswith(">"):
            m = _INLINE_TS_RE.match(piece)
            if m:
                marks.append((len(text), parse_timestamp(piece[1:-1], "inline")))
            continue  # any other tag is markup
        text += _clean_text(piece)
    drop = np.zeros(len(text) + 1, dtype=bool)
    for m in _SOUND_RE.finditer(text):
        drop[m.start() : m.end()] = True
    # A label is found with the sound tags blanked: "WOMAN ( gasping ):" is a speaker label too.
    speaker = _SPEAKER_RE.match("".join(" " if drop[i] else c for i, c in enumerate(text)))
    if speaker:
        drop[: speaker.end()] = True
    kept = "".join(" " if drop[i] else c for i, c in enumerate(text))
    words = [(m.start(), m.group()) for m in re.finditer(r"\S+", kept)]
    return _attach_times(words, marks, text, drop)


def _attach_times(
    words: list[tuple[int, str]], marks: list[tuple[int, float]], text: str, drop: np.ndarray
) -> list[_Word]:
    # A time tag belongs to the next visible character's word; one followed by a dropped sound tag (or by
    # nothing) marks where the previous word ends instead.
    out = [_Word(w, None) for _, w in words]
    starts = [pos for pos, _ in words]
    for pos, t in marks:
        q = pos
        while q < len(text) and text[q].isspace():
            q += 1
        if q < len(text) and not drop[q] and q in starts:
            out[starts.index(q)].start_s = t
        else:
            before = [i for i, p in enumerate(starts) if p < pos]
            if before:
                out[before[-1]].end_s = t
    return out


def _split_blocks(lines: list[str], header: bool) -> list[tuple[int, list[str]]]:
    """Blocks separated by empty lines, each with the 1-based number of its first line.

    A timing line ('-->') also starts a block, as in WebVTT's parser, so a missing or whitespace-only separator
    does not glue the next cue on as text; a number just before it is that cue's id. Lines of spaces inside a
    cue (YouTube) stay in it. `header`: the first block is a WebVTT header, which a timing line also ends.
    """
    blocks, cur, start = [], [], 0
    for i, line in enumerate(lines, 1):
        if line == "":
            if cur:
                blocks.append((start, cur))
            cur = []
        elif "-->" in line and cur and (len(cur) > 1 or "-->" in cur[0] or (header and start == 1)):
            head = cur[-1:] if len(cur) > 1 and _INDEX_RE.match(cur[-1]) else []
            blocks.append((start, cur[: len(cur) - len(head)]))
            cur, start = [*head, line], i - len(head)
        else:
            if not cur:
                start = i
            cur.append(line)
    if cur:
        blocks.append((start, cur))
    return blocks


def _decode(path: Path) -> str:
    """The file's text: UTF-8, or UTF-16/32 when a byte-order mark says so (as pysrt and webvtt-py read them).
    At most the run's `caption_max_bytes` are read (manifests/limits.py): a caption file is a few hundred KB."""
    raw = limits.read_bounded(path, limits.current().caption_max_bytes, "caption file", "caption_max_bytes")
    boms = [(codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"), (codecs.BOM_UTF16_LE, "utf-16"),
            (codecs.BOM_UTF16_BE, "utf-16")]
    encoding = next((enc for bom, enc in boms if raw.startswith(bom)), "utf-8-sig")
    try:
        return raw.decode(encoding)
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise ValueError(f"{path}:{line}: not {encoding.removesuffix('-sig').upper()} text ({e.reason} at byte "
                         f"{e.start}); convert the file to UTF-8") from e


def _read_cues(path: Path, text: str) -> tuple[str, list[_Cue], list[str]]:
    """The format, the cues, and the blocks skipped (each as '<file>:<line>: problem').

    As in WebVTT's parser (and webvtt-py, pysrt), a block without a timing line or with an unreadable one is
    skipped, not fatal, but it is reported; a file with text in which no cue can be read is an error. One
    exception keeps text: a block right after a cue with no text is that cue's text (a YouTube file whose
    line of one space after the timing line was stripped to an empty line).
    """
    most = limits.current().caption_max_cues
    if text.count("-->") > most:  # counted before any cue is built: parsing 10^6 cues took minutes and a GB
        raise limits.InputTooLarge(f"{path}: over {most:,} cues ({text.count('-->'):,} timing lines; "
                                   "limits.caption_max_cues in the run config)")
    lines = re.split(r"\r\n|\r|\n", text)  # WebVTT's line ends: CRLF, LF or a lone CR (old Mac files)
    is_vtt = lines[0].startswith("WEBVTT")
    if path.suffix.lower() == ".vtt" and not is_vtt and text.strip():
        raise ValueError(f"{path}:1: a WebVTT file must start with 'WEBVTT', got {lines[0][:40]!r}")
    cues, skipped, textless = [], [], None
    for first, block in _split_blocks(lines, header=is_vtt):
        if is_vtt and (first == 1 or re.match(r"^(NOTE|STYLE|REGION)(\s|$)", block[0])):
            continue
        lead = next((j for j, ln in enumerate(block) if ln.strip()), None)
        if lead is None:
            continue  # lines of spaces between cues
        first, block = first + lead, block[lead:]
        k = next((j for j, ln in enumerate(block[:2]) if "-->" in ln), None)
        owner, textless = textless, None
        try:
            if k is None and owner is not None:
                owner.lines = _body(path, first, block)
            elif k is None:
                raise ValueError(f"{path}:{first}: expected a cue timing line 'start --> end', got {block[0][:60]!r}")
            else:
                cues.append(_cue(path, first + k, block[k], block[k + 1 :], srt=not is_vtt))
                textless = cues[-1] if len(block) == k + 1 else None
        except ValueError as e:
            skipped.append(f"{e}; block skipped")
    if skipped and not cues:
        raise ValueError(skipped[0].removesuffix("; block skipped"))
    return ("vtt" if is_vtt else "srt"), cues, skipped


def _body(path: Path, line_no: int, body: list[str]) -> list[list[_Word]]:
    """The words of a cue's text lines (SSA '\\N' breaks a line); empty lines left out."""
    try:
        return [ws for ln in body for part in _ASS_BREAK_RE.split(ln) if (ws := _line_words(part))]
    except ValueError as e:
        raise ValueError(f"{path}:{line_no}: {e}") from e


def _cue(path: Path, line_no: int, timing: str, body: list[str], srt: bool) -> _Cue:
    m = _TIMING_RE.match(timing)
    where = f"{path}:{line_no}"
    if not m:
        raise ValueError(f"{where}: bad cue timing line {timing!r}")
    start, end = parse_timestamp(m.group(1), where, srt), parse_timestamp(m.group(2), where, srt)
    if end < start:
        raise ValueError(f"{where}: cue ends before it starts ({m.group(1)} --> {m.group(2)})")
    return _Cue(start, end, line_no, _body(path, line_no, body))


def _shown(lines: list[list[_Word]]) -> list[str]:
    """A cue's lines as shown, for comparing a cue's lines with another's."""
    return [" ".join(w.text for w in ln) for ln in lines]


def _drop_rolling_repeats(cues: list[_Cue], auto: bool) -> None:
    """Remove leading lines that repeat the previous cue's last lines (rolling captions), in place.

    A repeat is rolling only when the cue starts at most 10 ms after the previous one ends (or overlaps it)
    and the repeated lines carry no inline times: YouTube re-shows a line at once and in plain text, while
    the same words said again after a pause come later, with their own tags. In auto-captions (`auto`: the
    file has inline word times) such a repeat of a whole cue is rolling too. Elsewhere a whole cue that
    repeats the previous one is kept unless it is a short transition cue: "No." / "No." may be speech.
    """
    prev: list[str] = []
    prev_end = -np.inf
    for cue in cues:
        shown = _shown(cue.lines)
        if not shown:
            continue
        plain = [all(w.start_s is None and w.end_s is None for w in ln) for ln in cue.lines]
        close = cue.start_s <= prev_end + _ROLL_GAP_S + 1e-6  # + rounding of millisecond times
        whole_ok = auto or cue.end_s - cue.start_s <= _TRANSITION_S
        for j in range(min(len(shown), len(prev)), 0, -1):
            if close and all(plain[:j]) and shown[:j] == prev[-j:] and (j < len(shown) or whole_ok):
                cue.lines = cue.lines[j:]
                break
        prev, prev_end = shown, cue.end_s


def _cue_times(cue: _Cue) -> list[tuple[str, float, float]]:
    """(word, start, end) for one cue: inline times where known, else spread by characters."""
    words = [w for ln in cue.lines for w in ln]
    if not words:
        return []
    known = [w.start_s for w in words]
    if any(t is not None and not cue.start_s - 0.5 <= t <= cue.end_s + 0.5 for t in known):
        known = [None] * len(words)  # inline times that do not fit their cue are not trusted
        cue.inline_ignored = True
    known[0] = cue.start_s if known[0] is None else known[0]
    last = -np.inf
    for i, t in enumerate(known):  # a time not after the previous one, or at the cue's end, gives no span:
        if t is None:  # such words share the span around them by characters instead (YouTube tags the last
            continue  # word of a cue at the cue's very end)
        if i and (t <= last or t >= cue.end_s > cue.start_s):
            known[i] = None
        else:
            last = t
    anchors = [i for i, t in enumerate(known) if t is not None] + [len(words)]
    bounds = [*known, cue.end_s]
    starts = np.empty(len(words))
    for a, b in zip(anchors[:-1], anchors[1:], strict=True):
        weights = np.array([len(w.text) + 1 for w in words[a:b]], dtype=float)
        cum = np.concatenate([[0.0], np.cumsum(weights)[:-1]]) / weights.sum()
        starts[a:b] = bounds[a] + (bounds[b] - bounds[a]) * cum
    starts = np.clip(starts, cue.start_s, cue.end_s)
    ends = np.append(starts[1:], cue.end_s)
    if not cue.inline_ignored:
        hints = np.array([np.inf if w.end_s is None else w.end_s for w in words])
        ends = np.maximum(np.minimum(ends, hints), starts)
    return [(w.text, float(s), float(e)) for w, s, e in zip(words, starts, ends, strict=True)]


def _clip(words: list[str], iv: np.ndarray, duration_s: float | None) -> tuple[list[str], np.ndarray]:
    end = np.inf if duration_s is None else duration_s
    zero = iv[:, 0] == iv[:, 1]
    keep = ((iv[:, 0] < end) & (iv[:, 1] > 0)) | (zero & (iv[:, 0] >= 0) & (iv[:, 0] < end))
    return [w for w, k in zip(words, keep, strict=True) if k], np.clip(iv[keep], 0.0, end)


def siq2_misparsed_trim(trim_s: float) -> float:
    """The trim the Social-IQ 2.0 download script subtracted from cue times.

    It read the fraction's digits as milliseconds (`int(str(trim).split('.')[1]) * 1000` microseconds), so
    12.5 became 12.005 and 12.25 became 12.025 (errors up to 0.891 s); three-digit fractions came out right.
    Trims it could not parse (no '.', over three digits) made it skip the clip, so they are returned as is.
    """
    whole, _, frac = str(float(trim_s)).partition(".")
    if not frac.isdigit() or int(frac) > 999:
        return float(trim_s)
    return int(whole) + int(frac) * 1000 / 1e6


def _siq2_correct(cues: list[_Cue], trim_s: float) -> dict:
    """Put a Social-IQ 2.0 trimmed file's cues on the clip timeline, in place; returns what was done.

    The download script (webvtt-py 0.4.6, as its requirements pin) wrote cue = source - misparsed trim, and
    its reader had already stripped every inline tag, so the file holds cue times only: source time is
    cue + misparsed trim, clip time is that - trim_s. This is exact (the file stores milliseconds, and so
    does the misparsed trim) and needs nothing from the file itself. Inline tags, which the script never
    leaves, would share the cues' time base and are shifted with them.

    The script kept the cues wholly inside [misparsed trim, + 60 s]. When the cue that straddled the window's
    start was cut, YouTube's 10 ms repeat of its last line (a cue of <= 0.1 s that the next cue, starting at
    its end, shows again above new text) is left first, alone: those words were said in the cut cue, which
    ended where the repeat starts and began before the window. They get that known part of the cut cue,
    [window start, repeat start], instead of 10 ms after the cue they belong to.
    """
    bad = siq2_misparsed_trim(trim_s)
    shift = bad - trim_s
    for c in cues:
        c.start_s += shift
        c.end_s += shift
        for w in (w for ln in c.lines for w in ln):
            w.start_s = None if w.start_s is None else w.start_s + shift
            w.end_s = None if w.end_s is None else w.end_s + shift
    info = {"trim_s": trim_s, "misparsed_trim_s": bad, "cue_shift_s": shift}
    worded = [c for c in cues if c.lines]
    if len(worded) > 1 and _orphan_repeat(*worded[:2]):
        first = worded[0]
        first.start_s, first.end_s = min(shift, first.start_s), first.start_s
        info["cut_cue_repeat"] = {"line": first.line_no, "span_s": [first.start_s, first.end_s]}
    return info


def _orphan_repeat(c0: _Cue, c1: _Cue) -> bool:
    """c0 is a YouTube transition cue: at most 0.1 s, plain text, shown again as c1's first line right after."""
    shown = _shown(c0.lines)
    plain = all(w.start_s is None for ln in c0.lines for w in ln)
    again = _shown(c1.lines[: len(shown)]) == shown and len(c1.lines) > len(shown)
    return plain and again and c0.end_s - c0.start_s <= _TRANSITION_S and abs(c1.start_s - c0.end_s) <= _ROLL_GAP_S


def parse_captions(
    path: Path,
    clip_start_s: float = 0.0,
    clip_duration_s: float | None = None,
    trim_s: float | None = None,
) -> Words:
    """Words of a WebVTT or SRT file on the clip's timeline (0 = clip start).

    clip_start_s: where the clip starts on the file's timeline (subtracted from every time).
    clip_duration_s: words wholly after it are dropped; None keeps all (60 s when trim_s is given).
    trim_s: the clip's start in its source video from Social-IQ 2.0's trims.json; turns on the correction of
      that dataset's trimmed files (see `_siq2_correct`), recorded in `Words.attrs["corrections"]`.
    Raises ValueError naming the file and line for malformed input, and InputTooLarge (a ValueError) for a file
    over the run's caption limits (manifests/limits.py): that bounds the words a transcript holds.
    """
    path = Path(path)
    fmt, cues, skipped = _read_cues(path, _decode(path))
    has_inline = any(w.start_s is not None for c in cues for ln in c.lines for w in ln)
    attrs: dict = {"format": fmt, "inline_word_times": has_inline}
    if skipped:
        attrs["skipped_blocks"] = [m.replace(str(path), path.name, 1) for m in skipped]  # stores stay path-free
        _log.warning("%d caption block(s) skipped: %s", len(skipped), "; ".join(skipped[:3]))
    if trim_s is not None:
        attrs["corrections"] = {"siq2_trim": _siq2_correct(cues, float(trim_s))}
        clip_duration_s = SIQ2_CLIP_S if clip_duration_s is None else clip_duration_s
    _drop_rolling_repeats(cues, auto=has_inline)
    cues.sort(key=lambda c: c.start_s)  # stable: file order among equal starts
    triples = [t for c in cues for t in _cue_times(c)]
    words = [w for w, _, _ in triples]
    if any(c.inline_ignored for c in cues):
        attrs["inline_times_ignored_cues"] = sum(c.inline_ignored for c in cues)
    iv = np.array([[s, e] for _, s, e in triples], dtype=np.float64).reshape(-1, 2) - clip_start_s
    words, iv = _clip(words, iv, clip_duration_s)
    return Words(tuple(words), iv, attrs)
