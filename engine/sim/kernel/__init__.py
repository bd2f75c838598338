"""The compiled iteration loop: a fleet of replicas with continuous batching, chunked prefill, paged KV
memory and preemption, fed by a router, on one clock.

One call of ``run_nb`` simulates R replicas (servers) from t = 0 until every
request has left, or a limit stops it; the replicas of a mixed fleet each have
their own step time and KV cache. Events are taken in time order: an arrival
(earliest first; at a tie, before a replica's decision) is sent by the router to
one replica -- round robin, least outstanding tokens (the tokens its requests
still have to process: pending prefill plus the predicted output not yet
generated) or join the shortest queue (fewest requests it holds), each replica's
turns or load weighed by its speed; ties go to the lowest replica index -- and
wakes it if it is idle. On a disaggregated fleet arrivals go to the prefill
replicas; the iteration that emits a request's first token there puts its KV on
that replica's link (first come first served), the request leaves the batch and
its blocks stay until the transfer ends (an event of its own, after arrivals and
before decisions at the same time); then the router sends it to a decode replica,
where it waits for a slot and memory (its KV, already sent, takes blocks only once
it is admitted: the decode pool's buffer for it is not modelled). A
replica's decision (``decision.decide_nb``), at the end of its iteration or when it wakes, is:

1. apply the finished iteration (``step.advance_nb``); drop requests whose time-out passed before a first token;
2. if nothing is ready, go idle until the router sends a request; hold back while fewer than
   ``min_batch_size`` are ready, until the oldest has waited ``wait_timeout_s`` (``admit``);
3. order the running requests by the policy key (``admit.order_running_nb``) and give each its next chunk
   (one token when decoding, up to the token budget when prefilling), growing its
   KV blocks; when memory runs out, drop the KV of paused requests, then preempt
   from the worst end (``batch.schedule_running_nb``);
4. admit waiting requests the engine's scheduler has read (``gates``) in key order while a slot, budget and memory
   remain, unless its gate holds prompts back this iteration
   (a preemptive policy may evict a worse running request); a request that was
   paused or swapped out pays its resume cost (``admit.admit_waiting_nb``). With ``server.batching =
   prefill-first`` step 4 comes first and takes whole prompts only; when it admits
   any, the iteration is theirs alone (every decode waits), else step 3 runs a
   decode iteration. With ``server.admission = reserve-full`` a request's blocks
   for its whole prompt and output are taken at admission, so step 3 never runs
   out of memory;
5. compute the step time (fixed, or roofline; ``step.step_s_nb``), advance every scheduled request:
   a request whose pending tokens reach zero emits one output token (with
   ``server.speculative``, a decode verifies k draft tokens and one more, emits the
   accepted ones plus one, and the draft's k steps lengthen the iteration);
6. record counters and the (stride-decimated) time series (``record.account_nb``); while only decodes run
   and nothing can arrive, run the identical decisions that follow in one go (``skip.skip_decodes_nb``).

Progress follows one rule for prefill, chunked prefill, decode and recompute:
``pending`` tokens must be processed before the next output token appears
(the prompt at first, 1 while decoding, prompt + generated after a recompute
preemption). A preempted request keeps its KV on the GPU (keep), moves it to host
memory (swap: transfer time each way) or drops it (recompute); the time this
wastes is accumulated per iteration.

State layout (``state``): the per-request arrays of ``layout.py`` (one int64 and one float64
2-D array with named columns); per replica (first axis) three index lists
(waiting, running, batch), a counter row, a clock row, its own policy class state,
time series and statistics. With one replica this is exactly the single-server
loop. Few array objects keep Numba's reference counting out of the hot
loops (reading an array out of a namedtuple inside a loop cost a reference-count round
trip each time: 3x slower on the default scenario).

The rooms, each a module, bottom up (a module imports only those above it in this list, and never this package):

- ``state``: what every array's rows and columns hold, the server tuple, the codes of modes and stop reasons,
  and the arrays a run starts from (plain Python);
- ``queues``: the replicas' request lists (append, remove, keep one state) and the ranking of two requests;
- ``prefix``: the prefix cache (units held, cached, evicted least recently released first);
- ``kv``: paged KV blocks (what a chunk needs), leaving, preemption (keep, swap, recompute) and resuming;
- ``route``: the router (round robin, least tokens, shortest queue, prefix affinity) and a request's arrival
  at the replica it chose;
- ``handoff``: disaggregation, the KV transfer from a prefill replica to the decode pool;
- ``scale``: a replica taken away (scale-down's end, a spot interruption), its requests re-queued elsewhere;
- ``batch``: the running requests' chunks within the token budget and memory;
- ``gates``: what holds a new request back before any budget does: when the engine's scheduler reads new requests
  (SGLang's receive interval) and whether it lets the prompts it read into this iteration (TensorRT-LLM's
  attention-DP balance);
- ``step``: the iteration's duration and its effect on every scheduled request;
- ``admit``: time-outs, the min-batch gate, the order of the running requests and admission of waiting ones;
- ``record``: the statistics and the decimated time series of every iteration;
- ``skip``: event skipping, a stretch of identical decode-only decisions run in one go;
- ``decision``: one replica's decision, the numbered steps above;
- ``loop``: ``run_nb``, the events of the fleet in time order.

This package's own names are what the rest of the engine reads: the loop, its stop reasons, the columns it
reports in and the arrays it starts from.
"""

from .loop import run_nb
from .record import settle_in_flight
from .scale import take_away_nb
from .state import (AT_PAUSE_TIME, CK_MODE, CK_NEXT_S, CK_WAIT_START_S, C_ACCEPTS, C_RUNNING, C_USED_BLOCKS, C_WAITING,
                    IDLE, O_PAUSE_AT_S, COLOCATED, DRAINED, HORIZON, N_SERIES_FIXED, O_END_S, O_NEXT_ARRIVAL,
                    O_STOP_REASON, PAUSED, PC_CACHED, PC_NEXT, PC_REF, QUEUE_BOUND, S_BATCH_HOLD_S, S_BATCH_SUM,
                    S_BUSY_S, S_COMPUTE_S, S_GATE_HELD_S, S_ITERATIONS, S_KV_BLOCK_SECONDS, S_KV_PEAK_BLOCKS,
                    S_MEMORY_S, S_PREEMPTIONS, S_PREFIX_HIT_TOKENS, S_PREFIX_QUERY_TOKENS, S_ROUTED, S_SERIES_ROWS,
                    S_SERIES_STRIDE, S_SKIPPED, S_TERMS_S, S_WASTE_S, S_WINDOW_BUSY_S, S_WINDOW_COMPUTE_S,
                    S_WINDOW_MEMORY_S, S_WINDOW_TERMS_S, SERIES_FIXED_COLUMNS, SV_BLOCK_SIZE_TOKENS,
                    SV_PREFIX_UNIT_TOKENS, WALL_CLOCK,
                    prefix_caches, route_rows, series_rows_per_replica, server_params, start_outputs, work_arrays)
