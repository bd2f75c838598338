"""A user's own price list (engine.decide.price_list): read within bounds, every bad cell one line naming its row
and column, and a plan that rents through it instead of the built-in offers (CLI --price-list)."""

import base64
import re
from urllib.parse import parse_qs, urlparse

import pytest

import engine
from conftest import REPO
from engine.cli import main
from engine.decide.cost import offers_table, priced_by
from engine.decide.plan_text import alternatives_frame, summary_line
from engine.decide.planner import Question, plan
from engine.decide.price_list import MAX_BYTES, price_list_csv, price_list_label, read_price_list
from engine.decide.report import PRICE_LIST_FILE, report_html
from engine.decide.targets import Target
from engine.scenario.config import read_toml
from engine.scenario.link import decode

LIST = REPO / "tests" / "fixtures" / "price_lists" / "two_offers.csv"
HEADER = LIST.read_text().splitlines()[0]
GOOD_ROW = LIST.read_text().splitlines()[1]
ARTICLE = read_toml(REPO / "data" / "scenarios" / "article_mixed_8xa100.toml")


def with_row(row: str) -> bytes:
    return f"{HEADER}\n{row}\n".encode()


def test_a_price_list_reads_as_offers_and_replaces_the_built_in_ones_while_in_force():
    rows = read_price_list(LIST.read_bytes())
    assert [r[0] for r in rows] == ["our-h100-reserved", "our-h200-spot"] and rows[0][5] == 15.0
    with priced_by(rows):
        assert list(offers_table().index) == ["our-h100-reserved", "our-h200-spot"]
    assert "runpod-h100-sxm-secure" in offers_table().index, "outside it, offers.csv as always"


@pytest.mark.parametrize("row, message", [
    (GOOD_ROW.replace("H100-80G", "H100"), "row 2: gpu 'H100' is not one of"),
    (GOOD_ROW.replace("15.00,15.00", "15.00,9.00"), "row 2: price_high '9.00' is below price_low"),
    (GOOD_ROW.replace("15.00,15.00", "abc,15.00"), "row 2: price_low 'abc' is not a number"),
    (GOOD_ROW.replace(",USD,", ",EUR,"), "row 2: currency 'EUR' is not one of CNY, USD"),
    (GOOD_ROW.replace(",reserved,", ",weekly,"), "row 2: terms 'weekly' is not one of on-demand"),
    (GOOD_ROW.replace(",false,", ",maybe,"), "row 2: estimate 'maybe' must be true or false"),
    (GOOD_ROW.replace("2026-11-20", "20/11/2026"), r"row 2: as_of '20/11/2026' is not a date \(YYYY-MM-DD\)"),
    (GOOD_ROW.replace("H100-80G,8,8", "H100-80G,1.5,8"), "row 2: gpus_per_unit '1.5' must be a whole number"),
])
def test_a_bad_cell_is_one_line_naming_its_row_and_column(row, message):
    with pytest.raises(engine.ScenarioError, match=message):
        read_price_list(with_row(row))


def test_a_bad_file_is_one_line_in_bounded_memory():
    with pytest.raises(engine.ScenarioError, match="lacks the column\\(s\\) terms"):
        read_price_list(HEADER.replace(",terms", "").encode() + b"\n")
    with pytest.raises(engine.ScenarioError, match="named twice"):
        read_price_list(f"{HEADER}\n{GOOD_ROW}\n{GOOD_ROW}\n".encode())
    with pytest.raises(engine.ScenarioError, match="holds no offer"):
        read_price_list(f"{HEADER}\n".encode())
    with pytest.raises(engine.ScenarioError, match="a price list may be at most 1,024 KiB"):
        read_price_list(b"x" * (MAX_BYTES + 1))
    with pytest.raises(engine.ScenarioError, match="not UTF-8"):
        read_price_list(b"\xff\xfe" + HEADER.encode("utf-16-le"))


