"""The compiled code's on-disk cache: keyed on every source compiled code can reach (an edited callee in another
module takes effect in the next process), and in a user folder when the package is read-only."""

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

from engine.sim import _numba_cache

ENGINE_DIR = _numba_cache.ENGINE_DIR
REPO = ENGINE_DIR.parent


def test_read_only_package_uses_a_user_cache_folder(monkeypatch, tmp_path):
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(_numba_cache.os, "access", lambda path, mode: False)
    _numba_cache.ensure_cache_dir()
    expected = tmp_path / "scheduler-lab" / "numba" / _numba_cache.sources_key()
    assert os.environ["NUMBA_CACHE_DIR"] == str(expected) and expected.is_dir()


def test_writable_package_and_explicit_setting_get_the_keyed_folder(monkeypatch, tmp_path):
    key = _numba_cache.sources_key()
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    monkeypatch.setattr(_numba_cache, "ENGINE_DIR", tmp_path / "engine")
    monkeypatch.setattr(_numba_cache, "sources_key", lambda: key)
    _numba_cache.ensure_cache_dir()
    assert os.environ["NUMBA_CACHE_DIR"] == str(tmp_path / "engine" / "__pycache__" / "numba" / key)
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "mine"))
    _numba_cache.ensure_cache_dir()
    assert os.environ["NUMBA_CACHE_DIR"] == str(tmp_path / "mine" / key)
    _numba_cache.ensure_cache_dir()  # a process started by this one: the same folder, not one inside it
    assert os.environ["NUMBA_CACHE_DIR"] == str(tmp_path / "mine" / key)


def test_old_keyed_folders_are_pruned_in_the_engines_own_folder_only(monkeypatch, tmp_path):
    """Each edit of a compiled module leaves a keyed folder behind: the most recently used few are kept, anything
    that is not a keyed folder is left alone, and a folder the user gave is never pruned."""
    key = "f" * 16
    own = tmp_path / "engine" / "__pycache__" / "numba"
    old = [own / f"{i:016x}" for i in range(6)]
    for age_s, folder in enumerate(old, start=1):  # old[0] the most recently used
        folder.mkdir(parents=True)
        os.utime(folder, (1e9 - age_s, 1e9 - age_s))
    (own / "notes").mkdir()
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    monkeypatch.setattr(_numba_cache, "ENGINE_DIR", tmp_path / "engine")
    monkeypatch.setattr(_numba_cache, "sources_key", lambda: key)
    _numba_cache.ensure_cache_dir()
    kept = sorted(p.name for p in own.iterdir())
    assert kept == sorted([key, "notes", *(f.name for f in old[:_numba_cache.KEPT_FOLDERS])])
    given = tmp_path / "mine"
    for folder in old:
        (given / folder.name).mkdir(parents=True)
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(given))
    _numba_cache.ensure_cache_dir()
    assert len(list(given.iterdir())) == len(old) + 1


def test_the_key_changes_with_a_compiled_source_only(monkeypatch, tmp_path):
    copy = tmp_path / "engine"
    shutil.copytree(ENGINE_DIR, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(_numba_cache, "ENGINE_DIR", copy)
    key = _numba_cache.sources_key()
    with open(copy / "sim" / "simulate.py", "a") as f:
        f.write("# not compiled\n")
    assert _numba_cache.sources_key() == key
    for module in ("sim/kernel/record.py", "sim/layout.py", "hardware/steptime.py"):
        with open(copy / module, "a") as f:
            f.write("# compiled\n")
        assert _numba_cache.sources_key() != key, module
        key = _numba_cache.sources_key()
    (copy / "sim" / "kernel" / "new_stage.py").write_text("")
    assert _numba_cache.sources_key() != key


def _module_path(name: str) -> Path:
    base = REPO.joinpath(*name.split("."))
    return base / "__init__.py" if base.is_dir() else base.with_suffix(".py")


def _compiled(node: ast.AST) -> bool:
    """True for a function compiled by Numba (decorated with ``njit`` or ``intrinsic``)."""
    return isinstance(node, ast.FunctionDef) and any(
        isinstance(n, ast.Name) and n.id in ("njit", "intrinsic") for d in node.decorator_list for n in ast.walk(d))


def _names_compiled_code_reads(tree: ast.Module) -> set[str]:
    """Names read by the compiled functions and by the module-level statements (constants they may read)."""
    reached = [node for node in tree.body if _compiled(node)]
    reached += [node for node in tree.body if not isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.ImportFrom))]
    return {n.id for node in reached for n in ast.walk(node) if isinstance(n, ast.Name)}


