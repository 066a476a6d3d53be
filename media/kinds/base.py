"""What every input kind is: where an item's input comes from, its identity in the fingerprint, its decoding given a
span, and the unit its work is counted in. The kinds themselves are the other modules of this package, found
through the table in `media/kinds/__init__.py`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from manifests.records import MediaItem, QAItem
from media.container import Track, chosen_of_several
from objectio import ObjectPath


@dataclass(frozen=True)
class Span:
    """What a decoder reads: `recording`, the file (None where the input lives in the manifest: questions, texts),
    and `clip`, the [start_s, end_s) of the file's timeline the item is, re-timed so that start_s is its 0 (a
    clip cut out of a longer video: TinySocial; end_s None: to the file's end), or None: the item is the whole
    file (Social-IQ 2.0's clips were cut before they reached us; their trims only say where they came from)."""

    recording: Path | None
    clip: tuple[float, float | None] | None = None
    track: Track = None  # which stream of its kind (media/container.py `choose_stream`): None, the one ffmpeg plays


Tracks = Mapping[str, int | str]  # the run's track choices (RunConfig.tracks): "video"/"audio" -> index or language


class Kind:
    """One input kind. Subclasses name it, say what its work is counted in and implement `source` and `decode`;
    `identity` and `applicable` have the defaults of an input read from one file."""

    name: ClassVar[str]  # what an extractor's `input_kind` says
    unit: ClassVar[str]  # what a decode or model call of this kind counts its work in (the run report's stages)
    # what a decoded input's batching count is (actors `_size`), and so what a model call's `per_call` caps:
    # "frames" (frames_per_batch) or "items" (items_per_batch)
    batch_unit: ClassVar[str] = "items"
    # batching units of a typical item: the scheduler feeds actors in items (a 60 s clip's frames)
    item_units: ClassVar[int] = 1
    # a long input is decoded in segments of at most `batch_bytes` (`decode_segment`), each its own model call
    segmented: ClassVar[bool] = False
    stream: ClassVar[str | None] = None  # the kind of media stream it is decoded from ("video", "audio"), if any

    def of(self, item: MediaItem) -> Kind:
        """The kind as this item has it (a still image's frames are its one picture: media/kinds/still.py)."""
        return self

    def source(self, item: MediaItem) -> Path | None:
        """The file the item's input of this kind is read from; None: the item has none (or it is in the manifest)."""
        raise NotImplementedError

    def span(self, item: MediaItem, tracks: Tracks | None = None) -> Span:
        """The recording and the part of it the item is: the one place a clip cut from a longer file is told apart;
        with the stream of it the run chose (`tracks`), for kinds read from a media stream."""
        track = (tracks or {}).get(self.stream) if self.stream else None
        return Span(self.source(item), (item.clip_start_s, item.clip_end_s) if item.cut_from_source else None, track)

    def applicable(self, item: MediaItem, questions: list[QAItem]) -> bool:
        """Whether the item has an input of this kind (else its features are n/a for it)."""
        return self.source(item) is not None

    def identity(self, item: MediaItem, questions: list[QAItem], audio_rate_hz: int,
                 tracks: Tracks | None = None) -> dict[str, Any]:
        """The declared identity of what the input is decoded from: it enters the fingerprint, so a store computed
        before recomputes nothing as long as it stays the same (tests/media/test_kinds.py pins it for every kind)."""
        return recording_identity(self.span(item, tracks))

    def decode(self, item: MediaItem, span: Span, questions: list[QAItem], audio_rate_hz: int) -> Any:
        """The item's whole decoded input (extractors/base.py's input types) from `span`."""
        raise NotImplementedError

    def decode_segment(self, span: Span, segment: int, segment_bytes: int | None) -> tuple[Any, int]:
        """(Segment `segment` of the decoded input, how many segments it is decoded in): `segmented` kinds only."""
        raise NotImplementedError(f"input kind {self.name!r} is not decoded in segments")


def recording_identity(span: Span) -> dict[str, Any]:
    """The file's path, and its name, size and mtime where it exists (a missing file fails when it is decoded); an
    object in a bucket has no mtime: its name, size and ETag (objectio/paths.py `ObjectPath.identity`)."""
    ident: dict[str, Any] = {"path": str(span.recording)}
    if isinstance(span.recording, ObjectPath):
        return {**ident, **span.recording.identity()}
    if span.recording is not None and span.recording.exists():
        st = span.recording.stat()
        ident.update(name=span.recording.name, size=st.st_size, mtime_ns=st.st_mtime_ns)
    return ident


def stream_identity(span: Span, kind: str) -> dict[str, Any]:
    """Which stream of a file with several of `kind` is decoded (its index); nothing for a file with one, whose
    identity stays what stores were written with."""
    index = chosen_of_several(span.recording, kind, span.track)
    return {} if index is None else {"stream": index}


def cut_identity(span: Span) -> dict[str, Any]:
    """A cut clip's span enters its identity: two clips of one file are two inputs."""
    return {} if span.clip is None else {"cut": list(span.clip)}
