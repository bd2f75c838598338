"""Run summaries shared by the app's processes on one machine, on disk.

Behind ``python -m ui.serve`` each process keeps its own caches, so a room whose visitors make the same changes
(a workshop's exercise) would run each comparison and sweep once per process. The launcher gives its processes
one folder (``SHARED_DIR_ENV``); a process that has run a summary writes it there and every process reads it
before running one. A summary is plain JSON (read back with ``json``: no code runs on reading), written to a
temporary file and renamed into place, so a reader never sees half of one. The folder is bounded in bytes: past
the bound, the files read or written longest ago go. Without the variable (``streamlit run app.py``) nothing is
shared and nothing is written.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import threading
from pathlib import Path

SHARED_DIR_ENV = "SCHEDULER_LAB_SHARED_DIR"
SHARED_MAX_MIB = 256  # summaries of a few KiB: tens of thousands of runs
PRUNE_EVERY_WRITES = 64  # the folder is measured once this many summaries have been written
MIB_BYTES = 1024 * 1024


class SharedSummaries:
    """Summaries by cache key in folder ``root``, at most ``max_bytes`` in all."""

    def __init__(self, root: Path, max_bytes: int = SHARED_MAX_MIB * MIB_BYTES):
        self.root, self.max_bytes = root, max_bytes
        self._writes = 0
        self._lock = threading.Lock()

    def _path(self, key) -> Path:
        """The file of cache key ``key`` (any value whose JSON is stable: the scenario's text and its version)."""
        digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()
        return self.root / f"{digest}.json"

    def get(self, key):
        """The summary kept for ``key``, or None (none kept, or a file that is not a summary)."""
        path = self._path(key)
        try:
            summary = json.loads(path.read_text(encoding="utf-8"))
            os.utime(path)  # read now: the last to go
        except (OSError, ValueError):
            return None
        return summary if isinstance(summary, dict) else None

    def put(self, key, summary: dict) -> None:
        """Keep ``summary`` for ``key`` (numbers NumPy holds as plain floats); a full disk loses nothing but the
        sharing."""
        try:
            with tempfile.NamedTemporaryFile("w", dir=self.root, suffix=".tmp", delete=False,
                                             encoding="utf-8") as out:
                json.dump(summary, out, default=float)
            os.replace(out.name, self._path(key))
        except OSError:
            return
        with self._lock:
            self._writes += 1
            due = self._writes % PRUNE_EVERY_WRITES == 0
        if due:
            self.prune()

    def prune(self) -> None:
        """Delete the summaries read or written longest ago until the folder holds at most ``max_bytes``."""
        files = []
        for path in self.root.glob("*.json"):
            try:
                stat = path.stat()
            except OSError:  # another process pruned it meanwhile
                continue
            files.append((stat.st_mtime, stat.st_size, path))
        total = sum(size for _, size, _ in files)
        for _, size, path in sorted(files):
            if total <= self.max_bytes:
                break
            path.unlink(missing_ok=True)
            total -= size


def from_environment() -> SharedSummaries | None:
    """The store the launcher named in ``SHARED_DIR_ENV``, or None (one process: nothing to share)."""
    folder = os.environ.get(SHARED_DIR_ENV)
    if not folder or not Path(folder).is_dir():
        return None
    return SharedSummaries(Path(folder))
