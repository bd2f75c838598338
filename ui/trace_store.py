"""The app's trace store: uploaded traces the Lab may replay, named by the hash of their content.

An upload is validated in memory first (``engine.sim.traces.read_trace_bytes``); only a valid trace is
written, atomically (a temporary file renamed into place), so a half-written or invalid file is never
visible under a store name. The store keeps at most ``caps.upload_store_mib`` MiB: traces older than
``caps.upload_store_s`` go first, then the least recently used. Scenarios from links and uploads may only
name files of this folder (``engine.scenario.origin.Origin`` with ``trace_names_only``).

The folder is ``$SCHEDULER_LAB_TRACE_STORE``, else ``scheduler-lab/traces`` in the user's cache folder
(``$XDG_CACHE_HOME`` or ``~/.cache``). It must be private to the user running the server (created with
mode 0700; a folder that another user owns or can write to is refused), so that nobody else can plant a
file, or a link to one, under a store name.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Mapping

import engine
from engine.scenario.caps import DEFAULT_CAPS, MIB, Caps
from engine.scenario.origin import STORED_TRACE_SUFFIXES, Origin, stored_trace_name
from engine.scenario.private_folder import PARTIAL_PREFIX, NotPrivateError, ensure_private, write_atomically

def store_dir(environ: Mapping[str, str] = os.environ) -> Path:
    """``$SCHEDULER_LAB_TRACE_STORE``, else ``scheduler-lab/traces`` in the user's cache folder."""
    cache = Path(environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return Path(environ.get("SCHEDULER_LAB_TRACE_STORE") or cache / "scheduler-lab" / "traces")


STORE_DIR = store_dir()
APP_ORIGIN = Origin(trace_dir=str(STORE_DIR), trace_names_only=True, caps=DEFAULT_CAPS)
LOG = logging.getLogger(__name__)
_PARTIAL_MAX_AGE_S = 3600.0


class StoreError(engine.ScenarioError):
    """The store folder is not private to this server's user."""


def private_folder() -> Path:
    """The store folder, created private (0700) if missing; ``StoreError`` if another user owns it or may
    write to it."""
    try:
        return ensure_private(STORE_DIR)
    except NotPrivateError as exc:
        LOG.error("trace store: %s", exc)
        raise StoreError("the server's trace store folder is not private to the user running it, so uploaded "
                         "traces are off; its operator should remove the folder or set SCHEDULER_LAB_TRACE_STORE "
                         "to a private one") from None


def touch(name: str) -> None:
    """Mark a stored trace as used now (the store removes the least recently used first)."""
    try:
        os.utime(private_folder() / name, follow_symlinks=False)
    except FileNotFoundError:
        pass


def store(content: bytes, suffix: str, caps: Caps = DEFAULT_CAPS) -> str:
    """Write a validated trace into the store (atomically; a trace already there only has its time
    refreshed) and return its store name; then keep the store within its quota."""
    name = stored_trace_name(content, suffix)
    target = private_folder() / name
    if target.is_file():
        touch(name)
    else:
        write_atomically(target, content)
    prune(caps, keep=name)
    return name


def prune(caps: Caps = DEFAULT_CAPS, keep: str | None = None) -> None:
    """Remove traces older than ``caps.upload_store_s``, then the least recently used until the store holds
    at most ``caps.upload_store_mib`` MiB (never ``keep``); and partial writes left by a crash. Runs when a
    trace is stored and when a session starts."""
    now = time.time()
    entries = []
    for path in private_folder().glob("*"):
        try:
            info = path.lstat()
        except FileNotFoundError:  # removed meanwhile by another session
            continue
        if path.name.startswith(PARTIAL_PREFIX):
            if now - info.st_mtime > _PARTIAL_MAX_AGE_S:
                path.unlink(missing_ok=True)
            continue
        if path.suffix not in STORED_TRACE_SUFFIXES or path.name == keep:
            continue
        if now - info.st_mtime > caps.upload_store_s:
            path.unlink(missing_ok=True)
        else:
            entries.append((info.st_mtime, info.st_size, path))
    total = sum(size for _, size, _ in entries) + _size(STORE_DIR / keep if keep else None)
    for _, size, path in sorted(entries):
        if total <= caps.upload_store_mib * MIB:
            break
        path.unlink(missing_ok=True)
        total -= size


def _size(path: Path | None) -> int:
    try:
        return path.stat().st_size if path else 0
    except FileNotFoundError:
        return 0
