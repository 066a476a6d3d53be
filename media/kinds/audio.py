"""Audio: the item's audio file when the manifest gives one, else its video's audio track (the one ffmpeg plays,
or the one RunConfig.tracks names), resampled once to the run's rate, mono (media/audio.py); a clip cut from a longer
file gets its samples of the span (media/cut.py `cut_audio`). Counted in seconds of audio."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from extractors.base import Audio
from manifests.records import MediaItem, QAItem
from media import decode
from media.cut import cut_audio
from media.kinds.base import Kind, Span, Tracks, cut_identity, recording_identity, stream_identity


class AudioTrack(Kind):
    name = "audio"
    unit = "audio_s"
    stream = "audio"

    def source(self, item: MediaItem) -> Path | None:
        return item.audio or item.video

    def identity(self, item: MediaItem, questions: list[QAItem], audio_rate_hz: int,
                 tracks: Tracks | None = None) -> dict[str, Any]:
        span = self.span(item, tracks)
        return {**recording_identity(span), "decode": decode.DECODE_VERSION, "rate_hz": audio_rate_hz,
                **cut_identity(span), **stream_identity(span, "audio")}

    def decode(self, item: MediaItem, span: Span, questions: list[QAItem], audio_rate_hz: int) -> Audio:
        audio = decode.decode_audio(span.recording, audio_rate_hz, span.track)
        return audio if span.clip is None else cut_audio(audio, *span.clip, span.recording)


AUDIO = AudioTrack()
