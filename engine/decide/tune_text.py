"""The tuner's answer in words: what was searched, the best point against the scenario as it is, and the
``[policy]`` block to paste. Shared by the command line and the Lab's tuning panel."""

from __future__ import annotations

from ..scenario.metric_table import metric
from ..sim.policies import POLICY_LABELS


def settings_text(block: dict) -> str:
    """The tuned values in words: "alpha (waiting) 9.38, SLA for classes without one 54,400 ms"."""
    return ", ".join(block["settings"]) or "as in the scenario"


def rows(answer: dict) -> list[tuple[str, str, str]]:
    """(what, baseline, best): the objective and every constraint, each in its metric's own unit."""
    shown = [(answer["objective"]["class"], answer["objective"]["metric"], answer["objective"]["text"])]
    shown += [(c["class"], c["metric"], c["text"]) for c in answer["constraints"]]
    out = []
    for cls, key, what in shown:
        m = metric(key)
        values = [m.value(answer[which]["metrics"][cls]) for which in ("baseline", "best")]
        out.append((what, *(m.unit_text(v) for v in values)))
    return out


def runs_text(answer: dict) -> str:
    """"2 seeds x 3,000 requests": what each candidate ran."""
    return f"{answer['seeds']} seed{'s' if answer['seeds'] != 1 else ''} x {answer['requests']:,} requests"


def baseline_header(answer: dict) -> str:
    return f"scenario as it is ({POLICY_LABELS[answer['baseline']['policy']['name']]})"


def verdict(answer: dict) -> str:
    """One sentence: the best point, and whether it meets every constraint."""
    best = answer["best"]
    name = POLICY_LABELS[best["policy"]["name"]]
    if not best["feasible"]:
        return (f"No candidate met every constraint; the closest: {name}, {settings_text(best)}. Relax a "
                f"constraint, add capacity, or widen the search.")
    return f"Best: {name}, {settings_text(best)}" + (", every constraint met." if answer["constraints"] else ".")


def cut_text(answer: dict) -> str | None:
    """Why the search stopped short of its candidates (the best of those evaluated is the answer); None when it
    did not."""
    if not answer.get("cut"):
        return None
    return (f"Cut short: {answer['cut']}, after {answer['evaluations']:,} candidates; the best of them is shown. "
            f"Ask for fewer candidates, seeds or requests per run to search them all.")


FLAT_TEXT = ("The objective hardly moved over the search: at this load the parameters make no difference (requests "
             "rarely wait for each other). Raise the arrival rate, or tune where the fleet is busier.")


def tune_text(answer: dict, scenario_name: str) -> str:
    """The whole answer for a terminal."""
    lines = [f"Tuning {scenario_name!r}: {answer['objective']['text']}"
             + (f" subject to {'; '.join(c['text'] for c in answer['constraints'])}" if answer["constraints"] else ""),
             f"{answer['evaluations']} candidates x {runs_text(answer)} (the "
             f"same requests for every candidate), {answer['wall_s']:.1f} s on {answer['workers']} workers",
             *([cut] if (cut := cut_text(answer)) else []), verdict(answer), *([FLAT_TEXT] if answer["flat"] else []),
             ""]
    table = [("", baseline_header(answer), "best"), *rows(answer)]
    widths = [max(len(r[i]) for r in table) for i in range(3)]
    lines += ["  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(r, widths)))
              for r in table]
    lines += ["", "Paste into the scenario:", answer["toml"].rstrip()]
    return "\n".join(lines)