def test_the_key_covers_every_module_compiled_code_reads():
    """Every engine module that defines compiled functions, and every engine module whose names they (or the
    constants beside them) read, is hashed: those values are frozen into the compiled code."""
    hashed = {p for pattern in _numba_cache.COMPILED_SOURCES for p in ENGINE_DIR.glob(pattern)}
    compiled_modules = 0
    for path in ENGINE_DIR.rglob("*.py"):
        tree = ast.parse(path.read_text())
        if not any(_compiled(node) for node in tree.body):
            continue
        compiled_modules += 1
        assert path in hashed, f"{path} defines compiled code but is not in COMPILED_SOURCES"
        read = _names_compiled_code_reads(tree)
        package = path.relative_to(REPO).with_suffix("").parts[:-1]
        for node in tree.body:
            if not (isinstance(node, ast.ImportFrom) and node.level):
                continue
            base = package[:len(package) - node.level + 1] + ((node.module,) if node.module else ())
            for alias in node.names:
                if (alias.asname or alias.name) in read:  # a name of that module, or (from . import x) module x
                    named = _module_path(".".join(base + (alias.name,)))
                    source = named if named.exists() else _module_path(".".join(base))
                    assert source in hashed, f"{path} reads {alias.name} of {source}, not in COMPILED_SOURCES"
    assert compiled_modules >= 10  # the stage modules of the loop, the policies, the step time, the clock


CALLER = "from numba import njit\nfrom callee import value_nb\n\n\n@njit(cache=True)\ndef read_nb():\n" \
         "    return value_nb()\n"
CALLEE = "from numba import njit\n\n\n@njit(cache=True)\ndef value_nb():\n    return {}\n"
RUN = """
import importlib.util, os, sys
from pathlib import Path
spec = importlib.util.spec_from_file_location("cache_module", {module!r})  # not through engine: numba not imported
cache_module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cache_module)
cache_module.ENGINE_DIR = Path({engine!r})
os.environ["NUMBA_CACHE_DIR"] = {cache!r}
cache_module.ensure_cache_dir()
sys.path.insert(0, {kernel!r})
from caller import read_nb
print(read_nb())
"""

def test_an_edited_callee_in_another_module_takes_effect(tmp_path):
    """Numba alone would load the caller's cached code, the old callee compiled into it (the caller's own file
    did not change); keyed on the sources, the next process compiles the edited callee."""
    kernel = tmp_path / "engine" / "sim" / "kernel"
    kernel.mkdir(parents=True)
    (kernel / "caller.py").write_text(CALLER)
    script = RUN.format(module=_numba_cache.__file__, engine=str(tmp_path / "engine"), cache=str(tmp_path / "cache"),
                        kernel=str(kernel))
    seen = []
    for value in (1, 2):
        (kernel / "callee.py").write_text(CALLEE.format(value))  # the same size: only the contents differ
        run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, run.stderr
        seen.append(int(run.stdout.split()[-1]))
    assert seen == [1, 2]


def test_the_loop_also_runs_uncompiled():
    """With NUMBA_DISABLE_JIT=1 the loop is plain Python (bench/bench_engine.py measures what compiling gains):
    the wall-clock check inside it reads Python's monotonic clock, as the compiled intrinsic cannot run there."""
    script = ("import engine; r = engine.simulate(engine.load_scenario('data/scenarios/example.toml', "
              "overrides=['workload.num_requests=30'])); print(r.summary['overall']['completed'])")
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NUMBA_DISABLE_JIT": "1"})
    assert done.returncode == 0 and done.stdout.split()[-1] == "30", done.stderr[-2000:]
