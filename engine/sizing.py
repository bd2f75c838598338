"""Fleet sizing: the same cards as every tensor-parallel x replica shape, simulated on one workload,
with the rental cost of each (the data-parallel versus tensor-parallel trade, 8 x TP1 ... 1 x TP8)."""

from __future__ import annotations

from typing import Callable, Optional

import pandas as pd

from .config import apply_overrides
from .cost import DeploymentCost
from .errors import ScenarioError
from .hardware import TP_DEGREES, gpu_row
from .sweep import run_summary


def shapes(cards: int) -> list[tuple[int, int]]:
    """(tensor_parallel, replicas) pairs that use exactly ``cards`` cards."""
    return [(tp, cards // tp) for tp in TP_DEGREES if cards % tp == 0]


def fleet_shapes(data: dict, cards: int, rental: Optional[DeploymentCost] = None, base_dir: str = ".",
                 run: Callable[[dict], dict] | None = None,
                 progress: Callable[[int, int], None] | None = None) -> pd.DataFrame:
    """One row per shape of ``cards`` cards: overall latency, throughput, utilisation and (with ``rental``,
    priced for ``cards`` cards at its low end) the cost per million output tokens. A shape whose model
    does not fit gets the reason in ``note``. ``run`` maps a scenario dict to its summary (default: a
    fresh simulation; the app passes its cached one)."""
    gpu = data.get("server", {}).get("gpu", "")
    if "parent" in gpu_row(gpu):
        raise ScenarioError(f"server.gpu = {gpu!r} is a slice: slices cannot be split over cards; compare "
                            f"fleet.replicas instead")
    run = run or (lambda d: run_summary(d, base_dir))
    rows = []
    pairs = shapes(cards)
    for i, (tp, replicas) in enumerate(pairs):
        label = f"{replicas} x TP{tp}"
        try:
            summary = run(apply_overrides(data, {"server.tensor_parallel": tp, "fleet.replicas": replicas}))
        except ScenarioError as exc:
            rows.append({"shape": label, "tensor_parallel": tp, "replicas": replicas, "note": str(exc)})
            continue
        finally:
            if progress:
                progress(i + 1, len(pairs))
        o, system = summary["overall"], summary["system"]
        rows.append({
            "shape": label, "tensor_parallel": tp, "replicas": replicas,
            "completed": o["completed"], "timed_out": o["timed_out"], "ttft_p50_ms": o["ttft_ms"]["p50"], "ttft_p99_ms": o["ttft_ms"]["p99"],
            "tpot_mean_ms": o["tpot_ms"]["mean"], "e2e_p99_ms": o["e2e_ms"]["p99"],
            "sla_attainment": o["sla_attainment"], "output_tokens_per_s": o["output_tokens_per_s"],
            "gpu_busy_frac": system["gpu_busy_frac"], "offered_load": system["offered_load"],
            "cost_per_million_output_tokens": rental.per_hour[0] / 3600.0 / o["output_tokens_per_s"] * 1e6
            if rental and o["output_tokens_per_s"] else None,
            "note": "unstable" if system["unstable"] else "",
        })
    return pd.DataFrame(rows)
