"""Method: how the simulator works, its formulas, assumptions and limits, and how it was validated."""

import pandas as pd
import streamlit as st

from engine.calibrate.calibration_report import markdown_table
from engine.hardware.roofline import memory_convention
from engine.hardware.tables import load_table
from engine.scenario.metric_table import STEADY_STATE, WHOLE_RUN
from engine.sim.policies import POLICIES
from engine.teach.theory import theory_checks
from ui import scenario_sidebar, tables


def memory_text() -> str:
    """The memory paragraph, its figures from ``data/hardware/serving_memory.csv``."""
    return f"""
**Memory, the way vLLM budgets it.** A card's total is what nvidia-smi reports (`gpus.csv`, a source
per card; a MIG instance's from `nvidia-smi mig -lgip`). CUDA sees about {memory_convention("cuda_hidden_gib"):g} GiB
less; the server takes `gpu_memory_utilization` of what CUDA sees and subtracts the weights (embedding and LM
head in 16 bits), the activation peak of its profile run (`max_batched_tokens` x (4 x hidden + 2 x intermediate
/ TP) x 2 B, plus `max_batch_size` x vocabulary x {memory_convention("sampler_bytes_per_logit"):g} B for the
sampler, unless `activation_reserve_gib` is set) and the memory outside PyTorch
({memory_convention("non_torch_gib_one_card"):g} GiB, {memory_convention("non_torch_gib_tensor_parallel"):g} GiB with
tensor parallelism); the rest holds the KV cache. Key and value heads split over the cards (each card keeps at
least one); a latent-attention (MLA) cache is copied on every card. TensorRT-LLM (`server.engine`) budgets
the other way round: the KV cache takes `gpu_memory_utilization` of the memory left free once weights, activations
(its logits in FP32, 4 B a logit) and the rest are in place. Every term and its source:
`data/hardware/serving_memory.csv`, `data/hardware/engines.csv` and the Hardware page's memory bar.
"""


scenario_sidebar.render()
st.title("Method")

st.markdown("""
### The iteration loop
The simulator advances one model iteration at a time, as continuous-batching servers (vLLM, SGLang,
TensorRT-LLM) do. In each iteration:

1. arrivals join the waiting queue; a request with no first token by its class's `timeout_ms` leaves
   and counts as **timed out**;
2. if fewer than `min_batch_size` requests are ready, the server waits until the oldest has waited
   `wait_timeout_ms` (or more arrive); with nothing to do it jumps to the next arrival;
3. running requests, in policy order, get their next chunk: **one token when decoding**, or up to the
   remaining **token budget** (`max_batched_tokens`) of their prompt when prefilling, so long prompts are
   prefilled in chunks over several iterations;
4. waiting requests are admitted in policy order while a batch slot (`max_batch_size`), budget and
   KV memory remain;
5. the iteration takes its step time; every request whose pending tokens are done emits one token
   (the prefill iteration emits the first).

**KV-cache memory.** Paged: a request holds ceil(cached tokens / `block_size_tokens`) blocks and grows
one token per decode. Static: `max_seq_len` tokens are reserved on admission. When a running request
cannot get its next block, the running request the policy ranks worst is **preempted**: its blocks are
freed, it returns to the waiting queue, and on resume it re-prefills its prompt plus the tokens it has
already generated (which are kept, so no token is emitted twice).
""")

st.markdown("### Step time")
st.markdown("`fixed`: every iteration lasts `step_time_ms`, whatever the batch (the teaching model). "
            "`roofline`: compute time and memory-traffic time combined by a smooth maximum (near the ridge, where "
            "the two are about equal, real kernels reach neither peak), plus communication and a fixed overhead:")
st.latex(r"t_{step} = \left(t_c^{\,k} + t_m^{\,k}\right)^{1/k} + t_{comm} + t_{overhead},\quad "
         r"t_c = \frac{2 P_{mm} T + a \, C_{pairs}}{F_{peak}\,\eta_c},\quad "
         r"t_m = \frac{W + b_{kv} (C_{reads} + T)}{B_{hbm}\,\eta_b}")
