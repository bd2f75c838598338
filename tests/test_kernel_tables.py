"""Step times from measured operator tables (``engine.hardware.kernel_tables``, ``steptime.TABLE``): the tables give
the package's own iteration times at their grid points, interpolate linearly between them, are cached on disk
without changing a bit, and every server they do not cover is timed by the roofline, said as such."""

import concurrent.futures
import dataclasses
import json
import logging
import os
import pathlib
import time
import types

import numpy as np
import pandas as pd
import pytest

import engine
from engine.hardware import kernel_tables
from engine.hardware.kernel_tables import coverage, iteration_host_s, operator_tables, table_step
from engine.hardware.roofline import peak_profile, roofline_profile, roofline_step_params
from engine.hardware.steptime import (CONTEXT_AXIS, PREFILL_AXIS, SEQUENCES_AXIS, ST_FIELDS, ST_MODEL, TABLE,
                                      TABLE_FIELDS, TOKENS_AXIS, T_DECODE_ATTENTION, T_DENSE, T_LOGITS,
                                      T_PREFILL_ATTENTION, decode_step_s_nb, prefill_s, prefill_step_s_nb,
                                      step_terms_nb, table_1d_nb, table_2d_nb)
from engine.hardware.tables import load_table
from engine.scenario.caps import DEFAULT_CAPS
from engine.scenario.config import ModelConfig, Server
from engine.scenario.errors import ScenarioError
from engine.sim.simulate import server_step

H100_8B = Server(step_model="roofline", gpu="H100-80G", model="Llama-3.1-8B", quant="fp16", engine="vllm")


def handle(server: Server):
    return kernel_tables._engine_handle(coverage(server).key)


@pytest.mark.parametrize("batch, context", [(1, 1024), (8, 4096), (64, 1024), (256, 16384)])
def test_a_decode_at_grid_points_is_the_packages_own_decode_step(batch, context):
    """decode_step_latency(B, C - 1, 1) evaluates the decode ops at a context of C: the table's dense, LM-head and
    decode-attention parts add up to it exactly where B and C sit on the grid, with the engine's host time per
    iteration beside it (``engine_costs.csv``)."""
    step = server_step(H100_8B)
    assert step[ST_MODEL] == TABLE
    ours = (decode_step_s_nb(step, batch, context - 1) - iteration_host_s(H100_8B.engine)) * 1e3
    assert ours == pytest.approx(handle(H100_8B).decode_step_latency(batch, context - 1, 1), rel=1e-9)


@pytest.mark.parametrize("prompt", [512, 2048, 8192])
def test_a_prefill_is_the_packages_own_prefill_to_a_hundredth_of_a_percent(prompt):
    """A prompt alone: dense ops on its tokens, the LM head once, attention at its mean context (P + 1) / 2, read
    between two context grid points (the only gap from the package's figure)."""
    ours = (prefill_s(server_step(H100_8B), prompt) - iteration_host_s(H100_8B.engine)) * 1e3
    assert ours == pytest.approx(handle(H100_8B).predict_prefill_latency(1, prompt), rel=1e-4)


def test_a_chunk_on_a_cached_prefix_runs_its_gemms_on_its_own_tokens_and_attends_to_the_prefix():
    """512 new tokens on 1,536 cached: the dense part of 512 tokens and the attention kernel at that prefix (the
    package's evaluation of the attention op, read between grid points within 2%)."""
    h, step = handle(H100_8B), server_step(H100_8B)
    names = kernel_tables._op_names(h.evaluate_context_ops)
    attention = [i for i, n in enumerate(names) if "attention" in n]
    dense = [i for i, n in enumerate(names) if "attention" not in n and "logits" not in n]
    logits = [i for i, n in enumerate(names) if "logits" in n]
    expected = (sum(r[1] for r in h.evaluate_context_ops(dense, batch_size=1, s=512, x=512))
                + sum(r[1] for r in h.evaluate_context_ops(logits, batch_size=1, s=1, x=1))
                + sum(r[1] for r in h.evaluate_context_ops(attention, batch_size=1, s=2048, prefix=1536)))
    assert prefill_step_s_nb(step, 512.0, 1536.0) * 1e3 == pytest.approx(expected, rel=0.02)