def test_a_plan_rents_through_the_price_list_only():
    rows = read_price_list(LIST.read_bytes())
    question = Question((Target("interactive", "ttft_p99_ms", 1000.0),), seeds=2, requests=600, prices="any",
                        price_list=rows)
    answer = plan(ARTICLE, question)
    plans = [answer["recommendation"], *answer["alternatives"]]
    assert plans[0] is not None and {p["offer"] for p in plans} <= {"our-h100-reserved", "our-h200-spot"}
    firm = plan(ARTICLE, Question(question.targets, seeds=2, requests=600, price_list=rows))
    assert {p["offer"] for p in [firm["recommendation"], *firm["alternatives"]]} == {"our-h100-reserved"}, \
        "a latency target: the spot offer of the list is not rented"
    with pytest.raises(engine.ScenarioError, match="offer 'runpod-h100-sxm-secure' is not in"):
        Question(question.targets, offers=("runpod-h100-sxm-secure",), price_list=rows)


def test_the_report_names_and_attaches_the_price_list_its_link_cannot_carry():
    content = LIST.read_bytes()
    rows = read_price_list(content)
    named = price_list_label("acme prices.csv", content, rows)
    assert re.fullmatch(r"acme prices\.csv, 2 offers, sha256 [0-9a-f]{12}", named)
    question = Question((Target("interactive", "ttft_p99_ms", 1000.0),), seeds=2, requests=400, price_list=rows,
                        price_list_named=named)
    page = report_html(ARTICLE, question, plan(ARTICLE, question), "http://lab.example:8501", "2026-12-06 08:00 UTC")
    assert f"Priced with your own price list ({named}), attached at the end: upload it again" in page
    link = next(u for u in re.findall(r'href="([^"]+)"', page) if u.startswith("http://lab.example"))
    view = decode(parse_qs(urlparse(link.replace("&amp;", "&")).query)["v"][0])
    assert view["plan_price_list_named"] == named, "the link names the list, so the page asks for it again"
    attached = re.search(rf'download="{PRICE_LIST_FILE}" href="data:text/plain;base64,([^"]+)"', page)
    assert attached and read_price_list(base64.b64decode(attached.group(1))) == rows, "the list, whole, read back"
    built_in = Question(question.targets, seeds=2, requests=400)
    assert PRICE_LIST_FILE not in report_html(ARTICLE, built_in, plan(ARTICLE, built_in), None, "2026-12-06 08:00 UTC")


def test_a_price_list_written_back_reads_as_the_same_offers_with_formulas_defused():
    rows = read_price_list(LIST.read_bytes())
    assert read_price_list(price_list_csv(rows).encode()) == rows
    hostile = read_price_list(with_row(GOOD_ROW.replace("our-h100-reserved", "=HYPERLINK(1)")))
    assert "\n'=HYPERLINK(1)," in price_list_csv(hostile)


def test_at_one_price_the_plan_that_uses_the_rented_node_comes_first_and_idle_cards_are_said():
    """The list's H100 offer rents an 8-card node: every shape of an 8B model costs the same, so the one that leaves
    none of the paid cards idle is recommended and the others say how many they rent."""
    rows = read_price_list(LIST.read_bytes())
    small = {**ARTICLE, "server": {**ARTICLE["server"], "model": "Llama-3-8B"}}
    answer = plan(small, Question((Target("interactive", "ttft_p99_ms", 1000.0),), seeds=2, requests=400,
                                  price_list=rows))
    best, others = answer["recommendation"], answer["alternatives"]
    assert best["idle_cards"] == 0 and best["cards"] == 8
    one_card = next(p for p in others if p["cards"] == 1)
    assert one_card["monthly_cost"] == best["monthly_cost"] and one_card["idle_cards"] == 7
    assert "(1 card of the 8 rented, " in summary_line(one_card)
    assert "1 of the 8 rented" in alternatives_frame(others)["cards"].tolist()


