"""The manual and the front door: the site builds with --strict (a broken link or a missing page fails), its
generated pages hold everything the code defines, and README.md stays a short front door whose links all work."""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO
from engine import cli
from engine.scenario.caps import limits_fields
from engine.scenario.config import keys_reference
from engine.sim.policies import POLICIES, params_of
from engine.teach import workshop

README_MAX_LINES = 200
QUIET = {"NO_MKDOCS_2_WARNING": "1", "DISABLE_MKDOCS_2_WARNING": "true"}  # the theme's and a plugin's banners
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("site")
    built = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(folder)],
                           cwd=REPO, env={**os.environ, **QUIET}, capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-3000:]
    return folder


def page_text(site: Path, page: str) -> str:
    """The words of a built page, tags removed and entities read, spaces collapsed."""
    raw = (site / page / "index.html").read_text()
    words = re.sub(r"<[^>]+>", " ", re.sub(r"</?(?:code|a|em|strong|span)\b[^>]*>", "", raw))  # inline tags: no space
    return " ".join(html.unescape(words).split())


def test_the_site_builds_strictly_with_every_page(site):
    for page in ("app/lab", "app/workshop", "cli", "reference/cli", "reference/keys", "method", "validation",
                 "speed", "article", "serving", "safety", "contributing"):
        assert (site / page / "index.html").exists(), page


def test_the_keys_page_is_generated_from_the_configuration(site):
    text = page_text(site, "reference/keys")
    missing = [row["key"] for row in keys_reference() if row["key"] not in text]
    assert not missing, f"keys missing from the built keys page: {missing[:5]}"
    assert all(name in text for name in limits_fields())


def test_the_safety_page_lists_every_limit(site):
    text = page_text(site, "safety")
    assert "<!-- generated" not in (site / "safety" / "index.html").read_text()
    assert all(name in text for name in limits_fields())


def test_the_cli_page_holds_every_command_and_option(site):
    text = page_text(site, "reference/cli")
    parser = cli.command_parser()
    commands = next(a for a in parser._actions if a.dest == "command")
    for name, sub in commands.choices.items():
        assert f"{name} " in text and sub.prog in text, name
        options = [o for a in sub._actions if a.dest != "help" for o in a.option_strings]  # --help: not listed
        assert all(option in text for option in options), (name, [o for o in options if o not in text])
    assert "the metric must stay at or below this (required)" in text  # size --max-ms: the parser says required
    assert "scenario scenario TOML file (see data/scenarios/) --set" in text  # a positional: its name, not "required"
    assert "one of: ttft_p50_ms" in text  # size --metric: its choices
    assert "largest fleet tried per GPU (default 16)" in text  # size --max-replicas: its default
    assert "(default overall) (default" not in text


def test_the_workshop_page_lists_every_chapter(site):
    text = page_text(site, "app/workshop")
    assert "<!-- generated" not in (site / "app" / "workshop" / "index.html").read_text()
    for chapter in workshop.load_chapters():
        assert chapter.id in text and " ".join(chapter.title.split()) in text, chapter.id
        assert " ".join(chapter.question.split()) in text, chapter.id
    for i, chapter in enumerate(workshop.load_chapters(), start=1):  # each chapter's effect, from its runs
        runs = {} if chapter.kind == workshop.RENTAL else workshop.run_options(chapter)
        assert f"{i} {' '.join(chapter.title.split())} {workshop.effect_text(chapter, runs)}" in text, chapter.id


def test_readme_is_a_short_front_door():
    lines = (REPO / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; the manual in docs/ holds the rest"


def test_every_relative_link_in_the_readme_points_at_a_file():
    targets = LINK.findall((REPO / "README.md").read_text())
    relative = [t.split("#")[0] for t in targets if not re.match(r"[a-z]+:", t) and not t.startswith("#")]
    assert relative, "the README links into the manual"
    missing = [t for t in relative if not (REPO / t).is_file()]
    assert not missing, f"README links to missing files: {missing}"


def test_the_lab_page_says_which_keys_each_policy_reads(site):
    text = page_text(site, "app/lab")
    assert "<!-- generated" not in (site / "app" / "lab" / "index.html").read_text()
    for name, spec in POLICIES.items():
        keys = ", ".join(p.key for p in params_of(name)) or "none"
        assert f"{' '.join(spec.label.split())} ({name}) {' '.join(spec.key.split())} {keys}" in text, name
