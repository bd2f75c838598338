"""Files the app writes where a user says: never through a symbolic link, never half a file, never outside the
recipe's folder (engine.scenario.files.write_named); and CSV cells a spreadsheet would run as formulas written as
text (engine.scenario.csv_out)."""

import pandas as pd
import pytest

from conftest import SCENARIOS
from engine.cli import main
from engine.scenario.csv_out import csv_text
from engine.scenario.errors import ScenarioError
from engine.scenario.files import write_named


def test_a_named_file_is_written_whole_and_replaces_the_old_one(tmp_path):
    target = tmp_path / "plan.json"
    target.write_text("old")
    write_named(target, b"new", "--json")
    assert target.read_text() == "new"
    assert [p.name for p in tmp_path.iterdir()] == ["plan.json"], "no partial file left beside it"


def test_a_symbolic_link_is_refused_and_its_target_untouched(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    link = tmp_path / "plan.json"
    link.symlink_to(victim)
    with pytest.raises(ScenarioError, match="--json '.*plan.json' is a symbolic link; give the path of a plain file"):
        write_named(link, b"x", "--json")
    assert victim.read_text() == "keep me" and link.is_symlink()


def test_a_file_outside_the_folder_is_refused(tmp_path):
    (tmp_path / "recipe").mkdir()
    with pytest.raises(ScenarioError, match="is outside the folder"):
        write_named(tmp_path / "elsewhere.sh", b"x", "--recipe", inside=tmp_path / "recipe")


def test_plan_recipe_into_a_folder_holding_a_link_writes_nothing_through_it(tmp_path, capsys):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    folder = tmp_path / "recipe"
    folder.mkdir()
    (folder / "README.txt").symlink_to(victim)
    status = main(["plan", str(SCENARIOS / "article_mixed_8xa100.toml"), "--target", "interactive.ttft_p99_ms=1000",
                   "--gpus", "H100-80G", "--seeds", "2", "--requests", "300", "--recipe", str(folder)])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and err[-1].startswith("error: --recipe") and "is a symbolic link" in err[-1]
    assert victim.read_text() == "keep me"


def test_csv_cells_that_start_a_formula_are_written_as_text_numbers_as_numbers():
    frame = pd.DataFrame({"class": ["=HYPERLINK(\"http://x\")", "+cmd", "@sum", "-1+1", "chat"],
                          "ttft_ms": [-1.5, 2.0, 3.0, 4.0, 5.0]})
    lines = csv_text(frame).splitlines()
    assert lines[0] == "class,ttft_ms"
    assert [line.split(",")[0] for line in lines[2:]] == ["'+cmd", "'@sum", "'-1+1", "chat"]
    assert lines[1].startswith("\"'=HYPERLINK(") and lines[1].endswith(",-1.5"), "a negative number stays a value"


def test_the_requests_csv_of_a_class_named_like_a_formula_is_safe(tmp_path):
    scenario = (SCENARIOS / "example.toml").read_text().replace('name = "interactive"', 'name = "=1+2"', 1)
    assert '"=1+2"' in scenario
    path = tmp_path / "s.toml"
    path.write_text(scenario)
    out = tmp_path / "requests.csv"
    assert main(["run", str(path), "--set", "workload.num_requests=50", "--requests-csv", str(out)]) == 0
    text = out.read_text()
    assert "'=1+2" in text and ",=1+2" not in text and not text.startswith("=1+2")


def test_a_device_is_written_to_as_it_is_and_a_folder_refused(tmp_path):
    write_named("/dev/null", b"x", "--json")  # nothing to rename: written to
    with pytest.raises(ScenarioError, match="--json .* is a folder; give a file path"):
        write_named(tmp_path, b"x", "--json")