def test_tables_interpolate_linearly_between_powers_of_two_and_extrapolate_the_last_segment():
    row = np.zeros(TABLE_FIELDS)
    row[T_DENSE:T_DENSE + len(TOKENS_AXIS)] = 3.0 * TOKENS_AXIS + 1.0  # linear in tokens: read exactly anywhere
    for tokens in (1.0, 3.0, 1000.0, 131_072.0, 500_000.0):
        assert table_1d_nb(row, T_DENSE, 0, len(TOKENS_AXIS), tokens) == pytest.approx(3.0 * tokens + 1.0)
    assert table_1d_nb(row, T_DENSE, 0, len(TOKENS_AXIS), 0.5) == 4.0  # below the first point: its value
    grid = np.add.outer(2.0 * SEQUENCES_AXIS, 5.0 * CONTEXT_AXIS)  # bilinear: a plane is read exactly
    row[T_DECODE_ATTENTION:T_DECODE_ATTENTION + grid.size] = grid.ravel()
    for sequences, context in ((3.0, 100.0), (1.0, 16.0), (2048.0, 262_144.0), (700.0, 5000.0)):
        assert table_2d_nb(row, T_DECODE_ATTENTION, 0, len(SEQUENCES_AXIS), 4, len(CONTEXT_AXIS), sequences,
                           context) == pytest.approx(2.0 * sequences + 5.0 * context)
    assert T_PREFILL_ATTENTION + len(PREFILL_AXIS) * len(CONTEXT_AXIS) == TABLE_FIELDS
    assert T_LOGITS == T_DENSE + len(TOKENS_AXIS) and T_DENSE == ST_FIELDS


def test_the_disk_cache_gives_the_built_tables_bit_for_bit(tmp_path, monkeypatch):
    key = coverage(H100_8B).key
    built = kernel_tables.build_tables(key)
    monkeypatch.setattr(kernel_tables, "_cache_dir", lambda: tmp_path)
    operator_tables.cache_clear()
    try:
        first = operator_tables(key)
        assert len(list(tmp_path.glob("*.npy"))) == 1
        operator_tables.cache_clear()
        again = operator_tables(key)  # read back from the file
    finally:
        operator_tables.cache_clear()
    np.testing.assert_array_equal(first, built)
    np.testing.assert_array_equal(again, built)


@pytest.mark.parametrize("changes, words", [
    ({"gpu": "MI300X"}, "Roofline estimate (no measured operator tables for MI300X)"),
    ({"engine": "legacy"}, "Roofline estimate (no measured operator tables for the engine legacy)"),
    ({"engine_version": "0.7.3"}, "Roofline estimate (vLLM 0.7.3 has no operator tables on H100-80G; they have "
                                  "0.24.0)"),
    ({"kernel_tables": "off"}, "Roofline estimate (measured kernels switched off)"),
    ({"kv_quant": "int4"}, "Roofline estimate (weights fp16 with KV int4 have no operator tables for Llama-3.1-8B)"),
    ({"model": "GLM-4.5", "quant": "fp8", "tensor_parallel": 8},
     "Roofline estimate (GLM-4.5: shared experts or dense layers beside grouped-query experts are not expressible"),
])
def test_a_server_the_tables_do_not_cover_is_timed_by_the_roofline_and_says_why(changes, words):
    server = Server(**{**H100_8B.__dict__, **changes})
    covered = coverage(server)
    assert covered.key is None and covered.words.startswith(words)
    np.testing.assert_array_equal(server_step(server), roofline_step_params(roofline_profile(server)))


def test_a_covered_server_names_the_engine_version_and_the_package():
    assert coverage(H100_8B).words == "measured kernels: vLLM 0.24.0 on H100-80G (aiconfigurator-core 0.12.0)"
    a100 = Server(**{**H100_8B.__dict__, "gpu": "A100-80G"})
    assert coverage(a100).words.startswith("measured kernels: vLLM 0.14.0 on A100-80G")
    pinned = Server(**{**H100_8B.__dict__, "engine_version": "0.24.0"})
    assert coverage(pinned).key == coverage(H100_8B).key  # the newest, named: the same tables


