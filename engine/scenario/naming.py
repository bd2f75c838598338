"""A scenario's name after an edit: a preset's name describes the preset ("chat + batch, Llama-3-8B on A100-80G"),
so once the model, the GPU or the traffic change it would name something else in the sidebar, the Lab's subtitle,
a report's attachment and the command line's header. ``renamed`` gives such a scenario a name that describes it.
"""

from __future__ import annotations

import functools
import tomllib
from typing import Any, Mapping

from .caps import DEFAULT_CAPS
from .table_names import DATA_ROOT

# What a name describes, by which a change leaves a carried name behind: the model, the GPU, the classes by name, and
# the kind of traffic (steady arrivals, a day's shape, a curve, a trace). Not a rate or a length: "chat + batch,
# Llama-3-8B on A100-80G" still names the preset at another rate.
def _described(data: Mapping[str, Any]) -> tuple:
    server, workload = data.get("server") or {}, data.get("workload") or {}
    return (server.get("model"), server.get("gpu"), _traffic(workload),
            tuple(c.get("name") for c in workload.get("classes") or () if isinstance(c, Mapping)))


def _traffic(workload: Mapping[str, Any]) -> str:
    """The kind of traffic of a raw ``workload`` table, in words."""
    arrival = workload.get("arrival") or {}
    if workload.get("trace"):
        return "a replayed trace"
    if arrival.get("shape"):
        return f"the shape {arrival['shape']}"
    return "a rate curve" if arrival.get("rate_curve") is not None else "steady arrivals"


def described_name(data: Mapping[str, Any]) -> str:
    """A name that says what ``data`` runs, at most ``DEFAULT_CAPS.name_chars`` characters (an over-long model or GPU
    name is cut, so that the scenario's own check names that key, not the name): "chat, DeepSeek-R1 on H200, the
    shape servegen-reasoning-day"."""
    model, gpu, traffic, classes = _described(data)
    name = f"{' + '.join(str(c) for c in classes)}, {model or 'a model'} on {gpu or 'a GPU'}, {traffic}"
    limit = DEFAULT_CAPS.name_chars
    return name if len(name) <= limit else name[:limit - 1] + "…"


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
    was a preset's or a described one, and the edit changed what it described (``_described``). A name the user
    gave stays, and so does every name of an edit that left those alone."""
    name = before.get("name")
    if after.get("name") != name or _described(before) == _described(after):
        return after
    if name not in preset_names() and name != described_name(before):
        return after
    return {**after, "name": described_name(after)}
