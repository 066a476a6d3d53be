"""The commit protocol where there is no rename and no append (store/backends/log.py), on both backends (the
conformance fixture of tests/store/test_backends.py): racing publishers, sealed generations, snapshots."""

from __future__ import annotations

import threading

import pytest

from store.backends import Backend, Conflict, log
from tests import s3server

s3_server, s3_url, backend = s3server.s3_server, s3server.s3_url, s3server.backend  # fixtures, used by name


def test_publish_and_read(backend: Backend) -> None:
    assert log.read(backend, "f/index.log") is None
    gen = log.replace(backend, "f/index.log", b"header\n", None)
    end = log.append(backend, "f/index.log", gen, 7, b"part 1\n")
    end = log.append(backend, "f/index.log", gen, end, b"part 2\n")
    snap = log.read(backend, "f/index.log")
    assert snap == log.Snapshot(gen, b"header\npart 1\npart 2\n") and end == len(snap.data)


def test_two_writers_racing_for_one_position(backend: Backend) -> None:
    """Two writers that both read the log at one length publish the next record: exactly one wins; the
    loser's record is nowhere, and the log reads the winner's."""
    gen = log.replace(backend, "f/index.log", b"header\n", None)
    at = len(log.read(backend, "f/index.log").data)
    won, lost = [], []

    def publish(name: str) -> None:
        try:
            log.append(backend, "f/index.log", gen, at, f"{name} seq 1\n".encode())
            won.append(name)
        except Conflict:
            lost.append(name)

    threads = [threading.Thread(target=publish, args=(f"writer {k}",)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1 and len(lost) == 5
    assert log.read(backend, "f/index.log").data == f"header\n{won[0]} seq 1\n".encode()


def test_new_generation_seals_the_old(backend: Backend) -> None:
    """A compaction publishes a whole new log; a writer still appending to the old generation loses, and a
    reader holding the old generation reads its snapshot whole."""
    old = log.replace(backend, "f/index.log", b"h1\n", None)
    end = log.append(backend, "f/index.log", old, 3, b"a\n")
    new = log.replace(backend, "f/index.log", b"h2\nrewritten\n", (old, end))
    with pytest.raises(Conflict):
        log.append(backend, "f/index.log", old, end, b"late\n")
    assert log.read(backend, "f/index.log") == log.Snapshot(new, b"h2\nrewritten\n")
    assert log.read(backend, "f/index.log", old) == log.Snapshot(old, b"h1\na\n", True)
    assert sorted(log.generations(backend, "f/index.log")) == sorted([old, new])
    with pytest.raises(Conflict, match="replaced by another writer"):
        log.replace(backend, "f/index.log", b"h3\n", (old, end))  # a second compaction that read the old log
    log.remove_generation(backend, "f/index.log", old)
    assert log.generations(backend, "f/index.log") == [new]


def test_replace_loses_to_an_append_it_did_not_see(backend: Backend) -> None:
    """A compaction that read the log at one length, while a record was published after it, is refused: its new
    generation would drop that record. The log stays as it was, and the writer that appended is unharmed."""
    old = log.replace(backend, "f/index.log", b"h1\n", None)
    seen = len(log.read(backend, "f/index.log").data)
    end = log.append(backend, "f/index.log", old, seen, b"b\n")  # after the compaction read the log
    with pytest.raises(Conflict):
        log.replace(backend, "f/index.log", b"h2\ncompacted\n", (old, seen))
    assert log.read(backend, "f/index.log") == log.Snapshot(old, b"h1\nb\n")
    assert log.generations(backend, "f/index.log") == [old]
    log.append(backend, "f/index.log", old, end, b"c\n")
    assert log.read(backend, "f/index.log").data == b"h1\nb\nc\n"
