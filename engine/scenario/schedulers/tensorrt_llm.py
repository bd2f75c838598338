"""TensorRT-LLM's scheduler, PyTorch backend (``trtllm-serve``), as its sources of 1.0 to 1.4.0rc and the versioned
API documentation of 1.3.0rc27 and 1.4.0rc4 give it (the repository is too large to read whole here: files were
read one by one).

Context and generation requests share each iteration under ``max_num_tokens`` (in-flight batching;
``server.batching = mixed``). The default capacity policy GUARANTEED_NO_EVICT admits a request only when blocks for
its prompt and all its max_tokens are free after every running request kept its own to completion, first come
first served, the first that does not fit stopping the scan (cpp/tensorrt_llm/batch_manager/capacityScheduler.cpp;
``server.admission = reserve-full``; MAX_UTILIZATION is ``optimistic``). With attention data parallelism and
``attention_dp_config.enable_balance`` the ranks hold their prompts back until every rank has one, or
``batching_wait_iters`` iterations to gather more when every rank is generating, or ``timeout_iters`` at most
(PyExecutor._balance_adp_requests, tensorrt_llm/_torch/pyexecutor/py_executor.py; the defaults False, 10 and 50 in
tensorrt_llm/llmapi/llm_args.py AttentionDpConfig).
"""

from __future__ import annotations

from ..errors import ScenarioError

NAME, RELEASE = "TensorRT-LLM", "1.3.0rc27"
# server.admission -> the capacity scheduler policy that runs it
CAPACITY_POLICIES = {"reserve-full": "GUARANTEED_NO_EVICT", "optimistic": "MAX_UTILIZATION"}


def check(server, path: str) -> None:
    if server.attention_dp_balance and not server.attention_data_parallel:
        raise ScenarioError(f"{path}.attention_dp_balance balances the ranks of data-parallel attention; set "
                            f"{path}.attention_data_parallel = true (with expert_parallel) or leave it false")


def loop_gates(server) -> dict:
    if not server.attention_dp_balance:
        return {}
    return {"adp_balance": (server.ranks, server.attention_dp_batching_wait_iters, server.attention_dp_timeout_iters)}


def hold_words(server) -> str:
    return (f"TensorRT-LLM's attention-DP balance holds prompts until every rank has one, "
            f"{server.attention_dp_timeout_iters} iterations at most, and gathers "
            f"{server.attention_dp_batching_wait_iters} more while every rank generates (server.attention_dp_balance "
            f"= true; off by default)")


def options(server, attention_dp: bool) -> dict:
    """This module's knobs as extra LLM API options (the YAML ``--extra_llm_api_options`` reads); the balance
    when the command runs attention data parallelism (``attention_dp``)."""
    out = {}
    if server.admission in CAPACITY_POLICIES:
        out["scheduler_config"] = {"capacity_scheduler_policy": CAPACITY_POLICIES[server.admission]}
    if attention_dp:
        out["attention_dp_config"] = {"enable_balance": bool(server.attention_dp_balance),
                                      "batching_wait_iters": server.attention_dp_batching_wait_iters,
                                      "timeout_iters": server.attention_dp_timeout_iters}
    return out