def test_a_users_copy_of_a_bundled_model_gets_the_bundled_tables():
    """gpt-oss's 128-token windows are expressible only by the package's own config: a user's model of the same
    shape is timed by it too (else a copy would run differently from the row it copies)."""
    shipped = Server(step_model="roofline", gpu="H100-80G", model="gpt-oss-20b", quant="mxfp4-w4a16")
    assert coverage(shipped).key.model_config == "openai/gpt-oss-20b"
    row = load_table("models").loc["gpt-oss-20b"]
    shape = {f.name: type(f.default)(row[f.name]) if f.default is not dataclasses.MISSING else int(row[f.name])
             for f in dataclasses.fields(ModelConfig) if f.name not in ("name", "source")}
    copy = Server(step_model="roofline", gpu="H100-80G", model="mine", quant="mxfp4-w4a16",
                  model_config=ModelConfig(name="mine", **shape))
    assert coverage(copy).key == coverage(shipped).key


def test_an_engine_version_that_is_not_one_is_one_line():
    with pytest.raises(ScenarioError, match=r"server.engine_version = 'latest!' is not a version; give one such as "
                                            r"0.24.0"):
        engine.load_scenario("data/scenarios/example.toml", overrides=["server.engine_version=latest!"])


def test_utilisation_under_measured_kernels_is_the_roofline_work_over_the_measured_time(tmp_path):
    """One prompt of 512 tokens alone: its FLOPs (the roofline's count) over the peak, divided by the iteration's
    measured time."""
    from conftest import trace_scenario
    from test_window import ROOFLINE
    scenario = trace_scenario(tmp_path, [(0.0, 512, 1)], {**ROOFLINE, "gpu": "H100-80G", "model": "Llama-3.1-8B"})
    system = engine.simulate(scenario).summary["system"]
    step = server_step(scenario.server)
    assert step[ST_MODEL] == TABLE
    profile = roofline_profile(scenario.server)
    peak = peak_profile(scenario.server, 1)
    compute_s = step_terms_nb(step, 512, 512 * 513 / 2.0, 0.0)[0]
    flops = compute_s * profile.effective_flops_per_s
    assert system["compute_util_frac"] == pytest.approx(flops / (peak.effective_flops_per_s * prefill_s(step, 512)),
                                                        rel=1e-12)


def test_the_measured_kernels_change_the_run_and_switching_them_off_gives_the_roofline_back():
    base = ["workload.num_requests=200", "server.step_model=roofline", "server.gpu=H100-80G",
            "server.model=Llama-3.1-8B"]
    preset = "data/scenarios/chat_and_batch_a100_8b.toml"
    measured = engine.simulate(engine.load_scenario(preset, overrides=base)).summary
    roofline = engine.simulate(engine.load_scenario(preset, overrides=[*base, "server.kernel_tables=off"])).summary
    on_mi300 = [*base, "server.gpu=MI300X"]
    auto = engine.simulate(engine.load_scenario(preset, overrides=on_mi300)).summary
    off = engine.simulate(engine.load_scenario(preset, overrides=[*on_mi300, "server.kernel_tables=off"])).summary
    assert measured["overall"]["tpot_ms"] != roofline["overall"]["tpot_ms"]
    assert {**auto, "run": None} == {**off, "run": None}


def test_fp8_is_per_tensor_for_a_dense_checkpoint_and_block_scaled_for_a_mixture_of_experts():
    """kernel_names.csv: a dense FP8 checkpoint is per-tensor scaled with static activation scales, as the package
    resolves one (``fp8_static``); DeepSeek's, Qwen3's and MiniMax's FP8 checkpoints scale 128 x 128 blocks in every
    layer."""
    dense = Server(**{**H100_8B.__dict__, "quant": "fp8"})
    moe = Server(step_model="roofline", gpu="H200", model="DeepSeek-V3", quant="fp8", engine="sglang",
                 tensor_parallel=8)
    assert (coverage(dense).key.gemm, coverage(dense).key.moe) == ("fp8_static", "fp8")
    assert (coverage(moe).key.gemm, coverage(moe).key.moe) == ("fp8_block", "fp8_block")
    assert coverage(moe).key.model_config == "deepseek-ai/DeepSeek-V3"  # bundled: the package's own config


