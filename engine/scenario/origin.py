"""Where a scenario comes from, and so what it may touch on this machine.

A scenario file on the user's own disk (the command line, Python) may name any trace file, by a path
taken from the scenario's folder. A scenario that arrives from someone else (a shared link, an
uploaded scenario: the app) may only name traces the app itself holds: files in its trace store,
named by the hash of their content. Such a name is checked by its spelling alone, so a link that names
``/etc/hostname`` or ``../x`` is refused without any file being opened.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from .caps import DEFAULT_CAPS, Caps
from .errors import ScenarioError, excerpt

STORED_TRACE_SUFFIXES = (".csv", ".jsonl")
_STORED_TRACE_NAME = re.compile(r"[0-9a-f]{32}(\.csv|\.jsonl)")


def stored_trace_name(content: bytes, suffix: str) -> str:
    """The store's name for a trace with this content: 32 hex digits of its SHA-256 and its suffix."""
    suffix = suffix.lower() if suffix.lower() in STORED_TRACE_SUFFIXES else ".csv"
    return hashlib.sha256(content).hexdigest()[:32] + suffix


@dataclass(frozen=True)
class Origin:
    """What a scenario may do: read traces by path from ``trace_dir`` (``trace_names_only`` False) or only
    by store name from it (True), within ``caps``."""

    trace_dir: str = "."
    trace_names_only: bool = False
    caps: Caps = DEFAULT_CAPS

    def trace_file(self, path: str, key: str = "workload.trace.path") -> Path:
        """The file ``workload.trace.path`` names; for a store name, checks that the store holds it."""
        if not self.trace_names_only:
            given = Path(path)
            return given if given.is_absolute() else Path(self.trace_dir) / given
        if not _STORED_TRACE_NAME.fullmatch(path):
            raise ScenarioError(f"{key} = {excerpt(path)} is not a trace this app holds: a shared link or an "
                                f"uploaded scenario can only replay a trace uploaded on the Workload page")
        stored = Path(self.trace_dir) / path
        try:
            regular = stat.S_ISREG(os.lstat(stored).st_mode)  # lstat: a link planted in the store is not followed
        except OSError:
            regular = False
        if not regular:
            raise ScenarioError(f"{key}: the uploaded trace {path} is no longer on this server (uploads are "
                                f"kept for a limited time); upload the trace again on the Workload page")
        return stored
