"""Options of the server keys that name a row of a hardware table (GPU, model, weight and KV
formats, serving engine)."""

from __future__ import annotations

from engine.hardware.tables import gpu_names, load_table

TABLE_CHOICES = {
    "gpu": gpu_names,
    "model": lambda: list(load_table("models").index),
    "quant": lambda: list(load_table("quant").index),
    "kv_quant": lambda: list(load_table("kv_quant").index),
    "engine": lambda: list(load_table("engines").index),
}