def test_vllm_block_scaled_gemms_are_timed_on_its_per_tensor_fp8_table_and_the_reason_still_holds():
    """kernel_names.csv ``gemm_stand_in``: vLLM 0.24.0's fp8_block GEMM table is mostly host time, so a mixture-of-
    experts FP8 checkpoint on vLLM times its non-expert GEMMs on vLLM's fp8 table (its experts keep fp8_block) and
    says so; SGLang keeps its own. The reason is read from the package's tables: should a new package fix them, this
    turns red and the row goes."""
    vllm = Server(step_model="roofline", gpu="B200", model="MiniMax-M2.5", quant="fp8", engine="vllm",
                  tensor_parallel=4)
    sglang = dataclasses.replace(vllm, engine="sglang")
    assert (coverage(vllm).key.gemm, coverage(vllm).key.moe) == ("fp8", "fp8_block")
    assert "block-scaled FP8 GEMMs timed on its per-tensor FP8 table" in coverage(vllm).words
    assert (coverage(sglang).key.gemm, coverage(sglang).key.moe) == ("fp8_block", "fp8_block")
    data = kernel_tables.systems_dir() / "data"
    stand_ins = load_table("kernel_names").loc[["gemm_stand_in"]]
    for name, kernel in zip(stand_ins["name"], stand_ins["kernel"]):
        backend, version, measured = name.split()
        assert {measured, kernel} <= set(kernel_tables.MODE_WORDS), "the answer names both tables in words"
        for system in ("h100_sxm", "h200_sxm", "b200_sxm", "b300_sxm"):
            table = pd.read_parquet(data / system / "gemm" / backend / version / "gemm_perf.parquet")
            one_row = table[(table.m == 1) & (table.n == 6144) & (table.k == 3072)].set_index("gemm_dtype").latency
            assert one_row[measured] > 3 * one_row["fp8"] and one_row[measured] > 3 * one_row["bfloat16"], system


def test_vllm_times_mxfp4_experts_with_16_bit_activations_as_its_kernel_for_gpt_oss_on_blackwell_is_measured():
    """kernel_names.csv ``moe_for_engine``: vLLM runs gpt-oss's MXFP4 experts on Blackwell with BF16 activations by
    default, and the package files that kernel under w4a16_mxfp4; SGLang and TensorRT-LLM keep w4a8_mxfp4_mxfp8. The
    package's own vLLM table names the kernel: a package that moves it turns this red."""
    vllm = Server(step_model="roofline", gpu="B200", model="gpt-oss-120b", quant="mxfp4", engine="vllm",
                  tensor_parallel=2)
    assert coverage(vllm).key.moe == "w4a16_mxfp4"
    assert coverage(dataclasses.replace(vllm, engine="sglang")).key.moe == "w4a8_mxfp4_mxfp8"
    assert coverage(dataclasses.replace(vllm, engine="tensorrt-llm", tensor_parallel=1)).key.moe == "w4a8_mxfp4_mxfp8"
    version = coverage(vllm).key.version
    for system in ("b200_sxm", "b300_sxm"):
        table = pd.read_parquet(kernel_tables.systems_dir() / "data" / system / "moe" / "vllm" / version
                                / "moe_perf.parquet")
        gpt_oss = table[(table.hidden_size == 2880) & (table.num_experts == 128) & (table.topk == 4)]
        assert set(gpt_oss.moe_dtype) == {"w4a16_mxfp4"}, system
        assert gpt_oss.kernel_source.str.contains("mxfp4_bf16").any(), system


def test_the_versions_the_tables_have_are_kept_on_disk_so_a_process_need_not_load_the_package(tmp_path, monkeypatch):
    monkeypatch.setattr(kernel_tables, "_cache_dir", lambda: tmp_path)
    kernel_tables.version_slots.cache_clear()
    try:
        assert kernel_tables.version_slots("h100_sxm", "vllm") == {"current": "0.24.0"}
        kernel_tables.version_slots.cache_clear()
        import aiconfigurator_core.sdk.perf_database as database
        monkeypatch.setattr(database, "get_version_slots", lambda *_: pytest.fail("asked the package again"))
        assert kernel_tables.version_slots("h100_sxm", "vllm") == {"current": "0.24.0"}
    finally:
        kernel_tables.version_slots.cache_clear()


