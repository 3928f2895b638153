"""What tells one version of a data file from another without reading it: the key under which
a reading of a trace or a ShareGPT file is kept, so the check before the server starts and the
plan after it (and every trial of an experiment) read a file once while it stays unchanged."""

from __future__ import annotations

from pathlib import Path


def file_identity(path: Path) -> tuple[int, ...]:
    """The file's device, inode, size and modification time (ns); () when it cannot be
    stat'ed (the reader then says what is wrong with the path). A file rewritten in place
    changes its size or modification time; one replaced by another changes its inode."""
    try:
        stat = path.stat()
    except OSError:
        return ()
    return (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)
