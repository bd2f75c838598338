"""A folder the server writes user files into (uploaded traces, saved calibrations): created private (0700) and
refused when another user owns it or may write to it, so that nobody else can plant a file, or a link to one,
under a name the app will read."""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path
from typing import Iterator

PARTIAL_PREFIX = ".partial-"  # a write under way (or cut short by a crash): never read, removed when found


class NotPrivateError(RuntimeError):
    """The folder exists but is not private to the user running the server."""


def ensure_private(folder: Path) -> Path:
    """``folder``, created with mode 0700 if missing; ``NotPrivateError`` if it is not a directory owned by this
    user and closed to writes by others."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = os.lstat(folder)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o022:
        raise NotPrivateError(f"{folder} is not private to uid {os.getuid()}")
    return folder


@contextlib.contextmanager
def _partial(target: Path, content: bytes) -> Iterator[str]:
    """A partial file beside ``target`` holding the whole ``content`` (to be put in place under the block), removed
    after the block whatever happened (already gone once it has been moved in place)."""
    fd, partial = tempfile.mkstemp(dir=target.parent, prefix=PARTIAL_PREFIX)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(content)
        yield partial
    finally:
        Path(partial).unlink(missing_ok=True)


def write_atomically(target: Path, content: bytes) -> None:
    """Write ``content`` to ``target`` so that a reader sees the old file or the whole new one, never part."""
    with _partial(target, content) as partial:
        os.replace(partial, target)


def write_new(target: Path, content: bytes) -> bool:
    """Write ``content`` to ``target`` whole, unless a file of that name exists (False), even one created a moment
    ago by another session or process: the content goes to a partial file, then is linked under the name, and a
    link never replaces a file."""
    with _partial(target, content) as partial:
        try:
            os.link(partial, target)
        except FileExistsError:
            return False
    return True