def test_a_dense_fp8_checkpoint_takes_the_dynamic_table_where_the_package_cannot_derive_the_static_one(monkeypatch):
    """The package derives static FP8 GEMMs from its dynamic ones and their scale kernels; where it lacks those for a
    backend and GPU it refuses the static mode, and the dynamic table prices the server (not the roofline)."""
    built = kernel_tables.operator_tables

    def without_static(key):
        if key.gemm == kernel_tables.STATIC_FP8:
            raise ValueError("no compute_scale data")
        return built(key)

    monkeypatch.setattr(kernel_tables, "operator_tables", without_static)
    server = Server(**{**H100_8B.__dict__, "quant": "fp8", "engine": "sglang"})  # not in coverage's cache yet
    kernel_tables.coverage.cache_clear()
    try:
        assert (coverage(server).key.gemm, coverage(server).key.moe) == ("fp8", "fp8")
    finally:
        kernel_tables.coverage.cache_clear()


def test_a_query_key_norm_over_all_heads_adds_an_all_reduce_to_every_layer():
    """MiniMax-M2 normalises queries and keys over all 48 heads at once: with its heads split over 4 cards, each of
    its 62 layers all-reduces two FP32 numbers a token (vLLM's and SGLang's tensor-parallel q/k norm), which the
    package's op list lacks. The tables add it, timed on the package's own all-reduce; the roofline adds a latency a
    layer. One card, or data-parallel attention, has none."""
    minimax = dict(step_model="roofline", gpu="B200", model="MiniMax-M2.5", quant="fp8", engine="vllm")
    tp4 = coverage(Server(**minimax, tensor_parallel=4)).key
    assert (tp4.qk_norm_layers, tp4.hidden) == (62, 3072)
    assert coverage(Server(**minimax, tensor_parallel=1)).key.qk_norm_layers == 0
    dep = Server(**minimax, tensor_parallel=4, expert_parallel=True, attention_data_parallel=True)
    assert coverage(dep).key.qk_norm_layers == 0
    with_norm = operator_tables(tp4)
    without = operator_tables(dataclasses.replace(tp4, qk_norm_layers=0, hidden=0))
    handle = kernel_tables._engine_handle(tp4)
    all_reduce = [kernel_tables._op_names(handle.evaluate_context_ops).index("context_embedding_ar")]
    one_token_s = kernel_tables._ms(handle.evaluate_context_ops(all_reduce, batch_size=1, s=1, x=1)) / 1000.0
    i = list(TOKENS_AXIS).index(64)  # 64 tokens: 512 B of statistics, within one token's 6 KiB of activations
    assert with_norm[i] - without[i] == pytest.approx(62 * one_token_s)
    latency_s = float(load_table("gpus").loc["B200", "allreduce_latency_us"]) * 1e-6
    assert peak_profile(Server(**minimax, tensor_parallel=4), 4).comm_fixed_s == pytest.approx(3 * 62 * latency_s)
    assert peak_profile(dep, 4).comm_fixed_s == 0.0


# --------------------------------------------------------------------------- the disk cache: bounded and checked
# These build no table: ``build_tables`` is replaced by a synthetic valid table (and, for a shape the package does
# not bundle, the model folder the package's compile would read), so thousands of entries cost milliseconds.

def synthetic_table(n: int) -> np.ndarray:
    return np.linspace(1e-4, 2e-2, kernel_tables.TABLE_CELLS) * (1.0 + n / 1000.0)