st.markdown("""
- $T$: tokens in the batch (prefill chunk tokens + one per decode); $P_{mm}$: matmul parameters used
  per token (the active ones for a mixture of experts); $a$: attention FLOPs per (token, context token),
  $4 L n_h d$ for grouped-query attention, $2 L n_h (576 + 512)$ for DeepSeek-V3's latent attention;
- $C_{pairs}$: sum over batched tokens of the positions each attends to (a chunk of $c$ tokens on $k$
  cached ones: $ck + c(c+1)/2$); $C_{reads}$: KV tokens already cached for the batched sequences;
- $W$: weight bytes read (4-bit weights are dequantised to FP16 for the matmul: half the bytes, FP16
  rate; for a mixture of experts, the experts the batch is expected to touch); $b_{kv}$: cached values
  per token ($2 L n_{kv} d$, or one 576-value latent per layer for MLA) x bytes per value of
  `server.kv_quant`;
- $F_{peak}$, $B_{hbm}$: dense tensor FLOP/s and memory bandwidth from `data/hardware/gpus.csv` (a MIG or
  cloud slice: its share of the card); $t_{comm}$: tensor-parallel all-reduces;
- $\\eta_c$, $\\eta_b$, $t_{overhead}$, the sharpness $k$ (large $k$: the plain maximum; $k = 1$: the sum)
  and a factor on the all-reduce latency: fitted per GPU family to published measurements (table below),
  all five from 10 rows of the family, the shares of peak and the overhead from 5, the shares of peak alone
  from 3, the rest from the fit over all rows; a family without measurements takes each factor at the
  slowest value of the calibrated families and is marked "estimate only".

""")

st.markdown(memory_text())

