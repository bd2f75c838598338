"""The compiled code's on-disk cache falls back to a user folder when the package is read-only."""

import os

from engine.sim import _numba_cache


def test_read_only_package_uses_a_user_cache_folder(monkeypatch, tmp_path):
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(_numba_cache.os, "access", lambda path, mode: False)
    _numba_cache.ensure_cache_dir()
    expected = tmp_path / "scheduler-lab" / "numba"
    assert os.environ["NUMBA_CACHE_DIR"] == str(expected) and expected.is_dir()


def test_writable_package_and_explicit_setting_are_left_alone(monkeypatch, tmp_path):
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    monkeypatch.setattr(_numba_cache.os, "access", lambda path, mode: True)
    _numba_cache.ensure_cache_dir()
    assert "NUMBA_CACHE_DIR" not in os.environ
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(_numba_cache.os, "access", lambda path, mode: False)
    _numba_cache.ensure_cache_dir()
    assert os.environ["NUMBA_CACHE_DIR"] == str(tmp_path)
