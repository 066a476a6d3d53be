"""Caption parsing: WebVTT / SRT -> words with clip-timeline intervals.

Every fixture is written inline by the test that uses it; expected times are worked out by hand from the
rules in media/captions.py (inline tags, else len(word) + 1 characters per word).
"""

from __future__ import annotations

import datetime
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from media.captions import parse_captions, siq2_misparsed_trim

YOUTUBE_VTT = """WEBVTT
Kind: captions
Language: en

00:00:00.030 --> 00:00:02.060 align:start position:0%
␠
hello<00:00:00.450><c> everyone</c><00:00:00.840><c> and</c>

00:00:02.060 --> 00:00:02.070 align:start position:0%
hello everyone and
␠

00:00:02.070 --> 00:00:04.950 align:start position:0%
hello everyone and
welcome<00:00:02.550><c> to</c><00:00:03.000><c> [Music]</c><00:00:03.900><c> the</c><00:00:04.200><c> show</c>

00:00:04.950 --> 00:00:04.960 align:start position:0%
welcome to the show
␠

00:00:04.960 --> 00:00:06.000 align:start position:0%
welcome to the show
␠
""".replace("␠", " ")  # YouTube cues carry a line holding one space

# Overlapping cues (2 starts before 1 ends), markup, a speaker label, sound tags, an empty cue, a NOTE.
MANUAL_VTT = """WEBVTT

NOTE made by hand

1
00:00:01.000 --> 00:00:03.000
<v Roger>JOHN: I <i>don't</i> know

2
00:00:02.000 --> 00:00:04.000 line:0
>> (laughs) [Applause] ♪ it's 3.5

3
00:00:05.000 --> 00:00:06.000

4
00:00:06.000 --> 00:00:07.000
- Well-known &amp; café
"""

MANUAL_SRT = """1
00:00:01,000 --> 00:00:03,000
<i>JOHN: I don't know</i>

2
00:00:02,000 --> 00:00:04,000
>> (laughs) [Applause] ♪ it's 3.5

3
00:00:05,000 --> 00:00:06,000


4
00:00:06,000 --> 00:00:07,000
{\\an8}- Well-known &amp; café
"""


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def _spread(t0: float, t1: float, words: list[str]) -> list[list[float]]:
    w = np.array([len(x) + 1 for x in words], float)
    starts = t0 + (t1 - t0) * np.concatenate([[0], np.cumsum(w)[:-1]]) / w.sum()
    return np.stack([starts, np.append(starts[1:], t1)], 1).tolist()


def _assert_monotone(iv: np.ndarray) -> None:
    assert np.all(iv[:, 1] >= iv[:, 0])


def test_youtube_rolling_captions_use_inline_times_and_are_not_doubled(tmp_path: Path) -> None:
    w = parse_captions(_write(tmp_path, "yt.vtt", YOUTUBE_VTT))
    assert w.words == ("hello", "everyone", "and", "welcome", "to", "the", "show")
    expected = [[0.03, 0.45], [0.45, 0.84], [0.84, 2.06], [2.07, 2.55], [2.55, 3.0], [3.9, 4.2], [4.2, 4.95]]
    np.testing.assert_allclose(w.intervals, expected, atol=1e-9)  # "to" ends where [Music] starts
    assert w.attrs["inline_word_times"] is True


def _manual_expected() -> tuple[list[str], np.ndarray]:
    cue1 = ["I", "don't", "know"]
    cue2 = ["it's", "3.5"]
    cue4 = ["Well-known", "&", "café"]
    iv = _spread(1, 3, cue1) + _spread(2, 4, cue2) + _spread(6, 7, cue4)
    # Cue 2 overlaps cue 1: its words keep their own cue's times (intervals may overlap).
    return cue1 + cue2 + cue4, np.array(iv)


@pytest.mark.parametrize(("name", "text"), [("m.vtt", MANUAL_VTT), ("m.srt", MANUAL_SRT)])
def test_markup_speakers_sound_tags_overlap_and_empty_cue(tmp_path: Path, name: str, text: str) -> None:
    w = parse_captions(_write(tmp_path, name, text))
    words, iv = _manual_expected()
    assert list(w.words) == words
    np.testing.assert_allclose(w.intervals, iv, atol=1e-9)
    _assert_monotone(w.intervals)
    assert w.attrs["format"] == name[-3:]


