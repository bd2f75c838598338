"""Every chapter's stated answer, held to its own experiment: the runs the page draws (every knob setting of the
chapter's scenario) must show the direction and size the answer claims (``[prediction] claims``), and what the
answer is about must be on the chart (its metric is a panel, its classes are series of that panel, with values).

A chapter whose text says one thing while its chart shows another fails here: change the answer to what the runs
show, or the experiment so that it shows what the chapter teaches. The runs are small (a few thousand requests a
setting) so that the whole file stays well under a minute once the kernel is compiled."""

from __future__ import annotations

import pytest

from engine.teach import workshop

PATHS = workshop.chapter_paths()


def runs_of(chapter: workshop.Chapter) -> dict:
    """The runs the page draws for ``chapter`` (none for a rental chapter: its chart is arithmetic)."""
    return {} if chapter.kind == workshop.RENTAL else workshop.run_options(chapter)


@pytest.mark.parametrize("path", PATHS, ids=[p.stem for p in PATHS])
def test_the_stated_answer_is_what_the_chart_shows(path):
    chapter = workshop.load_chapter(path)
    runs = runs_of(chapter)
    drawn = workshop.chart_values(chapter, runs)
    wrong = []
    for claim in chapter.claims:
        assert claim.metric in drawn, f"the answer is about {claim.metric}, the chart draws {list(drawn)}"
        for cls, label in ((claim.cls, claim.at), (claim.than_cls, claim.than)):
            assert cls in drawn[claim.metric], f"the answer is about {cls}, the chart draws {list(drawn[claim.metric])}"
            assert drawn[claim.metric][cls][label] is not None, f"{cls} {claim.metric} at {label} is not measured"
        mine, other = workshop.check_values(chapter, claim, runs)
        if not claim.holds(mine, other):
            wrong.append(f"{claim.describe()}: {mine:.4g} against {other:.4g}")
    assert not wrong, f"the answer {chapter.answer!r} does not hold: {wrong}"