def own_key(layers: int, tensor_parallel: int = 1) -> kernel_tables.KernelKey:
    """A key of a user's own shape (not one of models.csv): layers make it distinct."""
    config = {"architectures": ["LlamaForCausalLM"], "num_hidden_layers": layers, "hidden_size": 1000,
              "num_attention_heads": 10, "num_key_value_heads": 10, "head_dim": 100, "intermediate_size": 3000,
              "vocab_size": 1000, "max_position_embeddings": 4096, "tie_word_embeddings": False}
    return kernel_tables.KernelKey("h100_sxm", "vllm", "0.24.0", json.dumps(config, sort_keys=True),
                                   tensor_parallel, 1, 1, 1, "bfloat16", "bfloat16", "bfloat16")


def shipped_key(tensor_parallel: int, model: str = "Llama-3.1-8B") -> kernel_tables.KernelKey:
    """A key of a models.csv model, written out as coverage writes one the package does not bundle."""
    config = json.dumps(kernel_tables.model_config_json(load_table("models").loc[model]), sort_keys=True)
    return dataclasses.replace(own_key(1, tensor_parallel), model_config=config)


BUNDLED = dataclasses.replace(own_key(1), model_config="openai/gpt-oss-20b")  # the package's own config, by name


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty disk cache in ``tmp_path`` under ``caps`` (set with ``cache.limit``), its tables built at once and
    counted (``cache.builds``)."""
    monkeypatch.setattr(kernel_tables, "_cache_dir", lambda: tmp_path)
    builds = []

    def build(key):
        builds.append(key)
        if key.model_config.startswith("{"):
            kernel_tables.model_folder(key.model_config)  # as the package's compile reads it
        return synthetic_table(len(builds))

    monkeypatch.setattr(kernel_tables, "build_tables", build)
    operator_tables.cache_clear()
    state = types.SimpleNamespace(root=tmp_path, builds=builds, limit=lambda **caps: monkeypatch.setattr(
        kernel_tables, "DEFAULT_CAPS", dataclasses.replace(DEFAULT_CAPS, **caps)))
    yield state
    operator_tables.cache_clear()


def kept(root) -> dict[str, list]:
    """The cache's tables and model folders by part, and every file in it."""
    return {"shipped": [*root.glob("*.npy"), *root.glob("models/*")],
            "own": [*root.glob("own/*.npy"), *root.glob("own/models/*")],
            "files": [p for p in root.rglob("*") if p.is_file()]}


def cache_bytes(root) -> int:
    return sum(p.stat().st_size for p in kept(root)["files"])


def age(path, days: float) -> None:
    when = time.time() - days * 86_400.0
    os.utime(path, (when, when))


@pytest.mark.parametrize("limits", [
    {"kernel_cache_entries": 4, "kernel_cache_own_entries": 6},
    {"kernel_cache_bytes": 10 * kernel_tables.TABLE_FILE_BYTES},
], ids=["entries", "bytes"])
def test_any_number_of_shapes_keeps_the_disk_cache_within_its_limits(cache, limits):
    """A link can carry any shape: 60 own shapes and 20 layouts of a shipped model, one after another, never make
    the cache hold more than its limits (entries per part, bytes in all), and the newest stays usable from disk."""
    cache.limit(**limits)
    caps = kernel_tables.DEFAULT_CAPS
    for i in range(1, 61):
        operator_tables(own_key(i))
        if i % 3 == 0:
            operator_tables(shipped_key(i))
        held = kept(cache.root)
        assert len(held["own"]) <= caps.kernel_cache_own_entries and len(held["shipped"]) <= caps.kernel_cache_entries
        assert cache_bytes(cache.root) <= caps.kernel_cache_bytes
    assert len(cache.builds) == 80
    operator_tables.cache_clear()
    operator_tables(shipped_key(60))  # the last one written is read back, not built again
    assert len(cache.builds) == 80


@pytest.mark.parametrize("tamper", ["negative", "zero", "nan", "float32", "wrong shape", "truncated", "garbage",
                                    "link"])
