"""Each serving engine's scheduler, one module an engine: the knobs that decide when a waiting request is read,
admitted and prefilled, each a ``server`` key (``data/hardware/scheduler_knobs.csv``: the engine's flag, its default
in the release the module read and the file and line it comes from), what the compiled loop does with them
(``loop_gates``) and the flags that set them on a deployed server (``sglang.flags``, ``tensorrt_llm.options``: the
recipe writes them).

The modules: ``vllm`` (vLLM V1), ``sglang``, ``tensorrt_llm`` (TensorRT-LLM's PyTorch backend), ``atom`` (AMD's
ATOM) and ``legacy`` (engines of 2023-24). A knob only one engine reads, set on another, is an error naming the key.
A module whose engine refuses more, or holds new requests back, defines ``check(server, path)`` and
``loop_gates(server)``.
"""

from __future__ import annotations

import dataclasses
from types import ModuleType

from ..errors import ScenarioError
from . import atom, legacy, sglang, tensorrt_llm, vllm
from .knob import Knob, all_knobs, knobs_of

MODULES: dict[str, ModuleType] = {"vllm": vllm, "sglang": sglang, "tensorrt-llm": tensorrt_llm, "legacy": legacy,
                                  "atom": atom}
# The keys only one engine reads, and that engine.
OWN_KEYS: dict[str, str] = {knob.key: knob.engine for knob in all_knobs() if knob.own}

# The compiled loop's gates when nothing holds a new request back.
NO_GATES = {"recv_interval": 1, "adp_balance": (0, 0, 0), "prefill_delay": (0, 0.0, 0, 0, 0.0)}

__all__ = ["Knob", "MODULES", "NO_GATES", "OWN_KEYS", "check", "hold_words", "knobs_of", "loop_gates"]


def check(server, path: str) -> None:
    """A ``ScenarioError`` naming the key when ``server`` sets a knob its engine does not have, or one its
    engine's release refuses beside another setting."""
    defaults = {f.name: f.default for f in dataclasses.fields(server)}
    for key, owner in OWN_KEYS.items():
        if owner != server.engine and getattr(server, key) != defaults[key]:
            raise ScenarioError(f"{path}.{key} = {getattr(server, key)} is a knob of {MODULES[owner].NAME}'s "
                                f"scheduler, and {path}.engine = {server.engine!r}; set {path}.engine = "
                                f"{owner!r} or leave {key} at {defaults[key]!r}")
    own_check = getattr(MODULES.get(server.engine), "check", None)  # an unknown engine: the table's check names it
    if own_check is not None:
        own_check(server, path)


def loop_gates(server) -> dict:
    """What the compiled loop's gates (``engine.sim.kernel.gates``) take from ``server``'s scheduler:
    ``recv_interval`` (1: new requests read at every iteration), ``adp_balance`` (ranks, batching wait
    iterations, time-out iterations; ranks 0: no balance gate) and ``prefill_delay`` (ranks, target fill, most turns
    held, stall turns, KV watermark; ranks 0: no delayer)."""
    gates = dict(NO_GATES)
    own_gates = getattr(MODULES[server.engine], "loop_gates", None)  # an engine with no gate of its own: none
    if own_gates is not None:
        gates.update(own_gates(server))
    return gates


def hold_words(server) -> str:
    """What holds new requests back in ``server``'s engine, in words with the key that sets it ("" when nothing
    does: the diagnosis then says nothing of it)."""
    words = getattr(MODULES[server.engine], "hold_words", None)
    return words(server) if words is not None and any(loop_gates(server)[k] != v for k, v in NO_GATES.items()) \
        else ""
