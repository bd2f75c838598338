"""Options of the server keys that name a row of a hardware table (GPU, model, weight and KV
formats, serving engine) or a version the measured kernels have (engine version)."""

from __future__ import annotations

from engine.hardware.kernel_tables import table_versions
from engine.scenario.config import Server
from engine.hardware.tables import gpu_names, load_table, tensor_parallel_degrees

TABLE_CHOICES = {
    "gpu": gpu_names,
    "model": lambda: list(load_table("models").index),
    "quant": lambda: list(load_table("quant").index),
    "kv_quant": lambda: list(load_table("kv_quant").index),
    "engine": lambda: list(load_table("engines").index),
}


def options(key: str, server: dict) -> list | None:
    """The choices of server ``key`` (None: its own): the table's rows, for the model the user's own
    (``server.model_config``) after them, and the tensor-parallel degrees the GPU's link domain allows."""
    if key == "tensor_parallel" and server.get("gpu") in gpu_names():
        return list(tensor_parallel_degrees(server["gpu"]))
    if key == "engine_version":  # the newest with measured kernels, or one of theirs on this GPU
        return ["", *table_versions(server.get("gpu", Server.gpu), server.get("engine", Server.engine))]
    choices = TABLE_CHOICES.get(key)
    if choices is None:
        return None
    listed = choices()
    own = (server.get("model_config") or {}).get("name") if key == "model" else None
    return [*listed, own] if own and own not in listed else listed

