"""vLLM V1's scheduler, as release 0.24.0 runs it (read from the PyPI wheel vllm-0.24.0, commit ee0da84ab).

Each step schedules the running requests first (decodes and the next chunk of unfinished prompts), then waiting
ones in order while slots, the token budget and memory remain, a prompt chunked by the budget left
(vllm/v1/core/sched/scheduler.py:388-); ``server.batching = mixed``. A waiting request is admitted only when
blocks for its whole prompt are free, nothing is reserved for its output, and no waiting request is admitted in a
step that preempted (vllm/v1/core/kv_cache_manager.py:372-386, scheduler.py:625; ``server.admission =
optimistic``). New requests are read before every step (vllm/v1/engine/core.py:1269-1298), so vLLM has no knob
that holds a request back: its knobs here are the budget and the slots.
"""

from __future__ import annotations


NAME, RELEASE = "vLLM", "0.24.0"
