"""Every name a scenario may choose from, with the integer code the compiled loop uses, defined once.

A leaf module (it imports nothing of the engine): ``config`` takes its ``choices`` from here, the kernel,
policies, step-time model, trace readers and hardware tables take their codes and lists from here, and the
command line and pages read the same tables. A new policy, router or mode starts with one entry here.
"""

from __future__ import annotations

POLICY_CODES = {"fifo": 0, "priority": 1, "wfq": 2, "dynamic": 3, "sjf": 4, "srpt": 5, "edf": 6, "vllm-fcfs": 7,
                "vllm-priority": 8, "lpm": 9}
ROUTER_CODES = {"round-robin": 0, "least-tokens": 1, "shortest-queue": 2, "prefix-affinity": 3}
PREEMPT_MODE_CODES = {"keep": 0, "swap": 1, "recompute": 2}
STEP_MODEL_CODES = {"fixed": 0, "roofline": 1}
KERNEL_TABLE_MODES = ("auto", "off")  # server.kernel_tables: measured operator tables where they cover, or never
TRACE_FORMATS = ("csv", "azure", "mooncake")
TP_DEGREES = (1, 2, 4, 8, 16, 32, 64, 72)  # beyond 8 within one rack's NVLink domain (GB200 NVL72)
KV_ALLOCATIONS = ("paged", "static")
BATCHING_CODES = {"mixed": 0, "prefill-first": 1}
ADMISSION_CODES = {"optimistic": 0, "reserve-full": 1, "new-token-ratio": 2}
FLEET_MODES = ("colocated", "disaggregated")
SCALE_SIGNALS = ("utilisation", "queue", "kv", "slack")  # what an autoscaler reads (sim/autoscale.py)
POOL_ROLES = ("colocated", "prefill", "decode")  # what a replica serves, in the order of the kernel's role codes
ARRIVAL_PROCESSES = ("poisson", "gamma")
LENGTH_DISTRIBUTIONS = ("constant", "uniform", "geometric", "lognormal")
