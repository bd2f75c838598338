"""SGLang's scheduler, as release 0.5.14 runs it (read from the PyPI wheel sglang-0.5.14, python/sglang/srt/).

A turn of the scheduler's loop reads new requests, then runs a prefill batch if any prompt can be admitted (decodes
wait that iteration), else a decode iteration (srt/managers/scheduler.py:2555-2682, "Run prefill first if
possible"); ``server.batching = prefill-first`` is that rule and ``mixed`` is ``--enable-mixed-chunk``. A prompt is
admitted beside a share of what every running request may still add (``server.admission = new-token-ratio``,
srt/managers/schedule_policy.py:509-535). With ``--scheduler-recv-interval`` above 1, new requests are read only
once a counter reaches it: 1 a decode iteration, 1000 any other (srt/managers/scheduler_recv_skipper.py,
srt/environ.py:294-297); release 0.5.14 refuses it beside DP attention (its assertion). ``--num-continuous-decode-
steps`` is parsed but read nowhere in 0.5.14, so it has no key here.
"""

from __future__ import annotations

from ..errors import ScenarioError

NAME, RELEASE = "SGLang", "0.5.14"


def check(server, path: str) -> None:
    if server.scheduler_recv_interval > 1 and server.attention_data_parallel:
        raise ScenarioError(f"{path}.scheduler_recv_interval = {server.scheduler_recv_interval} with "
                            f"attention_data_parallel: SGLang {RELEASE} refuses the two together (its receive "
                            f"skipper asserts no DP attention); set scheduler_recv_interval = 1")


def loop_gates(server) -> dict:
    return {"recv_interval": server.scheduler_recv_interval}


def flags(server) -> list[tuple[str, str | None]]:
    """The launch flags of this module's knobs for ``server`` (the others are written with the budget flags)."""
    out = [("--scheduler-recv-interval", str(server.scheduler_recv_interval))]
    return out + ([("--enable-mixed-chunk", None)] if server.batching == "mixed" else [])


def hold_words(server) -> str:
    return (f"SGLang reads new requests only every {server.scheduler_recv_interval} decode iterations "
            f"(server.scheduler_recv_interval = {server.scheduler_recv_interval}; 1 reads them before every one)")
