"""Numba's on-disk cache: never stale after an edit, and usable when the package folder is read-only.

Numba keys a cached function (``cache=True``) on its own source file only. A cached function that calls or
inlines a compiled function of another module, or reads another module's constant (frozen into its code), is not
recompiled when that other module changes: the next process silently runs the old code. The compiled loop spans
the stage modules of ``kernel/`` and what they call, so the cache folder is keyed on the sources of every module
compiled code can reach (``COMPILED_SOURCES``): an edit to any of them starts a fresh folder, where everything
compiles once more (editing any other module keeps the cache).

The keyed folders live under ``NUMBA_CACHE_DIR`` when it is set, else in the package's ``__pycache__``, else (a
read-only package: installed, shared checkout) in a per-user cache folder, so a second process still starts
without compiling. In those two folders of its own, the engine keeps the ``KEPT_FOLDERS`` most recently used keyed
folders besides the current one (each edit of a compiled module leaves one behind, a few MiB); a folder given by
``NUMBA_CACHE_DIR`` is never pruned. Must run before numba is imported (it reads ``NUMBA_CACHE_DIR`` then).
"""

import hashlib
import os
import re
import shutil
from pathlib import Path

ENGINE_DIR = Path(__file__).resolve().parents[1]
# Every module whose code or constants compiled code can reach, relative to ENGINE_DIR: the modules that define
# compiled functions and those they import names from (tests/test_numba_cache.py checks it against the imports).
COMPILED_SOURCES = ("sim/kernel/*.py", "sim/policies.py", "sim/monotonic.py", "sim/layout.py", "hardware/steptime.py",
                    "scenario/registry.py")


KEPT_FOLDERS = 3  # older keyed folders kept: a few versions side by side (branches, checkouts sharing a user cache)
KEY_PATTERN = re.compile(r"[0-9a-f]{16}")


def sources_key() -> str:
    """16 hex digits of a digest of the compiled modules' paths and sources."""
    digest = hashlib.sha256()
    for pattern in COMPILED_SOURCES:
        for path in sorted(ENGINE_DIR.glob(pattern)):
            digest.update(path.relative_to(ENGINE_DIR).as_posix().encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def _can_write(folder: Path) -> bool:
    """True when ``folder`` is writable, or can be made (its nearest existing parent is writable)."""
    while not folder.exists():
        folder = folder.parent
    return os.access(folder, os.W_OK)


def ensure_cache_dir() -> None:
    """Point ``NUMBA_CACHE_DIR`` at the folder keyed on the compiled sources (``sources_key``), made if need be; a
    process started by one that did this (the variable already ends in the key) keeps it."""
    key = sources_key()
    given = os.environ.get("NUMBA_CACHE_DIR")
    if given and Path(given).name == key:
        return
    if given:
        root = Path(given)
    elif _can_write(ENGINE_DIR / "__pycache__" / "numba"):
        root = ENGINE_DIR / "__pycache__" / "numba"
    else:
        root = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "scheduler-lab" / "numba"
    folder = root / key
    folder.mkdir(parents=True, exist_ok=True)
    os.utime(folder)  # used now: the pruning keeps the most recently used
    if not given:
        prune(root, folder)
    os.environ["NUMBA_CACHE_DIR"] = str(folder)


def prune(root: Path, current: Path) -> None:
    """Remove the keyed folders under ``root`` beyond the ``KEPT_FOLDERS`` most recently used besides ``current``
    (any other entry is left alone; one that vanishes meanwhile, or cannot be removed, is skipped)."""
    others = []
    for entry in root.iterdir():
        try:
            if entry != current and entry.is_dir() and KEY_PATTERN.fullmatch(entry.name):
                others.append((entry.stat().st_mtime, entry))
        except OSError:
            continue
    for _, entry in sorted(others, reverse=True)[KEPT_FOLDERS:]:
        shutil.rmtree(entry, ignore_errors=True)