def test_a_tampered_table_is_removed_and_built_again_never_used(cache, tamper, caplog):
    """Only finiteness was checked: a table of negative or zero times (or 32-bit ones, or a link to anything) was
    used as measured kernels. Now what is read back must be what build_tables promises (``table_problem``)."""
    key = shipped_key(1)
    built = operator_tables(key)
    path = kernel_tables._table_path(key)
    cells = built.copy()
    if tamper in ("negative", "zero", "nan"):
        cells[kernel_tables.TABLE_CELLS - 1] = {"negative": -1e-3, "zero": 0.0, "nan": np.nan}[tamper]
    data = {"float32": lambda: kernel_tables._npy_bytes(cells.astype(np.float32)),
            "wrong shape": lambda: kernel_tables._npy_bytes(cells[1:]),
            "truncated": lambda: path.read_bytes()[:1000],
            "garbage": lambda: os.urandom(kernel_tables.TABLE_FILE_BYTES)}.get(tamper, lambda: None)()
    if tamper == "link":
        elsewhere = cache.root.parent / "elsewhere.npy"
        elsewhere.write_bytes(kernel_tables._npy_bytes(2.0 * cells))  # a valid table, but not one kept here
        path.unlink()
        path.symlink_to(elsewhere)
    else:
        path.write_bytes(data if data is not None else kernel_tables._npy_bytes(cells))
    operator_tables.cache_clear()
    with caplog.at_level(logging.WARNING, logger=kernel_tables.__name__):
        again = operator_tables(key)
    assert len(cache.builds) == 2  # built again, not read
    np.testing.assert_array_equal(again, synthetic_table(2))
    assert not path.is_symlink() and kernel_tables._read_table(path) is not None  # what is kept now passes
    assert len(caplog.records) == 1 and path.name in caplog.records[0].getMessage()  # one line says so


def test_build_tables_keeps_the_promise_a_kept_table_is_checked_against():
    """Every time finite and positive (the LM head's may all be zero): a real table passes ``table_problem``, and
    any cell made zero, negative or NaN fails it."""
    built = operator_tables(coverage(H100_8B).key)
    assert kernel_tables.table_problem(built) == ""
    for cell in (0, kernel_tables.LOGITS_CELLS.start, T_DECODE_ATTENTION - T_DENSE, kernel_tables.TABLE_CELLS - 1):
        for value in (0.0, -1e-6, np.nan):
            spoilt = built.copy()
            spoilt[cell] = value
            assert kernel_tables.table_problem(spoilt), (cell, value)
    no_lm_head = built.copy()
    no_lm_head[kernel_tables.LOGITS_CELLS] = 0.0
    assert kernel_tables.table_problem(no_lm_head) == ""


@pytest.mark.parametrize("content", [b'{"current": "0.24.0; touch PWNED"}', b'["0.24.0"]', b'{"next": "0.25.0"}',
                                     b'{"current": 24}', b"not json", b" " * 5000])
def test_a_tampered_versions_file_is_asked_of_the_package_again(tmp_path, monkeypatch, content, caplog):
    monkeypatch.setattr(kernel_tables, "_cache_dir", lambda: tmp_path)
    import aiconfigurator_core.sdk.perf_database as database
    monkeypatch.setattr(database, "get_version_slots", lambda *_: {"current": "0.24.0", "next": "0.25.0"})
    path = tmp_path / f"versions-{kernel_tables.package_version()}-h100_sxm-vllm.json"
    path.write_bytes(content)
    kernel_tables.version_slots.cache_clear()
    try:
        with caplog.at_level(logging.WARNING, logger=kernel_tables.__name__):
            assert kernel_tables.version_slots("h100_sxm", "vllm") == {"current": "0.24.0"}
    finally:
        kernel_tables.version_slots.cache_clear()
    assert json.loads(path.read_text()) == {"current": "0.24.0"} and len(caplog.records) == 1


def test_a_model_folder_holds_its_config_and_nothing_else(cache, caplog):
    """The package reads a model folder's config.json and, when there, its hf_quant_config.json: a folder whose
    config was changed or that gained any other file is emptied and written again before the package reads it."""
    config = own_key(7).model_config
    folder = kernel_tables.model_folder(config)
    (pathlib.Path(folder) / "config.json").write_text(config.replace('"num_hidden_layers": 7', '"num_hidden_layers"'
                                                                                                ': 1'))
    (pathlib.Path(folder) / "hf_quant_config.json").write_text('{"quantization": {"quant_algo": "NVFP4"}}')
    with caplog.at_level(logging.WARNING, logger=kernel_tables.__name__):
        assert kernel_tables.model_folder(config) == folder
    assert sorted(p.name for p in pathlib.Path(folder).iterdir()) == ["config.json"]
    assert (pathlib.Path(folder) / "config.json").read_text() == config and len(caplog.records) == 1


