"""Calibrations fitted on the user's own benchmark results (``user_calibration``), saved under a name.

Each is a small JSON file in the user's calibration folder (``$SCHEDULER_LAB_CALIBRATIONS``, else
``scheduler-lab/calibrations`` in ``$XDG_DATA_HOME`` or ``~/.local/share``), private to the user running the
server as the trace store is. ``save`` never replaces a calibration of the same name unless asked (the command
line's ``--replace``: the operator's act); the app saves through ``save_new``, under a new name only and at most
``caps.app_calibrations`` of them, since every scenario naming a calibration, anyone's, would change with it. The
shipped ``data/hardware/calibration.csv`` is never written. A scenario picks one with ``server.calibration = "NAME"``;
it then times that GPU family instead of the shipped factors.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from ..scenario.caps import DEFAULT_CAPS
from ..scenario.config import apply_overrides, check_calibration_name, on_roofline
from ..scenario.errors import ScenarioError, excerpt
from ..scenario.files import os_reason
from ..scenario.private_folder import NotPrivateError, ensure_private, write_atomically, write_new
from .tables import Efficiency, gpu_row


def calibration_dir(environ: Mapping[str, str] = os.environ) -> Path:
    """``$SCHEDULER_LAB_CALIBRATIONS``, else ``scheduler-lab/calibrations`` in the user's data folder."""
    data = Path(environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return Path(environ.get("SCHEDULER_LAB_CALIBRATIONS") or data / "scheduler-lab" / "calibrations")


@dataclass(frozen=True)
class UserCalibration:
    """A fit on the user's measurements: the set-up they were measured on (the fit holds for ``gpu``'s family),
    the factors, and how well they fit: in-sample, and on each benchmark run left out of the fit."""

    name: str
    gpu: str
    setup: str                   # "1 x H100-80G, Llama-3-8B, bf16 weights, bf16 KV"
    efficiency: Efficiency
    figures: int                 # measured figures fitted
    files: tuple[str, ...]       # one per benchmark run
    median_abs_error_pct: float  # after the fit, on the figures fitted (in-sample)
    held_out_median_abs_error_pct: float | None  # each run predicted by a fit of the others (two runs or more)
    shipped_median_abs_error_pct: float  # the shipped calibration on the same figures
    created: str

    def quality(self) -> str:
        """How well the fit holds: in-sample, on each run left out, and the shipped calibration's error."""
        checked = (f", {self.held_out_median_abs_error_pct:.1f}% on each run left out of the fit"
                   if self.held_out_median_abs_error_pct is not None else
                   "; one run, so not checked on any other load")
        return (f"median error {self.median_abs_error_pct:.1f}% in-sample{checked} (the shipped calibration: "
                f"{self.shipped_median_abs_error_pct:.0f}%)")

    def badge(self) -> str:
        runs = len(self.files)
        return (f"fitted on your {self.figures} figures from {runs} benchmark run{'s' if runs > 1 else ''} "
                f"('{self.name}', measured on {self.setup}): {self.quality()}")


def _folder() -> Path:
    try:
        return ensure_private(calibration_dir())
    except NotPrivateError as exc:
        raise ScenarioError(f"the calibration folder is not private ({exc}); remove it or set "
                            f"SCHEDULER_LAB_CALIBRATIONS to a private folder") from None


def names() -> list[str]:
    """The saved calibrations, by name."""
    folder = calibration_dir()
    return sorted(p.stem for p in folder.glob("*.json")) if folder.is_dir() else []


def version(name: str) -> str:
    """Which version of the saved calibration ``name`` is on disk now (its modification time and size; "" when
    there is none): results cached for a scenario naming it must also be keyed on this, since replacing a
    calibration keeps its name."""
    try:
        info = (_folder() / f"{check_calibration_name(name)}.json").stat()
    except FileNotFoundError:
        return ""
    return f"{info.st_mtime_ns}:{info.st_size}"


def load(name: str) -> UserCalibration:
    """The saved calibration ``name``; ``ScenarioError`` when there is none. Read once per version of the file
    (every roofline profile of a scenario naming it asks for it)."""
    path = _folder() / f"{check_calibration_name(name)}.json"
    try:
        info = path.stat()
    except FileNotFoundError:
        known = ", ".join(names()) or "none saved yet"
        raise ScenarioError(f"server.calibration = {name!r} is not a saved calibration ({known}); fit one with "
                            f"python -m engine calibrate FILE --gpu NAME --save NAME") from None
    return _read(path, info.st_mtime_ns, info.st_size)


@functools.lru_cache(maxsize=64)
def _read(path: Path, mtime_ns: int, size: int) -> UserCalibration:
    """The calibration in ``path`` as it was at (``mtime_ns``, ``size``)."""
    try:
        data = json.loads(path.read_text())
        return UserCalibration(**{**data, "efficiency": Efficiency(**data["efficiency"]),
                                  "files": tuple(data["files"])})
    except FileNotFoundError:
        return load(path.stem)  # replaced or removed between the stat and the read: look again
    except (ValueError, TypeError, KeyError) as exc:
        raise ScenarioError(f"saved calibration {path.stem!r} cannot be read ({type(exc).__name__}); fit it "
                            f"again") from None


def save(calibration: UserCalibration, replace: bool = False) -> Path:
    """Write ``calibration`` whole; an existing one of the same name only when ``replace`` (the operator's act)."""
    path = _folder() / f"{check_calibration_name(calibration.name)}.json"
    data = {**dataclasses.asdict(calibration), "efficiency": dataclasses.asdict(calibration.efficiency)}
    content = json.dumps(data, indent=1).encode()
    try:
        if replace:
            write_atomically(path, content)
        elif not write_new(path, content):
            raise ScenarioError(f"a calibration named {excerpt(calibration.name, 70)} exists; choose another name or "
                                f"replace it, which is the operator's act: python -m engine calibrate FILE --gpu NAME "
                                f"--save NAME --replace")
    except OSError as exc:  # a full disk, a folder that takes no links
        raise ScenarioError(f"calibration {excerpt(calibration.name, 70)} could not be saved "
                            f"({os_reason(exc)})") from None
    return path


def save_new(calibration: UserCalibration) -> Path:
    """Write ``calibration`` as a visitor of the app may: under a name not saved yet, and only while fewer than
    ``caps.app_calibrations`` are saved."""
    limit = DEFAULT_CAPS.app_calibrations  # checked before each save: saves racing at the limit may each pass it
    if len(names()) >= limit:
        raise ScenarioError(f"the app keeps at most {limit:,} saved calibrations and that many are saved; "
                            f"use a saved one, or ask the operator to remove some or to save yours: python -m engine "
                            f"calibrate FILE --gpu NAME --save NAME")
    return save(calibration)


def holds_for(name: str, gpu: str) -> bool:
    """True when ``name`` is a saved calibration of ``gpu``'s family."""
    try:
        saved_for(name, gpu)
    except ScenarioError:
        return False
    return True


def with_gpu(data: dict, gpu: str) -> dict:
    """Scenario ``data`` on ``gpu`` (the roofline step model), keeping its saved calibration only when that
    times ``gpu``'s family: a search over GPUs times each of the others with the shipped calibration."""
    moved = apply_overrides(on_roofline(data), {"server.gpu": gpu})
    name = moved["server"].get("calibration")
    if name and not holds_for(name, gpu):
        del moved["server"]["calibration"]
    return moved


def saved_for(name: str, gpu: str) -> UserCalibration:
    """The saved calibration ``name``, checked to hold for ``gpu`` (fitted on a GPU of its family)."""
    saved = load(name)
    fitted_family, family = gpu_row(saved.gpu)["family"], gpu_row(gpu)["family"]
    if fitted_family != family:
        raise ScenarioError(f"server.calibration = {saved.name!r} was fitted on {saved.gpu} ({fitted_family} family) "
                            f"and cannot time {gpu} ({family}); choose another calibration or GPU")
    return saved


