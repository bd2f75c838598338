"""A result cache shared by every session of the app, bounded in bytes and in age.

``st.cache_data`` bounds entries, not bytes: 64 results of a million requests each would hold many
GiB for as long as the server runs. This cache drops the least recently used results beyond
``max_bytes`` and any result older than ``max_age_s``, also while no session asks for anything (a
daemon thread sweeps it). Values are shared between sessions as they are (no copy), so callers must not
modify them.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from concurrent.futures import Future
from typing import Callable, Generic, Hashable, TypeVar

V = TypeVar("V")


class ResultCache(Generic[V]):
    """Thread-safe least-recently-used cache with a byte budget (``size_of`` measures a value) and an age
    limit. A key asked for while another thread computes it waits for that result instead of computing it
    again (many sessions opening the same page run each simulation once); if that computation fails (its
    session stopped it, say), each waiter computes the key itself."""

    def __init__(self, max_bytes: int, max_age_s: float, size_of: Callable[[V], int],
                 clock: Callable[[], float] = time.monotonic):
        self._max_bytes, self._max_age_s, self._size_of, self._clock = max_bytes, max_age_s, size_of, clock
        self._entries: OrderedDict[Hashable, tuple[float, int, V]] = OrderedDict()
        self._computing: dict[Hashable, Future] = {}
        self._bytes = 0
        self._lock = threading.Lock()
        self._sweeper: threading.Thread | None = None

    def get(self, key: Hashable) -> V | None:
        """The value kept for ``key`` (now the most recently used), or None."""
        with self._lock:
            self._expire()
            entry = self._entries.get(key)
            if entry is None:
                return None
            self._entries.move_to_end(key)
            return entry[2]

    def known(self, key: Hashable) -> bool:
        """True when ``key``'s value is kept or being computed."""
        with self._lock:
            return key in self._entries or key in self._computing

    def get_or_compute(self, key: Hashable, compute: Callable[[], V]) -> V:
        """The value kept for ``key``, else the one another thread is computing for it, else ``compute()``
        (outside the lock), kept if it fits the budget."""
        value = self.get(key)
        if value is not None:
            return value
        with self._lock:
            running = self._computing.get(key)
            if running is None:
                mine = self._computing[key] = Future()
        if running is not None:
            try:
                return running.result()
            except BaseException:  # noqa: BLE001 - the other computation's failure is not ours: try ourselves
                return self.get_or_compute(key, compute)
        try:
            value = compute()
        except BaseException as exc:
            with self._lock:
                del self._computing[key]
            mine.set_exception(exc)
            raise
        self.put(key, value)
        with self._lock:
            del self._computing[key]
        mine.set_result(value)
        return value

    def put(self, key: Hashable, value: V) -> None:
        size = self._size_of(value)
        with self._lock:
            self._drop(key)
            if size > self._max_bytes:
                return
            self._entries[key] = (self._clock(), size, value)
            self._bytes += size
            while self._bytes > self._max_bytes:
                self._drop(next(iter(self._entries)))
            if self._sweeper is None:
                self._sweeper = threading.Thread(target=self._sweep, name="result-cache-sweeper", daemon=True)
                self._sweeper.start()

    def _sweep(self) -> None:
        """Expire old results every quarter of the age limit, for as long as the process runs."""
        while True:
            time.sleep(max(self._max_age_s / 4, 1.0))
            with self._lock:
                self._expire()

    @property
    def held_bytes(self) -> int:
        with self._lock:
            self._expire()
            return self._bytes

    def __len__(self) -> int:
        with self._lock:
            self._expire()
            return len(self._entries)

    def _expire(self) -> None:
        oldest_allowed = self._clock() - self._max_age_s
        for key in [k for k, (stored, _, _) in self._entries.items() if stored < oldest_allowed]:
            self._drop(key)

    def _drop(self, key: Hashable) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self._bytes -= entry[1]