st.markdown("""
**Batching and admission** (`server.batching`, `server.admission`). `mixed`: decodes and prefill chunks
share one token budget every iteration (vLLM V1, TensorRT-LLM, SGLang with `--enable-mixed-chunk`).
`prefill-first` (vLLM before V1, TGI, SGLang by default): whenever a waiting prompt fits, the
iteration runs whole prompts only and every decode waits. `optimistic`: a request is admitted when its
prompt's blocks fit and preempted when memory runs out. `reserve-full`: admitted only when its prompt
and whole output fit, never preempted for memory (TensorRT-LLM's GUARANTEED_NO_EVICT); the output
length stands for the client's `max_tokens`, so a client asking for more than it gets would reserve more
than modelled here. `new-token-ratio` (SGLang): admitted when its prompt fits beside a share of the output every
running request may still add (at most 4,096 tokens each), the share 0.7 falling to 0.098 over 600 decoding
iterations without a retraction, reset when the server is idle and raised after a retraction to the share the
running requests have decoded; preempted when memory runs out. Presets `engine_*.toml` set each engine's defaults
on one workload.

**Speculative decoding** (`server.speculative`). Every decode iteration, a draft proposes k tokens per
decoding request and the served model verifies them and one more in one pass: k + 1 tokens of the token
budget per request, attending to its cached context. Each draft token is accepted with probability a
while the ones before it were, so an iteration emits E = 1 + a + ... + a^k = (1 - a^(k+1)) / (1 - a)
tokens on average; a request's j-th decode iteration emits floor((j + 1) E) - floor(j E), the average
without its spread. The draft's k steps add k x c x a plain decode iteration of the same requests, c
given (`draft_cost`) or the draft model's weight bytes over the served model's (`draft_model`, which
must share the vocabulary; its weights take room from the KV cache). At low load a decode iteration
mostly reads weights, so verifying k + 1 tokens costs little more than one and TPOT falls by about E;
at high load the GPU is compute bound and the rejected tokens and the draft take time from every
request: there it raises TPOT and lowers capacity. Not modelled: the draft's own KV cache, and the
spread of acceptance between requests and positions (source of the formula: Leviathan et al., "Fast
Inference from Transformers via Speculative Decoding", 2023).

**Prefix caching** (`server.prefix_caching`). Prompts are chains of blocks with ids: a Mooncake trace's
`hash_ids` (512 tokens each), else the first `shared_prefix_tokens` of every prompt of a class, and the
conversations of a class with `conversation_turns` > 1: its arrivals are dealt in turn to `turn_gap_s` x its
arrival rate conversations in flight; a follow-up's prompt is the previous turn's prompt and output plus its own
drawn tokens, and it shares the previous prompt's blocks (the output's blocks are not cached, so a follow-up
computes them again). A request that
holds no KV starts from the longest chain of leading blocks its replica's cache holds (all but its last prompt
token at most) and prefills only the rest. Cached blocks are shared and counted once; a finished prefill's blocks
join the cache; blocks nobody holds are evicted least recently released first, before anything is preempted.
The `prefix-affinity` router sends a request to the replica holding the longest prefix of it, among those
within one iteration's token budget of the least loaded; the `lpm` policy serves the longest cached prefix
first. Hit rate = prompt tokens found cached / prompt tokens looked up. The offered load counts as cached what
one unlimited cache for the whole fleet would hold, so with caching it errs low. Not modelled: caching the
output's blocks, host-memory or disk caches (Mooncake's own answer to caches that hold a few dozen long
prompts).

**Mixed fleets** (`[[fleet.groups]]`). A fleet may hold groups of replicas on other GPUs, weight formats or
tensor-parallel degrees (under the fixed step model: other iteration times and KV caches), all serving the
`[server]` model behind one router, each group with the server's batch limits unless it sets its own. Each
replica has its own step time and KV cache. Its
**speed** is the fewest GPU seconds per request of any group over its own, on this workload (the offered load's
estimate at a full batch: s_k = min_j W_j / W_k, so the fastest replica's is 1 and identical replicas' are all
exactly 1). The routers weigh by it: round robin becomes smooth weighted round robin (each replica gains s_k in
credit per arrival, the richest is chosen and pays the total: turns in proportion to speed, evenly spread), least
tokens and shortest queue compare outstanding work over s_k (the time to clear it). The fleet's service rate is
the sum of its groups', so offered load = arrival rate / sum of replicas_g / W_g. Cost: each group rented through
its cheapest offer. Not modelled: a request moving between replicas.

**Prefill/decode disaggregation** (`[fleet] mode = "disaggregated"`). A prefill pool (`[fleet.prefill]`) and a
decode pool (`[fleet.decode]`), each with its replicas, hardware and batch limits. An arrival goes to a prefill
server, which computes its prompt and emits the first token (TTFT ends there); its KV then crosses that server's
link to the decode pool, first come first served: transfer = prompt tokens x KV bytes per token /
`kv_link_gb_s`, after the transfers before it. The prompt's blocks stay on the prefill server until the transfer
ends. The router sends the request to a decode server, where it waits for a slot and memory (its KV has arrived)
and generates the rest (its time per output token includes the transfer). Offered load = the busiest of the
prefill pool (prompt work / its replicas), the decode pool (decode work / its replicas) and the links (transfer
seconds / prefill replicas). Decodes never wait behind a prompt, so time per token falls; every prompt queues at
the prefill pool, so the first token may come later (sources: Zhong et al., "DistServe", OSDI 2024; Patel et al.,
"Splitwise", ISCA 2024). Not modelled: the KV sent layer by layer while the prefill still runs, a decode
server pulling the KV only once it has room, and the memory of KV that has arrived but waits to be admitted (it
takes the decode server's blocks only from its admission).

**Your own measurements** (Hardware page, `python -m engine calibrate`). A `vllm bench serve` result
(per-request lengths with `--save-detailed`, else the means) or a GenAI-Perf / AIPerf export (mean
lengths) is replayed on the server you describe: its requests, sent all at once or at its Poisson rate
(seeded), with at most its concurrency in flight; with a concurrency cap the client only sends a request
when a slot frees, so time to first token counts from then. Every figure it reports (mean, median and
p99 of time to first token, time per output token and end-to-end latency; output tokens/s) is predicted
with the shipped factors, then compute, bandwidth and overhead are fitted on them (the roofline's
sharpness too from three runs; the all-reduce factor stays the shipped one). The figures of one run
share its load, so its in-sample error says little about other loads: with two runs or more each run is
also predicted by a fit of the others. A fit that ends on a bound of its range, or a file that names
another model, is flagged and cannot be saved from the page.
""")