def test_entries_unused_for_their_age_limit_are_removed_and_use_keeps_them(cache):
    """30 days unused (``kernel_cache_s``): gone at the next write, in both parts. Reading a table from disk, or
    using one this process holds in memory (``table_step``), marks it as used."""
    old_own, old_shipped, read, in_memory, young = own_key(1), shipped_key(1), own_key(2), shipped_key(2), own_key(3)
    for key in (old_own, old_shipped, read, in_memory, young):
        operator_tables(key)
    for key in (old_own, old_shipped, read, in_memory):
        age(kernel_tables._table_path(key), 31)
    age(kernel_tables._table_path(young), 29)
    old_folder = pathlib.Path(kernel_tables.model_folder(old_own.model_config))
    age(old_folder, 31)
    table_step(np.zeros(ST_FIELDS), in_memory, "vllm")  # in this process's memory: no read, but a use
    operator_tables.cache_clear()
    operator_tables(read)  # read from disk
    operator_tables(own_key(4))  # a write: the cache is pruned
    path = kernel_tables._table_path
    assert not path(old_own).exists() and not path(old_shipped).exists() and not old_folder.exists()
    assert all(path(key).exists() for key in (read, in_memory, young, own_key(4)))


def test_the_shipped_models_tables_survive_any_number_of_own_shapes(cache):
    """The presets' tables (``python -m engine warm``) are shipped models': own shapes, however many, push out only
    each other."""
    cache.limit(kernel_cache_entries=8, kernel_cache_own_entries=5)
    shipped = [shipped_key(1), shipped_key(2), shipped_key(1, "Llama-3-70B"), BUNDLED]
    for key in shipped:
        operator_tables(key)
    folder = pathlib.Path(kernel_tables.model_folder(shipped[0].model_config))
    for i in range(1, 200):
        operator_tables(own_key(i))
    assert all(kernel_tables._table_path(key).exists() for key in shipped) and folder.exists()
    assert len(kept(cache.root)["own"]) == 5
    operator_tables.cache_clear()
    for key in shipped:
        operator_tables(key)
    assert len(cache.builds) == len(shipped) + 199  # read back, not built again


def test_a_model_folder_in_use_is_not_pruned_and_threads_share_the_cache(cache):
    """While a build reads a model folder (the folders' lock held, as ``_engine_handle`` does), no prune removes
    it: tables go in its place. Several threads writing and reading at once all get valid tables."""
    cache.limit(kernel_cache_own_entries=4)
    in_use = pathlib.Path(kernel_tables.model_folder(own_key(1).model_config))
    with kernel_tables._folders_lock(exclusive=False):
        for i in range(2, 6):
            operator_tables(own_key(i))
            assert in_use.exists()
    operator_tables(own_key(6))
    assert not in_use.exists() and len(kept(cache.root)["own"]) <= 4

    def work(thread: int) -> list[str]:
        return [kernel_tables.table_problem(operator_tables(own_key(100 + (thread * 7 + i) % 30, thread % 2 + 1)))
                for i in range(40)]

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        problems = [p for found in pool.map(work, range(4)) for p in found]
    assert problems == [""] * 160 and len(kept(cache.root)["own"]) <= 4


def test_a_table_the_package_cut_short_is_refused_and_the_roofline_says_so():
    """The package ends GLM-5's op list after its embedding and first norm on an A100 (its FP8 indexer needs FP8
    tensor cores, and ``_op_names`` takes that error for the list's end): the table held no GEMM and zero attention.
    ``build_tables`` now refuses what ``table_problem`` refuses, so the roofline prices it and says why."""
    server = Server(step_model="roofline", gpu="A100-80G", model="GLM-5", quant="fp16", engine="tensorrt-llm")
    covered = coverage(server)
    assert covered.key is None and "has no measured kernel for" in covered.words
