"""Input kinds (media/kinds/): the fingerprint identities stay what stores were written with.

A store computed before must not be recomputed: every (item, kind) source identity below was computed by the code
before input kinds became modules (pipeline/run.py `source_identity` at 240bf7f) and is pinned here literally, for
a whole video with a separate audio file and a Social-IQ 2.0 trim, a clip cut from a longer video (TinySocial), a
still image with its caption and reactions (Socratis) and a text-only QA item (SocialIQA).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from manifests.records import MediaItem, QAItem, Reaction
from media.kinds import applicable, identity
from pipeline.config import RunConfig

MTIME_NS = 1_700_000_000_123_456_789


def _file(root: Path, name: str, content: bytes) -> Path:
    path = root / name
    path.write_bytes(content)
    os.utime(path, ns=(MTIME_NS, MTIME_NS))
    return path


@pytest.fixture
def items(tmp_path: Path) -> dict[str, tuple[MediaItem, list[QAItem]]]:
    video = _file(tmp_path, "v.mp4", b"v" * 100)
    audio = _file(tmp_path, "v.wav", b"a" * 50)
    vtt = _file(tmp_path, "v.vtt", b"WEBVTT\n")
    source = _file(tmp_path, "long.mp4", b"s" * 300)
    source_vtt = _file(tmp_path, "long.vtt", b"WEBVTT\n\n")
    image = _file(tmp_path, "i.jpg", b"i" * 70)
    notes = _file(tmp_path, "ann.json", b"{}")
    q = QAItem(qid="q1", item_id="whole", dataset="d", split="train", question="Why?", answers=("a", "b"),
               correct=(True, False), ts=(1.0, 2.0))
    tq = QAItem(qid="t1", item_id="text", dataset="d", split="val", question="What?", answers=("x", "y", "z"),
                context="Someone did something.")
    return {
        "whole": (MediaItem(id="whole", dataset="d", video=video, audio=audio, transcript=vtt, clip_start_s=12.5,
                            clip_end_s=72.5), [q]),
        "cut": (MediaItem(id="cut", dataset="d", video=source, transcript=source_vtt, clip_start_s=3.0,
                          clip_end_s=9.5, cut_from_source=True), []),
        "image": (MediaItem(id="image", dataset="d", image=image, caption="A cat.", annotations=notes,
                            reactions=(Reaction(emotions=("joy",), reasons=("cute",)),
                                       Reaction(emotions=("awe", "calm"), reasons=("fur", "sleep"), demographics="x"))),
                  []),
        "text": (MediaItem(id="text", dataset="d"), [tq]),
    }


KINDS = ("frames", "audio", "transcript", "qa", "caption", "reactions")

# (item, kind) -> the identity without its "path" (the file's path is checked on its own: the tmp folder varies);
# absent: not applicable
PINNED = {
    ("whole", "frames"): {"name": "v.mp4", "size": 100, "mtime_ns": MTIME_NS, "decode": "5", "picture": "1"},
    ("whole", "audio"): {"name": "v.wav", "size": 50, "mtime_ns": MTIME_NS, "decode": "5", "rate_hz": 16000},
    ("whole", "transcript"): {"name": "v.vtt", "size": 7, "mtime_ns": MTIME_NS, "clip": [12.5, 72.5]},
    ("whole", "qa"): {"qa": "800480446f9c615cd0d4074b9de7c3b3ca5c233b27dcb2112370539c61611550"},
    ("cut", "frames"): {"name": "long.mp4", "size": 300, "mtime_ns": MTIME_NS, "decode": "5", "picture": "1",
                        "cut": [3.0, 9.5]},
    ("cut", "audio"): {"name": "long.mp4", "size": 300, "mtime_ns": MTIME_NS, "decode": "5", "rate_hz": 16000,
                       "cut": [3.0, 9.5]},
    ("cut", "transcript"): {"name": "long.vtt", "size": 8, "mtime_ns": MTIME_NS, "clip": [3.0, 9.5]},
    ("image", "frames"): {"name": "i.jpg", "size": 70, "mtime_ns": MTIME_NS, "decode": "image-1", "picture": "1"},
    ("image", "caption"): {"caption": "31bd1f22fe824bc1cb3ac279c4d69c0e423e041fee364194b5f4ecf6e2db691f"},
    ("image", "reactions"): {"reactions": "c34b9d09d81e3736cc5cee73ee62caf20382c30ff74f6f3b244f791ef42c2e6d"},
    ("text", "qa"): {"qa": "f3f49e8b25fbaf77e3c51d541e5169b118d1f424f7148952ffce8fde896e3a80"},
}
PATHS = {("whole", "frames"): "v.mp4", ("whole", "audio"): "v.wav", ("whole", "transcript"): "v.vtt",
         ("cut", "frames"): "long.mp4", ("cut", "audio"): "long.mp4", ("cut", "transcript"): "long.vtt",
         ("image", "frames"): "i.jpg", ("image", "caption"): "ann.json", ("image", "reactions"): "ann.json"}


def test_source_identities_are_those_stores_were_written_with(items, tmp_path: Path) -> None:
    config = RunConfig(features={})  # audio at 16 kHz, the default
    got = {}
    for name, (item, qs) in items.items():
        for kind in KINDS:
            if not applicable(item, kind, qs):
                continue
            ident = identity(item, kind, qs, config.audio_rate_hz)
            path = ident.pop("path", None)
            assert path == (str(tmp_path / PATHS[name, kind]) if (name, kind) in PATHS else None), (name, kind)
            got[name, kind] = ident
    assert got == PINNED


def test_a_clip_cut_from_a_longer_file_is_a_span_of_it_and_an_image_is_a_still(items, tmp_path: Path) -> None:
    from media import kinds

    cut, whole, image = items["cut"][0], items["whole"][0], items["image"][0]
    assert kinds.of("frames", cut).span(cut) == kinds.Span(tmp_path / "long.mp4", (3.0, 9.5))
    assert kinds.of("audio", cut).span(cut) == kinds.Span(tmp_path / "long.mp4", (3.0, 9.5))
    # a Social-IQ 2.0 clip was cut before it reached us: its trim says where it came from, its span is the file
    assert kinds.of("audio", whole).span(whole) == kinds.Span(tmp_path / "v.wav", None)
    assert kinds.of("frames", image) is kinds.STILL and kinds.source(image, "frames") == tmp_path / "i.jpg"
    assert [kinds.KINDS[k].unit for k in KINDS] == ["frames", "audio_s", "words", "questions", "texts", "texts"]
    with pytest.raises(ValueError, match="unknown input kind 'video'"):
        kinds.of("video", whole)


def test_the_decode_identity_names_the_stream_only_for_files_with_several(tmp_path: Path) -> None:
    """A file with one stream of a kind keeps the identity stores were written with; one with several names the
    stream decoded (ffmpeg's choice, or the run's `tracks`), so choosing another recomputes its rows."""
    import subprocess

    def make(name: str, *args: str) -> Path:
        path = tmp_path / name
        subprocess.run(["ffmpeg", "-loglevel", "error", "-y", *args, "-c:v", "libx264", "-c:a", "aac", str(path)],
                       check=True)
        return path

    src = ["-f", "lavfi", "-i", "testsrc2=s=64x48:r=5:d=1", "-f", "lavfi", "-i", "sine=d=1"]
    one = make("one.mp4", *src)
    two = make("two.mp4", *src, "-f", "lavfi", "-i", "sine=f=880:d=1", "-map", "0", "-map", "1", "-map", "2",
               "-disposition:a:0", "0", "-disposition:a:1", "default")
    for path, audio in ((one, {}), (two, {"stream": 2})):
        item = MediaItem(id=path.stem, dataset="d", video=path)
        assert "stream" not in identity(item, "frames", [], 16000)
        assert {k: v for k, v in identity(item, "audio", [], 16000).items() if k == "stream"} == audio
    item = MediaItem(id="two", dataset="d", video=two)
    assert identity(item, "audio", [], 16000, {"audio": 1})["stream"] == 1
    assert "stream" not in identity(item, "frames", [], 16000, {"audio": 1})
