"""The page ``bench/speed_figures.py`` writes: every figure it was given, with the date, the commit and the cores,
and only Markdown the manual's strict build takes (one table row per figure, no missing section)."""

import importlib.util

from conftest import REPO

SPEC = importlib.util.spec_from_file_location("speed_figures", REPO / "bench" / "speed_figures.py")
speed_figures = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(speed_figures)

SESSIONS = {"sessions": 30, "load_p50_s": 8.1, "load_max_s": 17.9, "change_p50_s": 9.9, "change_max_s": 20.8,
            "server_cpu_s": 58.7}
FIGURES = {"engine": {"sizes": [{"requests": 10_000, "wall_s": 0.028, "requests_per_s": 354_493},
                                {"requests": 100_000, "wall_s": 0.178, "requests_per_s": 561_328}]},
           "rerun": {"reruns_s": [0.09, 0.1, 0.11], "best_s": 0.09, "median_s": 0.1},
           "changes": [{"change": "arrival rate one step up", "cards_s": 0.05, "full_cards_s": 0.17, "page_s": 0.87}],
           "sessions": [("one `streamlit run`", SESSIONS),
                        ("`python -m ui.serve`, 2 processes", {**SESSIONS, "change_p50_s": 7.5})]}


def test_the_page_holds_every_figure_with_when_and_where():
    text = speed_figures.page(FIGURES, "2026-12-04", "abc1234", 2)
    assert "on 2026-12-04, commit abc1234, on a machine with 2 usable cores" in text
    assert "| 100,000 | 0.178 | 561,328 |" in text and "| 10,000 | 0.028 | 354,493 |" in text
    assert "best 0.090 s, median 0.100 s of 3 reruns" in text
    assert "| arrival rate one step up | 0.05 | 0.17 | 0.87 |" in text
    assert "| `python -m ui.serve`, 2 processes | 8.1 | 17.9 | 7.5 | 20.8 | 58.7 |" in text
    assert "## 30 sessions at once" in text
