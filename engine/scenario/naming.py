"""A scenario's name after an edit: a preset's name describes the preset ("chat + batch, Llama-3-8B on A100-80G"),
so once the model, the GPU or the traffic change it would name something else in the sidebar, the Lab's subtitle,
a report's attachment and the command line's header. ``renamed`` gives such a scenario a name that describes it.
"""

from __future__ import annotations

import functools
import tomllib
from typing import Any, Mapping

from .table_names import DATA_ROOT

# What a name describes: a change to any of these (raw scenario keys) leaves a carried name behind.
NAMED_KEYS = (("server", "model"), ("server", "gpu"), ("workload", "arrival"), ("workload", "trace"),
              ("workload", "classes"))


def _value(data: Mapping[str, Any], path: tuple[str, str]) -> Any:
    table = data.get(path[0])
    return table.get(path[1]) if isinstance(table, Mapping) else None


def described_name(data: Mapping[str, Any]) -> str:
    """A name that says what ``data`` runs: "DeepSeek-R1 on H200, 4 req/s on average" ("a replayed trace" for a
    trace, "on average" where the rate follows a curve or a day shape)."""
    server, workload = data.get("server") or {}, data.get("workload") or {}
    arrival = workload.get("arrival") or {}
    if workload.get("trace"):
        traffic = "a replayed trace"
    else:
        rate = arrival.get("rate_per_s")
        moving = bool(arrival.get("shape") or arrival.get("curve"))
        traffic = (f"{rate:,.3g} req/s{' on average' if moving else ''}" if isinstance(rate, (int, float))
                   else "its own traffic")
    return f"{server.get('model', 'a model')} on {server.get('gpu', 'a GPU')}, {traffic}"


@functools.cache
def preset_names() -> frozenset[str]:
    """The names of the shipped scenarios (``data/scenarios``)."""
    names = set()
    for path in (DATA_ROOT / "scenarios").glob("*.toml"):
        with path.open("rb") as handle:
            names.add(str(tomllib.load(handle).get("name", "")))
    return frozenset(names)


def renamed(before: Mapping[str, Any], after: dict) -> dict:
    """``after`` (an edit of ``before``) with a name that describes it where it kept ``before``'s name, that name
    was a preset's or a described one, and the edit changed what it described (``NAMED_KEYS``). A name the user
    gave stays, and so does every name of an edit that left those keys."""
    name = before.get("name")
    if after.get("name") != name or all(_value(before, k) == _value(after, k) for k in NAMED_KEYS):
        return after
    if name not in preset_names() and name != described_name(before):
        return after
    return {**after, "name": described_name(after)}