def test_plan_takes_a_price_list_file(capsys):
    status = main(["plan", str(REPO / "data" / "scenarios" / "article_mixed_8xa100.toml"), "--target",
                   "interactive.ttft_p99_ms=1000", "--seeds", "2", "--requests", "400", "--price-list", str(LIST)])
    out = capsys.readouterr().out
    assert status == 0 and "through our-h100-reserved" in out
    assert main(["plan", str(REPO / "data" / "scenarios" / "article_mixed_8xa100.toml"), "--target",
                 "interactive.ttft_p99_ms=1000", "--price-list", str(LIST.with_name("none.csv"))]) == 2


@pytest.mark.parametrize("content, line", [
    (with_row(GOOD_ROW.replace("our-h100-reserved", "x" * 140_000)), 2),  # csv.Error: field larger than field limit
    (f"{HEADER}\n{GOOD_ROW}\n{GOOD_ROW.replace('Our cloud', 'y' * 200_000)}\n".encode(), 3),
    (("z" * 140_000 + "," + HEADER).encode(), 1),
])
def test_a_cell_longer_than_the_csv_modules_limit_is_one_line_naming_its_line(content, line):
    assert len(content) < MAX_BYTES
    with pytest.raises(engine.ScenarioError) as caught:
        read_price_list(content, "price list 'big.csv'")
    assert str(caught.value) == (f"price list 'big.csv' line {line}: a cell of more than 131,072 characters; a price "
                                 f"list's cells hold at most 500 (one offer per row)")


def test_any_other_csv_error_is_one_line_too(monkeypatch):
    import csv

    from engine.decide import price_list

    class Broken(csv.DictReader):
        @property
        def fieldnames(self):
            raise csv.Error("something the csv module refuses")

    monkeypatch.setattr(price_list.csv, "DictReader", Broken)
    with pytest.raises(engine.ScenarioError, match="^price list line 1: not a readable CSV line \\('something the csv "
                                                   "module refuses'\\); save it as CSV \\(UTF-8\\)$"):
        read_price_list(LIST.read_bytes())


def test_a_price_list_with_carriage_returns_for_line_ends_reads_as_the_same_offers():
    """A spreadsheet's "CSV (Macintosh)" ends lines with CR alone: the csv module refused it ("new-line character
    seen in unquoted field"), an internal error."""
    assert read_price_list(LIST.read_bytes().replace(b"\n", b"\r")) == read_price_list(LIST.read_bytes())


def test_plan_says_one_line_for_a_price_list_with_a_cell_too_long(tmp_path, capsys):
    path = tmp_path / "big.csv"
    path.write_bytes(with_row(GOOD_ROW.replace("our-h100-reserved", "x" * 140_000)))
    status = main(["plan", str(REPO / "data" / "scenarios" / "article_mixed_8xa100.toml"), "--target",
                   "interactive.ttft_p99_ms=1000", "--price-list", str(path)])
    err = capsys.readouterr().err.strip()
    assert status == 2 and err == (f"error: --price-list {str(path)!r} line 2: a cell of more than 131,072 "
                                   f"characters; a price list's cells hold at most 500 (one offer per row)")


def test_the_planner_says_one_line_for_an_uploaded_price_list_with_a_cell_too_long():
    """The Planner's upload reads the list as the command line does: one line, never the page's unexpected error."""
    from streamlit.testing.v1 import AppTest

    from conftest import shown
    from ui import state

    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=300)
    at.query_params[state.QUERY_KEY] = state.encode(ARTICLE)
    at.switch_page("pages/planner.py").run()
    content = with_row(GOOD_ROW.replace("our-h100-reserved", "x" * 140_000))
    at.file_uploader(key="plan_price_list").set_value([("big.csv", content, "text/csv")]).run()
    assert not at.exception
    assert shown(at.error) == ["price list big.csv line 2: a cell of more than 131,072 characters; a price list's "
                               "cells hold at most 500 (one offer per row)."]
