"""Planner answers kept on the server for every session, under the hash of their question: the scenario, the
question and the version of the hardware tables (``planner.answer_key``). A link names that hash (``plan_answer``
in its view), so a colleague who opens it sees the answer at once while it is kept, and the same answer recomputed
(the planner is deterministic) once it has been dropped, or a new one when the tables changed since."""

from __future__ import annotations

from engine.scenario.caps import DEFAULT_CAPS, MIB
from engine.scenario.json_out import strict_json
from ui.result_cache import ResultCache

ANSWERS_MIB = 64  # answers are JSON of tens to hundreds of KiB: hundreds of them

_ANSWERS: ResultCache[dict] = ResultCache(ANSWERS_MIB * MIB, DEFAULT_CAPS.result_cache_s,
                                          lambda answer: len(strict_json(answer, indent=None)))


def get(key: str) -> dict | None:
    """The answer kept under ``key``, or None."""
    return _ANSWERS.get(key)


def put(key: str, answer: dict) -> None:
    """Keep ``answer`` under ``key`` for every session."""
    _ANSWERS.put(key, answer)
