"""The report ``bench/validate.py`` writes: every run it leaves out is counted with its reason, the silicon sample's
skipped runs and the runs that cannot be replayed as published alike, so no run drops out of the figures unseen."""

import importlib.util
import sys

from conftest import REPO
from engine.calibrate import silicon_sample
from engine.calibrate.calibration import replay_problem

sys.path.insert(0, str(REPO / "bench"))  # the script imports its neighbours as a script would
SPEC = importlib.util.spec_from_file_location("validate", REPO / "bench" / "validate.py")
validate = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(validate)


def test_the_report_counts_every_run_it_leaves_out_with_its_reason():
    rows = silicon_sample.validation_rows()[0]
    runs = rows.index.str.rsplit("-", n=1).str[0]
    unreplayable = next(run for run in dict.fromkeys(runs) if replay_problem(rows[runs == run].iloc[0]))
    replayable = next(run for run in dict.fromkeys(runs) if not replay_problem(rows[runs == run].iloc[0]))
    chosen = rows[runs.isin([unreplayable, replayable])]
    predicted = chosen[chosen.index.str.startswith(replayable)]
    text = validate.left_out(chosen, predicted, {"disaggregated (prefill and decode pools)": 3})
    assert "- disaggregated (prefill and decode pools): 3" in text
    assert "- cannot be replayed as published: server.tensor_parallel = n is not allowed" in text
    assert text.count("cannot be replayed") == 1 and text.rstrip().endswith(": 1")  # one run, not its two metrics
    assert validate.left_out(predicted, predicted, {}) == ""