st.markdown("### Policies")
st.markdown("A policy gives every request one number, its key (lower runs first); the running request with "
            "the highest key is the preemption victim. Ties break by arrival time, then request index.")
for name, spec in POLICIES.items():
    st.markdown(f"**{spec.label}** (`{name}`): orders by {spec.key}. {spec.use_when}")
    st.latex(spec.formula)
st.markdown("""
- **Priority with anti-starvation**: `aging_per_s` lowers (improves) the effective level by that many
  levels per second waited; after `max_wait_ms` a request is promoted to level 0 (FIFO by arrival among
  level 0). The Lab shows the longest wait per class, where starvation appears.
- **Weighted fair queuing**: each class keeps a virtual time V = service received / weight, service
  counted in tokens processed (one per decode, `prefill_token_weight` per prefill token); the batch
  goes to the class with the lowest V. It is work conserving: a class with nothing waiting takes no
  slot, and when it comes back its V is raised to the lowest V of the busy classes, so idle time earns
  no credit.
- **Dynamic cost**: waited = time since arrival; SLA = the class's TTFT target before the first token
  and its end-to-end target after (the other when only one is set, `default_sla_ms` when none);
  consumed / expected = processed tokens (prefill tokens weighted by `prefill_token_weight`) / (the
  prompt + the predicted output). A waiting request preempts the running one with the lowest cost
  when its cost is higher by more than `margin`.
- **SJF / SRPT / dynamic** use a predicted output length: true^(1-e) x r^e, with e =
  `predictor_error` and r the length of another request of the same class drawn at random (e = 0 exact,
  e = 1 no information about this request).
- **EDF**: deadline = arrival + TTFT target before the first token, arrival + end-to-end target after;
  requests without any target come after every request with one.
- **vLLM presets**: `vllm-fcfs` is FIFO that never preempts for policy reasons (memory preemption takes
  the latest arrival); `vllm-priority` orders by (priority level, arrival), preempts the lowest priority,
  latest arrival; both always recompute.

**Preemption modes** (`preempt_mode`): `recompute` drops the KV and the request re-prefills its prompt
and the tokens it generated; `swap` moves the KV to host memory and back (each way: KV bytes /
`host_link_gb_s`, added to the iteration in which it happens); `keep` leaves the KV on the GPU and
charges `preempt_overhead_ms` when the request resumes. Keeping frees no memory, so a preemption forced
by a full KV cache recomputes in `keep` mode, and paused requests give up their KV first when memory
runs out. **Wasted GPU time** = transfers and pauses, plus each iteration's time times the share of its
tokens that recompute work done before.
""")
st.markdown("""
### Metrics, assumptions and limits
- Queue delay = arrival to first scheduled; TTFT = arrival to first token; TPOT = (last - first token) /
  (output tokens - 1); end-to-end = arrival to last token. Latency percentiles use completed requests.
- SLA attainment = completed requests meeting every target of their class / (completed + timed out).
- **Offered load** = arrival rate x estimated GPU seconds per request / concurrent slots: exact for the
  fixed model with one slot (it is $\\rho$ of M/G/1), an estimate otherwise. A run is **unstable** when it
  is >= 1 or a limit (`limits.max_waiting_requests`, `limits.max_drain_s`) stopped it.
- A fleet is `fleet.replicas` identical servers, or groups of replicas on different hardware
  (`fleet.groups`), on one clock behind a router (round robin, least outstanding tokens, shortest queue, prefix
  affinity; weighed by each replica's speed); a request stays on its replica. No network, tokenizer or sampling
  time; no migration of requests between replicas.
- All randomness is drawn before the loop from one seeded generator: same scenario and seed, same result.
""")
st.markdown(f"""
### Steady state and utilisation while busy
- **Steady-state window**: {STEADY_STATE}. Throughputs (output and prompt tokens/s, SLA-met requests/s),
  GPU busy and utilisation are measured over it by default: the warm-up (an empty server filling) and the
  drain (the backlog served after arrivals stop) are left out, so a policy that holds a class back shows it in
  that class's throughput. Over the whole run {WHOLE_RUN}; those figures stay available (`_run` keys, the
  policy comparison). Tokens are counted when emitted inside the window; an iteration's busy time is split at
  the window's edges. When all requests arrive at once the whole run is the window.
- **GPU busy** = share of the window during which an iteration was running, however full it was.
- **Compute while busy** (model FLOP utilisation) = sum over iterations of their compute time at the
  effective FLOP/s / their duration, times effective / datasheet FLOP/s: the FLOPs done over what the
  datasheet peak could do in the busy time. **Bandwidth while busy** is the same with bytes moved (weights
  and KV reads) and memory bandwidth. Both under the roofline step model only. Fuller iterations (a larger
  batch, a minimum batch with a wait time-out) raise them and lower the busy time for the same work.
""")