def test_srt_rolling_duplicates(tmp_path: Path) -> None:
    srt = "1\n00:00:00,000 --> 00:00:02,000\nso what do\n\n2\n00:00:02,000 --> 00:00:02,010\nso what do\n\n" \
          "3\n00:00:02,010 --> 00:00:04,000\nso what do\nyou think\n\n" \
          "4\n00:00:04,000 --> 00:00:05,000\nNo.\n\n5\n00:00:05,000 --> 00:00:06,000\nNo.\n"
    w = parse_captions(_write(tmp_path, "r.srt", srt))
    # The 10 ms repeat and the repeated first line go; two full "No." cues are speech and stay.
    assert w.words == ("so", "what", "do", "you", "think", "No.", "No.")
    np.testing.assert_allclose(w.intervals[3:5], _spread(2.01, 4.0, ["you", "think"]), atol=1e-9)


# A repeat after a pause is new speech: its own inline times, or (one word, so no tag) a plain line that does
# not follow the previous cue within 10 ms. The 10 ms repeats and the rolled-up line still go.
REPEATED_SPEECH_VTT = """WEBVTT

00:00:01.000 --> 00:00:02.990 align:start position:0%
␠
thank<00:00:01.500><c> you</c>

00:00:02.990 --> 00:00:03.000 align:start position:0%
thank you
␠

00:00:05.000 --> 00:00:06.990 align:start position:0%
␠
thank<00:00:05.500><c> you</c>

00:00:06.990 --> 00:00:07.000 align:start position:0%
thank you
␠

00:00:07.000 --> 00:00:08.990 align:start position:0%
thank you
so<00:00:07.400><c> much</c>

00:00:08.990 --> 00:00:09.000 align:start position:0%
so much
␠

00:00:12.000 --> 00:00:13.000 align:start position:0%
␠
so much
""".replace("␠", " ")


def test_repeated_speech_after_a_pause_is_not_a_rolling_repeat(tmp_path: Path) -> None:
    w = parse_captions(_write(tmp_path, "rep.vtt", REPEATED_SPEECH_VTT))
    assert w.words == ("thank", "you", "thank", "you", "so", "much", "so", "much")
    expected = [[1.0, 1.5], [1.5, 2.99], [5.0, 5.5], [5.5, 6.99], [7.0, 7.4], [7.4, 8.99], *_spread(12, 13, ["so", "much"])]
    np.testing.assert_allclose(w.intervals, expected, atol=1e-9)


def test_srt_repeat_after_a_gap_is_kept(tmp_path: Path) -> None:
    srt = "1\n00:00:00,000 --> 00:00:02,000\nso what do\n\n2\n00:00:03,000 --> 00:00:05,000\nso what do\nyou think\n"
    w = parse_captions(_write(tmp_path, "g.srt", srt))
    assert w.words == ("so", "what", "do", "so", "what", "do", "you", "think")


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("ws.srt", "1\n00:00:01,000 --> 00:00:02,000\nhello there\n \n2\n00:00:03,000 --> 00:00:04,000\nworld\n"),
        ("glued.srt", "1\n00:00:01,000 --> 00:00:02,000\nhello there\n2\n00:00:03,000 --> 00:00:04,000\nworld\n"),
        ("glued.vtt", "WEBVTT\n\n00:00:01.000 --> 00:00:02.000\nhello there\n00:00:03.000 --> 00:00:04.000\nworld\n"),
        ("ws.vtt", "WEBVTT\n\n1\n00:00:01.000 --> 00:00:02.000\nhello there\n\t\n2\n00:00:03.000 --> 00:00:04.000\nworld\n"),
    ],    ids=["srt-space-line", "srt-no-blank", "vtt-no-blank", "vtt-tab-line-ids"],
)
def test_a_timing_line_starts_a_cue_without_a_blank_line(tmp_path: Path, name: str, text: str) -> None:
    w = parse_captions(_write(tmp_path, name, text))
    assert w.words == ("hello", "there", "world")
    np.testing.assert_allclose(w.intervals, [*_spread(1, 2, ["hello", "there"]), [3, 4]], atol=1e-9)


