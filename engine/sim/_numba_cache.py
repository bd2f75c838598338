"""Make Numba's on-disk cache work when the package folder is read-only.

Numba writes compiled functions (``cache=True``) next to the source in
``__pycache__``. When that folder is not writable (installed read-only, shared
checkout) and ``NUMBA_CACHE_DIR`` is unset, point it at a per-user cache folder
so a second process still starts without recompiling. Must run before numba
is imported.
"""

import os
from pathlib import Path


def ensure_cache_dir() -> None:
    if os.environ.get("NUMBA_CACHE_DIR"):
        return
    engine_dir = Path(__file__).resolve().parents[1]  # compiled functions live in several of its sub-packages
    folders = [engine_dir, *(d for d in engine_dir.iterdir() if (d / "__init__.py").exists())]
    targets = [f / "__pycache__" if (f / "__pycache__").exists() else f for f in folders]
    if not all(os.access(target, os.W_OK) for target in targets):
        fallback = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "scheduler-lab" / "numba"
        fallback.mkdir(parents=True, exist_ok=True)
        os.environ["NUMBA_CACHE_DIR"] = str(fallback)
