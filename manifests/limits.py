"""What one input file may cost before it is refused: bytes read, JSON nesting, caption cues.

A hostile or broken file (2 KB of `[` nested 1,000 deep, a caption file of a million cues, /dev/zero) must fail
alone with one clear line, in bounded time and memory, never end the run or grow a worker without end. The
limits are the run config's `[limits]` table (README, "Input limits"); the run sets them once where it reads its
manifests (pipeline/sources.py) and where a worker decodes an item (pipeline/actors.py), so the readers deep in
manifests/ and media/ take them from `current()` rather than from every signature on the way down.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from contextvars import ContextVar
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from objectio import ObjectPath, as_path


class InputLimits(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    # a QA or annotation JSON file: the releases' largest is SocialIQA's train.jsonl (8 MB); the deepest nesting
    # is Social-IQ 2.0's split file (4 levels)
    json_max_bytes: int = Field(512 * 2**20, ge=1)
    json_max_depth: int = Field(64, ge=2)
    # a caption file: a TV episode's subtitles (webvtt-py's Netflix sample) are 865 cues in 120 KB, pycaption's
    # longest example 1,847 cues in 117 KB; Social-IQ clips are a minute
    caption_max_bytes: int = Field(8 * 2**20, ge=1)
    caption_max_cues: int = Field(100_000, ge=1)


class InputTooLarge(ValueError):
    """An input over one of the limits; the message names the file, the measure and the limit."""


_DEFAULT = InputLimits()
_CURRENT: ContextVar[InputLimits | None] = ContextVar("input_limits", default=None)


def current() -> InputLimits:
    return _CURRENT.get() or _DEFAULT


@contextlib.contextmanager
def applied(limits: InputLimits) -> Iterator[None]:
    token = _CURRENT.set(limits)
    try:
        yield
    finally:
        _CURRENT.reset(token)


def not_a_file(path: Path) -> str | None:
    """Why `path` is not a regular file one can read to its end, in words; None when it is one. A link is
    judged by what it points to (a link to /dev/zero is a device, not a missing file)."""
    path = as_path(path)
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return "broken symbolic link: its target does not exist" if path.is_symlink() else "does not exist"
    except OSError as e:
        return f"cannot be read ({e.strerror or e})"
    if stat.S_ISREG(mode):
        return None
    kind = ("a folder" if stat.S_ISDIR(mode) else "a FIFO (named pipe)" if stat.S_ISFIFO(mode)
            else "a socket" if stat.S_ISSOCK(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
            else "not a file")
    target = f" (a symbolic link to {os.path.realpath(path)})" if path.is_symlink() else ""
    return f"not a regular file: {kind}{target}"


def read_bounded(path: Path, max_bytes: int, what: str, setting: str) -> bytes:
    """The file's bytes, reading at most max_bytes + 1: a file over the limit, /dev/zero or a FIFO that never
    ends is refused after that many bytes, not read until memory runs out. Only regular files are read: a FIFO
    would block the run until someone writes to it."""
    path = as_path(path)
    if isinstance(path, ObjectPath):  # its size from the listing: one over the limit is never fetched
        if path.stat().st_size > max_bytes:
            raise InputTooLarge(f"{path}: {what} over {max_bytes:,} bytes (limits.{setting} in the run config)")
        return path.read_bytes()
    why = not_a_file(path)
    if why is not None and why != "does not exist":  # a missing file: open's own FileNotFoundError
        raise InputTooLarge(f"{path}: {why}; a {what} must be a file")
    with open(path, "rb") as f:
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise InputTooLarge(f"{path}: {what} over {max_bytes:,} bytes (limits.{setting} in the run config)")
    return data