st.markdown("### Validation against queueing theory")
st.markdown("With `max_batch_size = 1` on the fixed model the server is an M/G/1 queue (service = output "
            "tokens x step). Mean queue delay against Pollaczek-Khinchine (FIFO), Cobham (non-preemptive "
            "priority; SJF as one class per job size) and mean time in system against preemptive-resume "
            "priority (allowed one iteration: the simulator preempts at iteration boundaries). Several seeds, "
            "first 10% of each run cut as warm-up:")


CHECK_SEEDS = 8
CHECK_REQUESTS = 20000


@st.cache_data(show_spinner="Running the theory checks (a few seconds, once per server)...")
def checks_table() -> pd.DataFrame:
    return pd.DataFrame([{"set-up": c.name, "class": c.cls, "theory (ms)": c.theory_ms,
                          "simulated (ms)": c.simulated_ms, "std. error (ms)": c.std_error_ms,
                          "allowance (ms)": c.allowance_ms, "error": f"{100 * c.rel_error:+.2f}%",
                          "within 2 std. errors + allowance":
                              abs(c.simulated_ms - c.theory_ms) <= 2 * c.std_error_ms + c.allowance_ms}
                         for c in theory_checks(seeds=range(CHECK_SEEDS), num_requests=CHECK_REQUESTS)])


st.dataframe(checks_table().round(2), hide_index=True, width="stretch", placeholder=tables.MISSING)
st.caption(f"Run live: {CHECK_SEEDS} seeds x {CHECK_REQUESTS:,} requests. With 20 seeds x 40,000 requests "
           "(`python bench/theory_report.py`) every error is within 0.5%.")

st.markdown("### Calibration against published measurements")
st.markdown("Each published run's load (closed-loop clients, Poisson arrivals, offline batches, single "
            "iterations) replayed through this simulator on its serving engine, with the factors fitted per GPU family "
            "(`data/hardware/calibration.csv`) and per engine (`data/hardware/engines.csv`) by "
            "`python bench/calibrate.py` on the training pages only. Accuracy is read on the held-out runs: pages the "
            "fit never saw, and every DeepSeek run (errors in percent of the measured value):")
st.markdown(markdown_table())
st.dataframe(load_table("calibration"), width="stretch", placeholder=tables.MISSING)
st.dataframe(load_table("engines"), width="stretch", placeholder=tables.MISSING)

st.markdown("### Hardware and model tables")
for name in ("gpus", "gpu_slices", "models", "quant", "kv_quant", "measurements", "validation", "offers"):
    st.markdown(f"`data/hardware/{name}.csv`")
    st.dataframe(load_table(name), width="stretch", placeholder=tables.MISSING)
st.caption("These are the data files as stored: column names are the files' own (units in the names).")