def test_format_characters_are_removed_and_separators_split(tmp_path: Path) -> None:
    # Soft hyphen, ZWJ, word joiner, BOM, LRM vanish inside a word; a zero-width space and a tab separate words.
    line = "co\u00adoperate \U0001f469\u200d\U0001f4bb no\u2060w\ufeff zero\u200bwidth\u200e tab\there"
    w = parse_captions(_write(tmp_path, "cf.vtt", f"WEBVTT\n\n00:00:01.000 --> 00:00:02.000\n{line}\n"))
    assert w.words == ("cooperate", "\U0001f469\U0001f4bb", "now", "zero", "width", "tab", "here")


def test_clip_window_shifts_drops_and_clips(tmp_path: Path) -> None:
    w = parse_captions(_write(tmp_path, "m.vtt", MANUAL_VTT), clip_start_s=2.0, clip_duration_s=3.0)
    words, iv = _manual_expected()
    iv = iv - 2.0
    keep = (iv[:, 0] < 3.0) & (iv[:, 1] > 0)
    assert list(w.words) == [x for x, k in zip(words, keep, strict=True) if k]
    np.testing.assert_allclose(w.intervals, np.clip(iv[keep], 0, 3.0), atol=1e-9)
    assert "I" not in w.words and "café" not in w.words


@pytest.mark.parametrize(
    ("text", "line", "what"),
    [
        ("WEBVTT\n\n00:00:01.000 --> 00:00:0x.000\nhi\n", 3, "bad timestamp"),
        ("WEBVTT\n\njust text\nmore\n", 3, "expected a cue timing"),
        ("WEBVTT\n\n1\n00:00:03.000 --> 00:00:02.000\nhi\n", 4, "ends before it starts"),
        ("WEBVTT\n\n00:00:01.000 -> 00:00:02.000\nhi\n", 3, "expected a cue timing"),
        ("00:00:01.000 --> 00:00:02.000\nhi\n", 1, "must start with 'WEBVTT'"),
        ("WEBVTT\n\n00:01:61.000 --> 00:01:62.000\nhi\n", 3, "over 59"),
    ],
)
def test_malformed_vtt_names_file_and_line(tmp_path: Path, text: str, line: int, what: str) -> None:
    path = _write(tmp_path, "bad.vtt", text)
    with pytest.raises(ValueError, match=rf"bad\.vtt:{line}: .*{what}"):
        parse_captions(path)


def test_malformed_srt_names_file_and_line(tmp_path: Path) -> None:
    path = _write(tmp_path, "bad.srt", "1\n00:00:01;000 --> 00:00:02,000\nhi\n\n2\n00:00:02;000 --> 00:00:03,000\nyo\n")
    with pytest.raises(ValueError, match=r"bad\.srt:2: bad timestamp"):
        parse_captions(path)


@pytest.mark.parametrize(
    ("name", "text", "line", "what"),
    [
        ("b.vtt", "WEBVTT\n\n00:00:01.000 --> 00:00:02.000\nhi\n\njust text\nmore\n", 6, "expected a cue timing"),
        ("b.vtt", "WEBVTT\n\n00:00:01.000 --> 00:00:02.000\nhi\n\n00:00:03.000 --> 00:00:0x.000\nyo\n", 6,
         "bad timestamp"),
        ("b.vtt", "WEBVTT\n\n00:00:01.000 --> 00:00:02.000\nhi\n\n00:00:03.000 --> 00:00:02.500\nyo\n", 6,
         "ends before it starts"),
        ("b.srt", "1\n00:00:01,000 --> 00:00:02,000\nhi\n\n2\n00:00:02;000 --> 00:00:03,000\nyo\n", 6, "bad timestamp"),
    ],
)
def test_a_bad_block_among_good_cues_is_skipped_and_reported(tmp_path: Path, name: str, text: str, line: int,
                                                              what: str) -> None:
    # As WebVTT's parser, webvtt-py and pysrt do: the rest of the file is read; the block is named in attrs.
    w = parse_captions(_write(tmp_path, name, text))
    assert w.words == ("hi",)
    [msg] = w.attrs["skipped_blocks"]
    assert re.search(rf"{name}:{line}: .*{what}", msg), msg


