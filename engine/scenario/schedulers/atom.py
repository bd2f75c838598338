"""AMD's ATOM scheduler (github.com/ROCm/ATOM at ffdf3bb, after v0.1.6-rc0; the defaults the same at v0.1.5), a
vLLM-like engine over AITER kernels.

A turn of ATOM's scheduler tries prefill first: the unfinished chunked prompts, then waiting prompts in order while
slots (``max_num_seqs`` 512) and the token budget (``max_num_batched_tokens`` 16384) last, the first that cannot
allocate its blocks stopping the scan; any prefill makes the turn prefill only, decodes run in turns with none
(atom/model_engine/scheduler.py:1099-1556): ``server.batching = prefill-first``, ``admission = optimistic``. ATOM
chunks a long prompt over turns where this simulator runs a prompt longer than the budget alone: the closest it has.

With data parallelism each rank's engine core installs the PrefillDelayer by default (ATOM_ENABLE_PREFILL_DELAYER,
atom/model_engine/engine_core.py:586-601): every turn the ranks share whether each has a prompt it can admit, their
pending prompt tokens (each rank's capped at its budget), their decodes and whether any is short of KV; prefills go
when nothing decodes, KV use reaches the watermark (0.9), the hold reaches its bound (200 turns), or every rank has a
prompt and together they fill ``target_fill`` (0.9) of their budgets or stop growing for ``stall_ticks`` (10) turns;
else they wait (atom/model_engine/prefill_delayer.py should_allow_prefill). Its chunked-prompt bound
(PARTIAL_MAX_TICKS) never applies here (prompts are whole), nor its optional low watermark and queue-age guard (off
by default). Without attention data parallelism (one engine core) ATOM installs no delayer.
"""

from __future__ import annotations

NAME, RELEASE = "ATOM", "ffdf3bb"


def loop_gates(server) -> dict:
    if not (server.prefill_delayer and server.attention_data_parallel):
        return {}
    return {"prefill_delay": (server.ranks, server.prefill_delayer_target_fill, server.prefill_delayer_max_ticks,
                              server.prefill_delayer_stall_ticks, server.prefill_delayer_kv_high)}


def hold_words(server) -> str:
    return (f"ATOM's prefill delayer holds prompts until every data-parallel rank has one and together they fill "
            f"{server.prefill_delayer_target_fill:g} of their token budgets or stop growing for "
            f"{server.prefill_delayer_stall_ticks} iterations, {server.prefill_delayer_max_ticks} at most "
            f"(server.prefill_delayer = true, ATOM's default; false turns it off)")
