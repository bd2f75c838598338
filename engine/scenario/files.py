"""Opening the files a user names (a scenario, a trace, a benchmark result): regular files only, their size
checked before a byte is read; and writing the files a user names (``write_named``): never through a symbolic link,
never half a file.

A path on the command line may name anything: a FIFO (reading it waits for a writer forever), a device
(``/dev/zero`` never ends), a socket or a folder. ``open_regular`` opens without blocking, asks the open file
what it is, and refuses anything but a regular file, or one larger than the caller's limit, with one line
naming the file and what it is; nothing is read before. Every error is a ``ScenarioError``.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import BinaryIO

from .errors import ScenarioError, printable
from .private_folder import write_atomically

NAME_CHARS = 120  # of a path quoted in an error line

_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def kind_of(mode: int) -> str:
    """What a file of this ``st_mode`` that is not a regular file is, in words ("a FIFO (named pipe)")."""
    return next((words for test, words in _KINDS if test(mode)), "not a regular file")


def os_reason(exc: OSError) -> str:
    """What the operating system said went wrong ("No space left on device"), for an error line."""
    return exc.strerror or errno.errorcode.get(exc.errno or 0, type(exc).__name__)


def quoted(path: str | Path) -> str:
    """A path for an error line: printable, at most ``NAME_CHARS`` characters, in quotes."""
    return repr(printable(str(path), NAME_CHARS))


def open_regular(path: str | Path, what: str, max_bytes: int | None = None, limit_name: str = "",
                 hint: str = "", shown_as: str | None = None) -> BinaryIO:
    """``path`` opened for reading in binary mode, unbuffered, when it is a regular file of at most ``max_bytes``
    bytes (any size when None); else ``ScenarioError`` naming it as ``what`` ("trace file") and ``shown_as`` (default:
    its path), saying what it is or how large, and ``limit_name`` (the safety limit it passed; ``hint``: how to raise
    it), before anything is read."""
    name = f"{what} {quoted(path if shown_as is None else shown_as)}"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise ScenarioError(f"{name} does not exist") from None
    except IsADirectoryError:
        raise ScenarioError(f"{name} is a folder; give a file") from None
    except PermissionError:
        raise ScenarioError(f"{name} cannot be read (permission denied)") from None
    except OSError as exc:
        raise ScenarioError(f"{name} cannot be opened ({os_reason(exc)})") from None
    except ValueError:  # os.open refuses a NUL character in a path
        raise ScenarioError(f"{name} cannot be opened (its path holds a NUL character)") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ScenarioError(f"{name} is {kind_of(info.st_mode)}, not a regular file; give a file")
        if max_bytes is not None and info.st_size > max_bytes:
            limit = f" ({limit_name})" if limit_name else ""
            raise ScenarioError(f"{name} has {info.st_size:,} bytes, more than the limit of {max_bytes:,} bytes{limit}"
                                f"{hint}")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb", buffering=0)
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: str | Path, what: str, max_bytes: int, limit_name: str = "", hint: str = "") -> bytes:
    """The whole content of regular file ``path`` of at most ``max_bytes`` bytes (``open_regular``); a file that
    grows past the limit while it is read is refused too."""
    with open_regular(path, what, max_bytes, limit_name, hint) as fh:
        try:
            content = _read_up_to(fh, max_bytes + 1)
        except OSError as exc:
            raise ScenarioError(f"{what} {quoted(path)} cannot be read ({os_reason(exc)})") from None
    if len(content) > max_bytes:
        limit = f" ({limit_name})" if limit_name else ""
        raise ScenarioError(f"{what} {quoted(path)} has more than {max_bytes:,} bytes, the limit{limit}{hint}")
    return content


def _read_up_to(fh: BinaryIO, count: int) -> bytes:
    """At most ``count`` bytes of ``fh`` (an unbuffered file returns short reads)."""
    chunks, left = [], count
    while left > 0:
        chunk = fh.read(min(left, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def write_named(path: str | Path, content: bytes, option: str, inside: str | Path | None = None) -> None:
    """Write ``content`` to the file ``path`` a user named with ``option`` ("--json"): written whole to a partial
    file beside it, then renamed into place (a reader never sees half of it, and a failure leaves the old file).
    A symbolic link is refused, not followed (its target could be any file the process may write; "-" names standard
    output), as is a folder, and with ``inside``, a file outside that folder; each refusal one line naming the option
    and the path. A device or a pipe is written to as it is (nothing to rename)."""
    target = Path(path)
    name = f"{option} {quoted(path)}"
    if target.is_symlink():
        raise ScenarioError(f"{name} is a symbolic link; give the path of a plain file, or - for standard output (a "
                            f"link's target is never replaced)")
    if target.is_dir():
        raise ScenarioError(f"{name} is a folder; give a file path")
    if inside is not None and target.parent.resolve() != Path(inside).resolve():
        raise ScenarioError(f"{name} is outside the folder {quoted(inside)}; nothing there is written")
    if target.exists() and not target.is_file():  # a device or a pipe (/dev/null): written to, nothing renamed
        try:
            with open(target, "wb") as fh:
                fh.write(content)
        except OSError as exc:
            raise ScenarioError(f"{name} could not be written ({os_reason(exc)})") from None
        return
    try:
        write_atomically(target, content)
    except OSError as exc:
        raise ScenarioError(f"{name} could not be written ({os_reason(exc)})") from None