@pytest.mark.parametrize("text", ["", "WEBVTT\n", "WEBVTT\n\n00:00:01.000 --> 00:00:02.000\n[Music]\n"])
def test_empty_transcripts_give_zero_words(tmp_path: Path, text: str) -> None:
    w = parse_captions(_write(tmp_path, "e.vtt", text))
    assert w.words == () and w.intervals.shape == (0, 2)


# --- Social-IQ 2.0 trimmed files --------------------------------------------------------------------------


def _script_trim(trim: float) -> float:
    """The download script's own arithmetic (datetime, microseconds = fraction digits * 1000)."""
    sec = int(str(trim).split(".")[0])
    us = int(str(trim).split(".")[1]) * 1000
    t = datetime.time(minute=sec // 60, second=sec % 60, microsecond=us)
    return t.minute * 60 + t.second + t.microsecond / 1e6


@pytest.mark.parametrize("trim", [12.5, 12.25, 12.125, 7.0, 105.9, 3.05, 58.09])
def test_misparsed_trim_matches_the_script(trim: float) -> None:
    assert siq2_misparsed_trim(trim) == pytest.approx(_script_trim(trim), abs=1e-9)


def _ts(t: float) -> str:
    ms = round(t * 1000)
    return f"{ms // 3600000:02d}:{ms // 60000 % 60:02d}:{ms // 1000 % 60:02d}.{ms % 1000:03d}"


def _source_truth() -> list[tuple[float, float, list[tuple[str, float]]]]:
    """Auto-caption cues of a long source video: (start, end, [(word, start)]), in source time."""
    rng = np.random.default_rng(7)
    cues, t = [], 90.2
    while t < 175:
        n = int(rng.integers(2, 5))
        starts = t + np.sort(rng.uniform(0.05, 1.7, n - 1))
        words = [(f"w{round(t * 10)}x0", t)] + [(f"w{round(t * 10)}x{i + 1}", float(s)) for i, s in enumerate(starts)]
        cues.append((t, t + 2.0, words))
        t += 2.0
    return cues


def _siq2_file(tmp_path: Path, trim: float, inline: bool) -> tuple[Path, list[str], np.ndarray]:
    """A trimmed .vtt as the download script wrote it, and the true clip-time words."""
    bad = _script_trim(trim)
    lines, words, iv = ["WEBVTT", ""], [], []
    for start, end, ws in _source_truth():
        if not (start >= bad and end <= bad + 60):  # the script keeps cues wholly inside its (wrong) window
            continue
        text = ws[0][0] + "".join(f"<{_ts(s)}><c> {w}</c>" for w, s in ws[1:]) if inline else " ".join(w for w, _ in ws)
        lines += [f"{_ts(start - bad)} --> {_ts(end - bad)} align:start position:0%", text, ""]
        bounds = [s for _, s in ws] + [end] if inline else None
        spread = np.array(_spread(start, end, [w for w, _ in ws])) if not inline else None
        for i, (w, _) in enumerate(ws):
            words.append(w)
            iv.append([bounds[i], bounds[i + 1]] if inline else spread[i].tolist())
    path = _write(tmp_path, "clip.vtt", "\n".join(lines))
    iv = np.array(iv) - trim
    keep = (iv[:, 0] < 60) & (iv[:, 1] > 0)
    return path, [w for w, k in zip(words, keep, strict=True) if k], np.clip(iv[keep], 0, 60)


def test_siq2_without_inline_times_assumes_the_script_rule(tmp_path: Path) -> None:
    path, words, iv = _siq2_file(tmp_path, 100.5, inline=False)
    w = parse_captions(path, trim_s=100.5)
    assert list(w.words) == words
    np.testing.assert_allclose(w.intervals, iv, atol=2e-3)
    assert w.attrs["corrections"]["siq2_trim"]["cue_shift_s"] == pytest.approx(100.005 - 100.5, abs=1e-9)


def test_uncorrected_siq2_file_ignores_out_of_cue_inline_times(tmp_path: Path) -> None:
    path, _, _ = _siq2_file(tmp_path, 100.5, inline=True)
    w = parse_captions(path)  # no trims.json: tags (source time) cannot be placed, cues spread instead
    assert w.attrs["inline_times_ignored_cues"] > 0
    assert "corrections" not in w.attrs
    _assert_monotone(w.intervals)


# --- property: any cue soup gives monotone, in-clip intervals -----------------------------------------------

_cue = st.tuples(
    st.floats(0, 50, allow_nan=False),
    st.floats(0, 5, allow_nan=False),
    st.lists(st.sampled_from(["yes", "no", "[Music]", "don't", "3.5", "<i>ok</i>", "(sigh)", "café"]), max_size=4),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(_cue, max_size=12), st.floats(0, 10), st.one_of(st.none(), st.floats(1, 40)))
def test_intervals_never_go_backwards(tmp_path_factory, cues, clip_start, duration) -> None:
    lines = ["WEBVTT", ""]
    for start, length, words in cues:
        lines += [f"{_ts(start)} --> {_ts(start + length)}", " ".join(words), ""]
    path = _write(tmp_path_factory.mktemp("p"), "p.vtt", "\n".join(lines))
    w = parse_captions(path, clip_start_s=clip_start, clip_duration_s=duration)
    _assert_monotone(w.intervals)
    assert np.all(w.intervals >= 0)
    if duration is not None:
        assert np.all(w.intervals <= duration)
    assert not any(x.startswith(("[", "(", "<")) for x in w.words)
    # Every word lies in a cue (on the clip timeline); only a zero-length cue gives a zero-length word.
    spans = np.array([[round(s * 1000) / 1000, round((s + n) * 1000) / 1000] for s, n, _ in cues]).reshape(-1, 2)
    spans = spans - clip_start
    for s, e in w.intervals:
        inside = (spans[:, 0] - 1e-9 <= s) & (e <= spans[:, 1] + 1e-9) | (spans[:, 0] < 0) & (s == 0)
        assert inside.any()
        assert e > s or (inside & (spans[:, 0] == spans[:, 1])).any()


# --- real-file shapes (issue 11): each of these failed before -----------------------------------------------


def test_whitespace_lines_between_cues_and_stripped_youtube_files(tmp_path: Path) -> None:
    # Netflix: a block of space-only lines before a cue id; YouTube with trailing spaces stripped: the cue's
    # line of one space became an empty line right after the timing line, so its text follows a blank line.
    netflix = "WEBVTT\n\nNOTE x\n\n        \n\n    \n1\n00:00:01.000 --> 00:00:02.000\nhello there\n"
    assert parse_captions(_write(tmp_path, "n.vtt", netflix)).words == ("hello", "there")
    stripped = parse_captions(_write(tmp_path, "s.vtt", YOUTUBE_VTT.replace("\n \n", "\n\n")))
    original = parse_captions(_write(tmp_path, "o.vtt", YOUTUBE_VTT))
    assert stripped.words == original.words
    np.testing.assert_array_equal(stripped.intervals, original.intervals)
    assert "skipped_blocks" not in stripped.attrs


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        ("teams.vtt", "WEBVTT\n\n0:0:0.0 --> 0:0:0.570\nthere\n\n0:0:1.5 --> 0:1:2.25\nyou\n", [[0, 0.57], [1.5, 62.25]]),
        ("hls.vtt", "WEBVTT\n\n00:00.040 --> 00:0.120\nout0\n", [[0.04, 0.12]]),
        ("short.srt", "1\n00:00:06,5 --> 00:00:07,25\nms\n", [[6.005, 7.025]]),  # SRT readers: ',5' is 5 ms
    ],
)
def test_one_digit_time_fields(tmp_path: Path, name: str, text: str, expected: list) -> None:
    np.testing.assert_allclose(parse_captions(_write(tmp_path, name, text)).intervals, expected, atol=1e-9)


