"""The manual's reference pages, generated from the code at build time (run by mkdocs-gen-files, see mkdocs.yml).

- ``reference/keys.md``: every scenario key and the safety limits (``engine.scenario.config.keys_markdown``);
- ``reference/cli.md``: every command and option of ``python -m engine``, read from its argparse parser;
- ``app/workshop.md``: the chapter list, from ``data/workshop/*.toml`` through the workshop's own loader, and each
  chapter's effect from its own runs (``workshop.effect_text``);
- ``safety.md``: the limits table (``engine.scenario.caps.caps_markdown``);
- ``app/lab.md``: which ``[policy]`` keys each policy reads (``engine.sim.policies.params_of``);
- ``method.md``: each engine's scheduler knobs, their flags, defaults and sources (``engine.scenario.schedulers``).

A hand-written page holds a marker (``<!-- generated: NAME -->``) where its generated part goes, so that its
prose stays in docs/ and the figures come from the code. Nothing here is copied by hand, so nothing can go stale.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import mkdocs_gen_files

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from engine import cli  # noqa: E402
from engine.scenario.caps import caps_markdown  # noqa: E402
from engine.scenario.config import keys_markdown  # noqa: E402
from engine.scenario.schedulers import MODULES, knobs_of  # noqa: E402
from engine.sim.policies import POLICIES, params_of  # noqa: E402
from engine.teach import workshop  # noqa: E402

WIDE_PAGE = "---\nhide:\n  - toc\n---\n"  # front matter: no table of contents, its width to the keys table
USAGE_WIDTH_CHARS = 76  # usage lines wrap here (the width of a code block), whatever terminal builds the site


def cell(text: str) -> str:
    """``text`` as one Markdown table cell (a bar would end the cell, a newline the row)."""
    return " ".join(str(text).split()).replace("|", "\\|")


def argument_name(action: argparse.Action) -> str:
    """How the argument is typed: its option strings with their value, or a positional's name."""
    if not action.option_strings:
        return action.metavar or action.dest
    value = "" if action.nargs == 0 else " " + (action.metavar or action.dest.upper())
    return ", ".join(option + value for option in action.option_strings)


def argument_meaning(action: argparse.Action) -> str:
    """The help text, then what the parser itself knows: the choices, whether required, the default (unless the
    help text gives it)."""
    notes = []
    if action.choices:
        notes.append("one of: " + ", ".join(f"`{c}`" for c in action.choices))
    if action.required and action.option_strings:
        notes.append("required")
    if action.default not in (None, False, [], argparse.SUPPRESS) and "default" not in (action.help or ""):
        notes.append(f"default `{action.default}`")
    return cell((action.help or "") + ("" if not notes else f" ({'; '.join(notes)})"))


def usage(parser: argparse.ArgumentParser) -> str:
    formatter = argparse.HelpFormatter(parser.prog, width=USAGE_WIDTH_CHARS)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups)
    return formatter.format_help().strip()


def cli_markdown(parser: argparse.ArgumentParser) -> str:
    """One section per command: what it does, its usage line and a table of its arguments."""
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    lines = ["# Every option of `python -m engine`", "",
             "Generated from the command line's own parser (`engine/cli.py`) when the manual is built; "
             "[Commands and answers](../cli.md) shows them at work and describes what each answer holds. "
             f"Invalid input exits with code {cli.EXIT_INVALID} and one line, a plan or a tuning cut short by its time "
             f"limit with code {cli.EXIT_CUT} and a warning line, an internal error with code {cli.EXIT_INTERNAL}.",
             ""]
    for summary in commands._choices_actions:
        sub = commands.choices[summary.dest]
        what = cell(summary.help)
        lines += [f"## {summary.dest}", "", what[:1].upper() + what[1:] + ".", "", "```text", usage(sub), "```", ""]
        arguments = [a for a in sub._actions if not isinstance(a, argparse._HelpAction)]
        if arguments:
            lines += ["| argument | meaning |", "|---|---|"]
            lines += [f"| `{argument_name(a)}` | {argument_meaning(a)} |" for a in arguments]
            lines.append("")
    return "\n".join(lines)


