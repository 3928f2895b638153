"""The one way the suite writes a file of a run folder: whole or not at all, never through a
link, and a failure of the environment (a full disk, a read-only folder) named with its path.

`write_atomic(path, data)` writes a temporary file beside `path` (created with O_EXCL and
O_NOFOLLOW, so nothing planted there is followed) and renames it over `path`: a reader sees
the old file or the new one, never half of one (a full disk leaves the old summary.json, not
a truncated one), and a symbolic link planted at `path` (`report.html -> ~/.bashrc`) is
replaced by the file, its target left untouched. Any OSError is an `OutputWriteError` naming
the path (exit 4: the environment failed, not the suite).
"""

from __future__ import annotations

import errno
import os
import secrets
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

from vllm_slo.scenarios.errors import ExitCode, ScenarioError, SloSuiteError

_TEMPORARY_TRIES = 100


class OutputWriteError(SloSuiteError):
    """A file the suite must write could not be written: names the path and the system's
    reason. `verdict_text` / `verdict_exit_code`: the verdict reached before the write failed
    (the command line prints it before this error; the exit code is still 4)."""

    exit_code = ExitCode.INVALID_MEASUREMENT

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"cannot write {path}: {reason}")
        self.path = path
        self.reason = reason
        self.verdict_text: str | None = None
        self.verdict_exit_code: int | None = None

    @classmethod
    def of(cls, path: Path, error: OSError) -> OutputWriteError:
        return cls(path, error.strerror or str(error))

    def with_verdict(self, text: str, exit_code: int) -> OutputWriteError:
        """This error, carrying the verdict the failed write would have saved (the first
        one given is kept: the innermost writer knows the verdict best)."""
        if self.verdict_text is None:
            self.verdict_text, self.verdict_exit_code = text, exit_code
        return self


def _temporary_beside(path: Path) -> tuple[int, Path]:
    """A new file in `path`'s folder, opened for writing; never an existing name or a link."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    for _ in range(_TEMPORARY_TRIES):
        candidate = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
        try:
            return os.open(candidate, flags, 0o666), candidate  # the umask applies
        except FileExistsError:
            continue
    raise OSError(errno.EEXIST, "no free temporary name beside it", str(path))


def write_atomic(path: Path, data: str | bytes) -> Path:
    """Write `data` (text: UTF-8) to `path` whole or not at all, replacing whatever `path`
    is (a file, or a link: the link goes, its target is untouched); returns `path`.
    OutputWriteError naming `path` on any failure, the temporary file removed."""
    payload = data.encode("utf-8") if isinstance(data, str) else data
    if path.is_dir() and not path.is_symlink():
        raise OutputWriteError.of(
            path, IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path)))

    def fill(temporary: Path) -> None:
        with temporary.open("wb") as sink:
            sink.write(payload)
            sink.flush()
            os.fsync(sink.fileno())

    return write_atomic_with(path, fill)


def write_atomic_with(path: Path, write: Callable[[Path], object]) -> Path:
    """Like `write_atomic`, for a writer that needs a file name (`pyarrow.parquet.write_table`,
    `shutil.copyfile`): `write(temporary_path)` fills a fresh temporary file beside `path`,
    which then replaces `path`."""
    try:
        descriptor, temporary = _temporary_beside(path)
        os.close(descriptor)
    except OSError as error:
        raise OutputWriteError.of(path, error) from None
    try:
        write(temporary)
        os.replace(temporary, path)
    except OSError as error:
        temporary.unlink(missing_ok=True)
        raise OutputWriteError.of(path, error) from None
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return path


def unique_folder(parent: Path, name: str) -> Path:
    """A new folder `parent/name`, or `name-2`, `name-3`, ... when taken: made with an
    exclusive mkdir, so two processes that ask in the same second never share one. `parent`
    is created as needed. OSError (other than the name being taken) is the caller's."""
    parent.mkdir(parents=True, exist_ok=True)
    suffix = 1
    while True:
        folder = parent / (name if suffix == 1 else f"{name}-{suffix}")
        try:
            folder.mkdir()
        except FileExistsError:
            suffix += 1
            continue
        return folder


def check_runs_root(runs_root: Path) -> None:
    """The runs folder can hold run folders: it is a folder, or can become one."""
    ancestor = runs_root.absolute()
    while not ancestor.exists() and not ancestor.is_symlink() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        what = "it" if ancestor == runs_root.absolute() else f"{ancestor}"
        raise ScenarioError(f"--runs-dir {runs_root}: {what} is not a folder (a file, a broken "
                            "link or a link loop); run folders are created inside a folder")


def new_run_dir(runs_root: Path, scenario_name: str) -> Path:
    check_runs_root(runs_root)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    runs_root = runs_root.resolve()  # relative to where the user stands, absolute from here on
    try:  # an exclusive mkdir: runs started in one second get -2, -3, even concurrently
        return unique_folder(runs_root, f"{stamp}-{scenario_name}")
    except OSError as error:
        raise ScenarioError(f"--runs-dir {runs_root}: cannot create the run folder "
                            f"{stamp}-{scenario_name}: {error.strerror or error}") from None