def test_overlapping_cues_keep_their_own_times(tmp_path: Path) -> None:
    # pysubs2's example: a long cue and a short one inside it. Before: both words squashed to 24.0-24.0.
    text = "WEBVTT\n\n00:00:16.000 --> 00:00:24.000\nI like lime.\n\n00:00:17.400 --> 00:00:18.000\nHello world.\n"
    w = parse_captions(_write(tmp_path, "o.vtt", text))
    assert w.words == ("I", "like", "lime.", "Hello", "world.")  # by cue start; a cue's words together
    np.testing.assert_allclose(w.intervals, _spread(16, 24, ["I", "like", "lime."]) +
                               _spread(17.4, 18, ["Hello", "world."]), atol=1e-9)


def test_an_inline_time_at_the_cue_end_gives_no_zero_length_word(tmp_path: Path) -> None:
    # webvtt-py's youtube_dl.vtt: YouTube tags the cue's last word at the cue's very end.
    text = "WEBVTT\n\n00:05:04.080 --> 00:05:05.069\nthis<00:05:04.199><c> will</c><00:05:04.860><c> I'm</c>" \
           "<00:05:05.069><c> telling</c>\n"
    w = parse_captions(_write(tmp_path, "y.vtt", text))
    assert w.words == ("this", "will", "I'm", "telling")
    expected = [[304.08, 304.199], [304.199, 304.86], *_spread(304.86, 305.069, ["I'm", "telling"])]
    np.testing.assert_allclose(w.intervals, expected, atol=1e-9)


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ("first\\Nsecond\\nthird", ("first", "second", "third")),  # SSA line breaks in SRT text
        ("hard\\hspace", ("hard", "space")),
        ("{\\an4}middle horiz{\\an6}ontally", ("middle", "horizontally")),  # override blocks are zero-width
        ("&lt;b&gt; is text &amp; so is &quot;this&quot;", ("<b>", "is", "text", "&", "so", "is", '"this"')),
        ("<b>bold</b> 2<3,5>1", ("bold", "21")),  # tags go (as pysrt and webvtt-py strip them)
        ("WOMAN ( gasping ): Oh", ("Oh",)),  # a speaker label with a sound tag inside
    ],
)
def test_text_clean_up_as_subtitle_libraries_read_it(tmp_path: Path, line: str, words: tuple) -> None:
    w = parse_captions(_write(tmp_path, "t.srt", f"1\n00:00:01,000 --> 00:00:02,000\n{line}\n"))
    assert w.words == words


