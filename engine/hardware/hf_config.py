"""A Hugging Face ``config.json`` read into ``server.model_config`` (the shape ``models.csv`` gives a shipped model).

The keys are read by meaning, not by architecture name, so a new model of a known family needs no code:

- ``num_hidden_layers``, ``hidden_size``, ``num_attention_heads``, ``num_key_value_heads`` (default: the heads),
  ``head_dim`` (default: hidden / heads), ``intermediate_size``, ``vocab_size``, ``tie_word_embeddings``;
- experts: ``num_local_experts`` (Mixtral, gpt-oss, Llama-4), ``num_experts`` (Qwen-MoE) or ``n_routed_experts``
  (DeepSeek, Kimi, GLM), ``num_experts_per_tok``; an expert's width is ``moe_intermediate_size``, else
  ``intermediate_size`` (and a dense layer's width is then ``intermediate_size_mlp``, Llama-4's); shared experts
  ``n_shared_experts``, and one for Llama-4 (a shared expert as wide as the routed ones);
- dense layers of a MoE model: ``first_k_dense_replace`` (DeepSeek), ``mlp_only_layers`` (Qwen-MoE), or the
  layers that ``interleave_moe_layer_step`` / ``decoder_sparse_step`` skip;
- multi-head latent attention (``kv_lora_rank`` present): ``q_lora_rank``, ``qk_nope_head_dim`` (the head
  dimension), ``qk_rope_head_dim``, ``v_head_dim``;
- windowed layers: ``layer_types`` entries ``sliding_attention`` with ``sliding_window`` (gpt-oss, Gemma); every layer
  with ``sliding_window`` unless ``use_sliding_window`` is false (Mistral, Qwen); Llama-4's chunked layers
  (``attention_chunk_size``; the ones ``no_rope_layers`` marks 1, else three in four).

A multimodal config's ``text_config`` is read. Models with state-space or linear-attention layers are refused, as
the step model has no such layers. Every problem is one line naming the config key and the fix.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from pathlib import Path
from typing import Any, Mapping

from ..scenario.caps import MIB
from ..scenario.config import build_model_config, toml_string
from ..scenario.errors import ScenarioError, excerpt
from ..scenario.files import quoted, read_regular
from ..scenario.link import first_not_text
from ..scenario.table_names import names

CONFIG_MAX_BYTES = MIB  # a config.json is a few KiB; anything larger is not one
EXPERT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts")
UNMODELLED_KEYS = {"ssm_cfg": "state-space (Mamba) layers", "mamba_d_state": "state-space (Mamba) layers",
                   "layers_block_type": "state-space (Mamba) layers", "linear_attn_config": "linear-attention layers",
                   "full_attention_interval": "linear-attention layers"}
MAX_CONFIG_INT = 2**31 - 1  # the largest count a config.json field may give (layers, widths, heads, experts)


def read_config_file(path: str | Path) -> dict:
    """The JSON object in regular file ``path`` (at most ``CONFIG_MAX_BYTES``; opened without waiting, so a FIFO or
    a device is one line, ``files.read_regular``), or ``ScenarioError`` in one line."""
    raw = read_regular(path, "--model-config", CONFIG_MAX_BYTES,
                       hint="; a model's config.json is a few KiB: give that file")
    return parse_config(raw, f"--model-config {quoted(path)}")


def parse_config(raw: bytes, where: str = "config.json") -> dict:
    """The JSON object ``raw`` holds, or ``ScenarioError`` naming ``where``: every text in it Unicode text (a lone
    surrogate such as "\\udc80", which JSON allows, would fail the page that shows the model's name)."""
    if len(raw) > CONFIG_MAX_BYTES:
        raise ScenarioError(f"{where} is over {CONFIG_MAX_BYTES // MIB} MiB; a model's config.json is a few KiB: "
                            f"give that file")
    def not_a_number(constant: str) -> None:
        raise ScenarioError(f"{where} holds {constant}, which is not a number a config.json gives; give finite "
                            f"numbers")

    try:
        data = json.loads(raw.decode("utf-8"), parse_constant=not_a_number)
    except ScenarioError:  # a NaN or an Infinity (not_a_number)
        raise
    except UnicodeDecodeError:
        raise ScenarioError(f"{where} is not UTF-8 text; give the model's config.json") from None
    except json.JSONDecodeError as exc:
        raise ScenarioError(f"{where} is not JSON (line {exc.lineno}: {exc.msg}); give the model's config.json") \
            from None
    except ValueError:  # an integer longer than Python converts from text
        raise ScenarioError(f"{where} holds a number of more than {sys.get_int_max_str_digits():,} digits, which is "
                            f"not a size a config.json gives; give the model's config.json") from None
    except RecursionError:
        raise ScenarioError(f"{where} is not JSON (nested too deeply); give the model's config.json") from None
    if not isinstance(data, dict):
        raise ScenarioError(f"{where} holds a JSON {type(data).__name__}, not an object; give the model's "
                            f"config.json")
    problem = first_not_text(data)
    if problem:
        raise ScenarioError(f"{where}: {problem}; remove it (give the model's config.json)")
    return data


def _int(config: Mapping[str, Any], key: str, default: int | None = None) -> int:
    """``config[key]`` as a whole number, ``default`` when absent (None: required)."""
    value = config.get(key)
    if value is None:
        if default is None:
            raise ScenarioError(f"config.json has no {key}; it is required (give the model's own config.json)")
        return default
    if isinstance(value, int) and not isinstance(value, bool):  # any size: compared as an int, never as a float
        whole = 0 <= value <= MAX_CONFIG_INT
        shown = f"{value}" if abs(value) < 10**15 else "a number of more than 15 digits"
    elif isinstance(value, float):
        whole = math.isfinite(value) and 0 <= value <= MAX_CONFIG_INT and value.is_integer()
        shown = f"{value:.6g}"
    else:
        whole, shown = False, excerpt(value)
    if not whole:
        raise ScenarioError(f"config.json {key} = {shown} must be a whole number from 0 to {MAX_CONFIG_INT:,}")
    return int(value)


def _experts(config: Mapping[str, Any]) -> int:
    return next((_int(config, k) for k in EXPERT_KEYS if config.get(k) is not None), 0)


def _dense_layers(config: Mapping[str, Any], layers: int) -> int:
    """Layers of a MoE model whose MLP is dense (module docstring)."""
    if config.get("first_k_dense_replace") is not None:
        return _int(config, "first_k_dense_replace")
    only = config.get("mlp_only_layers")
    if isinstance(only, list) and only:
        if not all(isinstance(i, int) and not isinstance(i, bool) for i in only):
            raise ScenarioError(f"config.json mlp_only_layers = {excerpt(only)} must be a list of layer numbers")
        return len(set(only))
    step = next((_int(config, k) for k in ("interleave_moe_layer_step", "decoder_sparse_step")
                 if config.get(k) is not None), 1)
    return layers - layers // step if step > 1 else 0


def _window(config: Mapping[str, Any], layers: int) -> tuple[int, int]:
    """(window tokens, windowed layers) of ``config`` (module docstring); (0, 0) when every layer sees all."""
    types = config.get("layer_types")
    if isinstance(types, list) and types:
        windowed = sum(1 for t in types if t == "sliding_attention")
        return (_int(config, "sliding_window"), windowed) if windowed else (0, 0)
    if config.get("attention_chunk_size"):  # Llama-4: chunked local attention on the rotary layers
        marks = config.get("no_rope_layers")
        windowed = sum(1 for m in marks if m) if isinstance(marks, list) and marks else layers - layers // 4
        return _int(config, "attention_chunk_size"), windowed
    if config.get("sliding_window") and config.get("use_sliding_window", True):
        return _int(config, "sliding_window"), layers
    return 0, 0


def model_config_from_hf(config: Mapping[str, Any], name: str, source: str = "") -> dict:
    """``server.model_config`` (a dict of every ``ModelConfig`` key) for the Hugging Face ``config`` of model ``name``;
    checked as a scenario checks it. ``ScenarioError`` names the first problem."""
    text = config.get("text_config")
    if isinstance(text, Mapping):
        config = {**config, **text}
    unmodelled = next((why for key, why in UNMODELLED_KEYS.items() if config.get(key) is not None), None)
    if unmodelled:
        raise ScenarioError(f"config.json describes {unmodelled}, which the step model does not have; choose a "
                            f"transformer model")
    layers, hidden = _int(config, "num_hidden_layers"), _int(config, "hidden_size")
    heads = _int(config, "num_attention_heads")
    experts = _experts(config)
    mla = config.get("kv_lora_rank") is not None
    if experts and config.get("moe_intermediate_size") is not None:
        expert_width, dense_width = _int(config, "moe_intermediate_size"), _int(config, "intermediate_size")
    elif experts:  # Mixtral, gpt-oss, Llama-4: intermediate_size is one expert's
        expert_width = _int(config, "intermediate_size")
        dense_width = _int(config, "intermediate_size_mlp", expert_width)
    else:
        expert_width, dense_width = 0, _int(config, "intermediate_size")
    shared = _int(config, "n_shared_experts", 0)
    if experts and not shared and "Llama4" in str(config.get("architectures", "")):  # one shared expert a layer
        shared = 1
    window, windowed = _window(config, layers)
    head_dim = _int(config, "qk_nope_head_dim") if mla else _int(config, "head_dim", hidden // max(heads, 1))
    row = {"name": name, "layers": layers, "hidden": hidden, "heads": heads,
           "kv_heads": heads if mla else _int(config, "num_key_value_heads", heads), "head_dim": head_dim,
           "intermediate": dense_width, "vocab": _int(config, "vocab_size"), "experts": experts,
           "experts_per_token": _int(config, "num_experts_per_tok", 0) if experts else 0,
           "expert_intermediate": expert_width, "shared_experts": shared,
           "dense_layers": _dense_layers(config, layers) if experts else 0,
           "attention": "mla" if mla else "gqa", "tied_embeddings": bool(config.get("tie_word_embeddings", False)),
           "sliding_window": window, "sliding_layers": windowed,
           "qk_norm_all_reduce": bool(config.get("use_qk_norm")) and config.get("qk_norm_type") == "per_layer",
           "source": source[:80]}
    if mla:
        row.update(q_lora_rank=_int(config, "q_lora_rank", 0), kv_lora_rank=_int(config, "kv_lora_rank"),
                   rope_head_dim=_int(config, "qk_rope_head_dim"), v_head_dim=_int(config, "v_head_dim"))
    return dataclasses.asdict(build_model_config(row))  # the scenario's own checks; unset keys at their defaults


def model_name(config: Mapping[str, Any], fallback: str) -> str:
    """A name for the model: its ``_name_or_path``'s last part, else ``fallback`` (the file's name) unless that is
    only "config" (every Hugging Face repository's file: it names nothing), then the model type's ("llama model");
    a shipped model's name gains " (your config)", so the two stay apart."""
    if fallback.strip().lower().split(" ")[0] in ("config", "config.json", ""):
        fallback = f"{config.get('model_type') or 'own'} model"
    named = (str(config.get("_name_or_path") or "").rstrip("/").rsplit("/", 1)[-1] or fallback)[:60]
    return f"{named} (your config)" if named in names("models") else named


def user_model_overrides(config: Mapping[str, Any], fallback_name: str, source: str = "",
                         name: str = "") -> list[str]:
    """The ``--set``-style overrides that serve the model of Hugging Face ``config`` on the roofline step model,
    named ``name`` (else ``model_name``'s)."""
    named = name.strip()[:60] or model_name(config, fallback_name)
    if named in names("models"):
        named += " (your config)"
    row = model_config_from_hf(config, named, source or fallback_name)
    inline = "{" + ", ".join(f"{key} = {toml_string(value) if isinstance(value, str) else json.dumps(value)}"
                             for key, value in row.items()) + "}"
    return ["server.step_model=roofline", f"server.model={toml_string(row['name'])}", f"server.model_config={inline}"]

