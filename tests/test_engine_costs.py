"""What a client sees beyond the measured kernels (``data/hardware/engine_costs.csv``): a fixed time per request
(HTTP, tokenizing, the first chunk) and the host time each iteration leaves the GPU idle, taken as measured from
sources written on the fit side of ``validation_sources.csv``, added only where operator tables time the server
(the roofline's factors were fitted on client-measured runs and carry them)."""

import numpy as np
import pytest

import engine
from engine.calibrate.sources import held_out_sources, source_of
from engine.hardware.kernel_tables import client_fixed_ms, coverage, iteration_host_s, table_step
from engine.hardware.roofline import roofline_profile, roofline_step_params
from engine.hardware.steptime import decode_step_s_nb
from engine.hardware.tables import load_table
from engine.scenario.config import Server

H100_8B = Server(step_model="roofline", gpu="H100-80G", model="Llama-3.1-8B", quant="fp16", engine="vllm")
PRESET = "data/scenarios/chat_and_batch_a100_8b.toml"
COVERED = ["workload.num_requests=40", "server.step_model=roofline", "server.gpu=H100-80G",
           "server.model=Llama-3.1-8B"]


def test_every_cost_comes_from_a_source_on_the_fit_side_of_the_split():
    """Each document a cost rests on resolves to a source of the split table, none of them held out; an engine the
    tables time (vLLM, SGLang, TensorRT-LLM) has its row, and a figure borrowed from another engine says so."""
    costs = load_table("engine_costs")
    assert set(costs.index) == {"vllm", "sglang", "tensorrt-llm"}
    for engine_name, row in costs.iterrows():
        for document in row["document"].split("; "):
            assert source_of(document) not in held_out_sources(), (engine_name, document)
        assert {row["request_basis"], row["host_basis"]} <= {"measured", "estimate"}
        assert 0 < row["request_fixed_ms"] < 100 and 0 < row["host_ms"] < 5
        if "estimate" in (row["request_basis"], row["host_basis"]):
            assert "stands in" in row["source"]


def test_the_fixed_cost_is_the_engines_where_tables_time_the_server_and_a_users_where_set():
    assert coverage(H100_8B).key is not None
    assert client_fixed_ms(H100_8B) == load_table("engine_costs").loc["vllm", "request_fixed_ms"] == 11.0
    assert client_fixed_ms(Server(**{**H100_8B.__dict__, "engine": "sglang"})) == 6.9
    assert client_fixed_ms(Server(**{**H100_8B.__dict__, "kernel_tables": "off"})) == 0.0  # the roofline carries it
    assert client_fixed_ms(Server(**{**H100_8B.__dict__, "gpu": "MI300X"})) == 0.0  # no tables for the card
    assert client_fixed_ms(Server(**{**H100_8B.__dict__, "kernel_tables": "off", "request_fixed_ms": 3.5})) == 3.5
    assert client_fixed_ms(Server(**{**H100_8B.__dict__, "request_fixed_ms": 0.0})) == 0.0
    assert client_fixed_ms(Server()) == 0.0  # a fixed step time is a model's own


def test_each_iteration_carries_the_engines_host_time_once():
    """A decode iteration of TensorRT-LLM's tables is the same kernels' as vLLM's plus the difference of their host
    times, at any batch: the host time sits in the dense table, which every iteration reads once."""
    key = coverage(H100_8B).key
    step = roofline_step_params(roofline_profile(H100_8B))
    vllm, trt = table_step(step, key, "vllm"), table_step(step, key, "tensorrt-llm")
    assert iteration_host_s("tensorrt-llm") == pytest.approx(0.58e-3) and iteration_host_s("atom") == 0.0
    for batch, context in ((1, 100), (7, 3000), (300, 20000)):
        gap = decode_step_s_nb(trt, batch, context) - decode_step_s_nb(vllm, batch, context)
        assert gap == pytest.approx(0.58e-3 - 0.16e-3, abs=1e-12)


def test_a_clients_time_to_first_token_and_end_to_end_latency_carry_the_fixed_cost_and_nothing_else_does():
    """The same run with and without the fixed cost (set to 0 and to the engine's figure): the engine's schedule is
    the same, bit for bit; each request's time to first token and end-to-end latency are 11 ms longer; time per
    output token and queueing are unchanged."""
    charged = engine.simulate(engine.load_scenario(PRESET, overrides=COVERED)).requests
    free = engine.simulate(engine.load_scenario(PRESET, overrides=[*COVERED, "server.request_fixed_ms=0"])).requests
    for column in ("arrival_s", "first_scheduled_s", "first_token_s", "finish_s", "queue_ms", "tpot_ms"):
        np.testing.assert_array_equal(charged[column].to_numpy(), free[column].to_numpy())
    done = charged["state"] == "completed"
    assert done.sum() > 10
    for column in ("ttft_ms", "e2e_ms"):
        np.testing.assert_allclose((charged[column] - free[column])[done].to_numpy(), 11.0, atol=1e-9)