def test_utf16_file_with_byte_order_mark(tmp_path: Path) -> None:
    path = tmp_path / "u16.srt"
    path.write_bytes("1\n00:00:01,000 --> 00:00:02,000\nÈ 日本語\n".encode("utf-16"))
    assert parse_captions(path).words == ("È", "日本語")


def test_non_utf8_file_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "cp.srt"
    path.write_bytes("1\n00:00:01,000 --> 00:00:02,000\nCaf\u00e9\n".encode("cp1252"))
    with pytest.raises(ValueError, match=r"cp\.srt:3: not UTF-8 text"):
        parse_captions(path)


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("cr.vtt", "WEBVTT\r\r00:00:01.000 --> 00:00:02.000\rhello there\r\r00:00:03.000 --> 00:00:04.000\rworld\r"),
        ("crlf.srt", "1\r\n00:00:01,000 --> 00:00:02,000\r\nhello there\r\n\r\n2\r\n00:00:03,000 --> 00:00:04,000\r\nworld\r\n"),
        ("arrow.srt", "1\n00:00:01,000-->00:00:02,000\nhello there\n\n2\n00:00:03,000\t-->  00:00:04,000\nworld\n"),
        ("arrow.vtt", "WEBVTT\n\n00:00:01.000-->00:00:02.000\nhello there\n\n00:00:03.000 -->00:00:04.000\nworld\n"),
    ],
)
def test_line_endings_and_arrow_spacing_as_subtitle_libraries_read_them(tmp_path: Path, name: str, text: str) -> None:
    w = parse_captions(_write(tmp_path, name, text))
    assert w.words == ("hello", "there", "world") and "skipped_blocks" not in w.attrs
    np.testing.assert_allclose(w.intervals, [*_spread(1, 2, ["hello", "there"]), [3, 4]], atol=1e-9)