def keys_page() -> str:
    return (WIDE_PAGE + "\n# Every scenario key\n\n"
            "Generated from the configuration's own metadata (`engine/scenario/config.py`) when the manual is built; "
            "`python -m engine keys` prints the same tables. A scenario file sets these keys in TOML tables "
            "(`[workload]`, `[server]`, ...), a link or `--set` by their dotted names "
            "(`--set workload.classes.offline.share=0.4`: classes by index or name). "
            "[Presets, distributions, traces](../scenarios.md) describes the presets and the formats.\n\n"
            + keys_markdown())


def chapters_markdown() -> str:
    """Every workshop chapter in the order the page shows them: its link id, title and question."""
    lines = ["| chapter | title | question |", "|---|---|---|"]
    for chapter in workshop.load_chapters():
        lines.append(f"| `{chapter.id}` | {cell(chapter.title)} | {cell(chapter.question)} |")
    return "\n".join(lines) + "\n"


def effects_markdown() -> str:
    """Each chapter's effect, from its own runs at its preset's load (one seed): the figures its "what you should
    see" cites (``workshop.effect_text``), so the table is never stale."""
    lines = ["| chapter | what it shows |", "|---|---|"]
    for i, chapter in enumerate(workshop.load_chapters(), start=1):
        runs = {} if chapter.kind == workshop.RENTAL else workshop.run_options(chapter)
        lines.append(f"| {i} {cell(chapter.title)} | {cell(workshop.effect_text(chapter, runs))} |")
    return "\n".join(lines) + "\n"


def policy_params_markdown() -> str:
    """Which ``[policy]`` keys each policy reads (``policies.params_of``: the Lab draws those controls only); a key
    a policy does not read stays in the scenario and its link when the policy changes, so switching back restores
    it."""
    lines = ["| policy | orders by | keys it reads |", "|---|---|---|"]
    for name, spec in POLICIES.items():
        keys = ", ".join(f"`{p.key}`" for p in params_of(name)) or "none"
        lines.append(f"| {cell(spec.label)} (`{name}`) | {cell(spec.key)} | {keys} |")
    return "\n".join(lines) + "\n"


def schedulers_markdown() -> str:
    """Each engine's scheduler knobs (``data/hardware/scheduler_knobs.csv``): the key, the engine's flag, its default
    in the release its module read, and the file it comes from."""
    lines = ["| engine (release read) | key | engine's flag | default | source |", "|---|---|---|---|---|"]
    for engine_name, module in MODULES.items():
        for knob in knobs_of(engine_name):
            release = f"{module.NAME} {module.RELEASE}".strip()
            lines.append(f"| {cell(release)} | `server.{knob.key}` | `{cell(knob.flag)}` | {cell(knob.default)} | "
                         f"{cell(knob.source)} |")
    return "\n".join(lines) + "\n"


def fill(page: str, name: str, text: str) -> None:
    """Put ``text`` where ``page`` has its ``<!-- generated: NAME -->`` marker (tests/test_docs.py checks that the
    built page holds it)."""
    with mkdocs_gen_files.open(page, "r") as source:
        written = source.read()
    with mkdocs_gen_files.open(page, "w") as target:
        target.write(written.replace(f"<!-- generated: {name} -->", text))


with mkdocs_gen_files.open("reference/keys.md", "w") as keys_file:
    keys_file.write(keys_page())
with mkdocs_gen_files.open("reference/cli.md", "w") as cli_file:
    cli_file.write(cli_markdown(cli.command_parser()))
fill("app/workshop.md", "workshop chapters", chapters_markdown())
fill("app/workshop.md", "workshop effects", effects_markdown())
fill("safety.md", "safety limits", caps_markdown())
fill("app/lab.md", "policy parameters", policy_params_markdown())
fill("method.md", "scheduler knobs", schedulers_markdown())
