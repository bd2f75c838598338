"""How fast the Lab answers one visitor's changes: seconds until the KPI cards and until the whole page.

One protocol session (``tests/streamlit_client.py``: the messages a browser sends and receives, without a browser
drawing, so the figures are the server's) opens the Lab on the default preset, then makes each change a visitor
makes, in order, as the browser sends it (the widget's new value, with every value changed before):

- the arrival rate one step up (its slider's arrow key);
- the policy set to the dynamic cost function (alpha, beta and gamma appear), then to fair queuing and back;
- alpha one step up (the dynamic policy's slider);
- the batch wait time-out set to 50 ms, then 100 ms.

For each change: seconds from sending it until the first KPI card (a metric element) arrives (a preview's, where
the page shows the first requests' cards while the full run computes), until the full run's first card, and until
the script run finished (the page complete). Every change is new to the server's caches (nothing it shows was run
before), as a visitor's usually is. ``--tree PATH`` runs the app of another checkout of the project (an older
commit, for a before/after table in one run), with this checkout's client.

Usage: python bench/bench_changes.py [--tree PATH] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from streamlit.proto.BackMsg_pb2 import BackMsg  # noqa: E402
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg  # noqa: E402

from conftest import app_server  # noqa: E402
from engine.scenario.config import Policy, Server, field_label  # noqa: E402
from engine.sim.policies import POLICY_LABELS  # noqa: E402
from streamlit_client import TIMEOUT_S, Session, open_page  # noqa: E402

RATE_LABEL = "Arrival rate (req/s)"
CARDS_HEADING = "Per-class results"
TIMES = ("cards_s", "full_cards_s", "page_s")
WIDGET_KINDS = ("slider", "selectbox", "number_input")


class Visitor(Session):
    """A session that keeps every widget it saw (by label) and every value it changed, and times each change to
    the first KPI card and to the end of the run."""

    def __init__(self, url: str):
        super().__init__(url)
        self.widgets: dict[str, object] = {}
        self.changed: dict[str, tuple[str, object]] = {}  # widget id -> (value field, value)

    def change(self, label: str, field: str, value) -> tuple[float, float, float]:
        """Set the widget whose label starts with ``label`` (``field``: its WidgetState value field) to ``value``:
        seconds until the first card, the full run's first card, and the page finished (``_timed``)."""
        widget = next(w for name, w in self.widgets.items() if name.startswith(label))
        self.changed[widget.id] = (field, value)
        request = BackMsg()
        request.rerun_script.query_string, request.rerun_script.page_name = self.query_string, self.page
        for widget_id, (kind, held) in self.changed.items():
            state = request.rerun_script.widget_states.widgets.add()
            state.id = widget_id
            if kind == "double_array_value":
                state.double_array_value.data.append(held)
            else:
                setattr(state, kind, held)
        return self._timed(request)

    def step(self, label: str) -> tuple[float, float, float]:
        """The slider ``label`` one step up, from the value last sent (or its default)."""
        slider = next(w for name, w in self.widgets.items() if name.startswith(label))
        held = self.changed.get(slider.id, (None, list(slider.default)[0]))[1]
        return self.change(label, "double_array_value", held + slider.step)

    def _timed(self, request: BackMsg) -> tuple[float, float, float]:
        """Send ``request``: seconds until the first KPI card (a preview's, when the page shows one), until the
        full run's first card (the first after the page's last "Per-class results" heading) and until the end."""
        started = time.monotonic()
        self.ws.send(request.SerializeToString())
        first_s = full_s = None
        while True:
            message = ForwardMsg()
            message.ParseFromString(self.ws.recv(timeout=TIMEOUT_S))
            kind = message.WhichOneof("type")
            now_s = time.monotonic() - started
            if kind == "page_info_changed":
                self.query_string = message.page_info_changed.query_string
            elif kind == "delta" and message.delta.WhichOneof("type") == "new_element":
                element = message.delta.new_element
                self._saw(element)
                if element.WhichOneof("type") == "heading" and element.heading.body == CARDS_HEADING:
                    full_s = None  # the cards that follow replace any shown before
                elif element.WhichOneof("type") == "metric":
                    first_s = now_s if first_s is None else first_s
                    full_s = now_s if full_s is None else full_s
            elif kind == "script_finished" and message.script_finished == ForwardMsg.FINISHED_SUCCESSFULLY:
                return (now_s if first_s is None else first_s), (now_s if full_s is None else full_s), now_s

    def _saw(self, element) -> None:
        kind = element.WhichOneof("type")
        if kind in WIDGET_KINDS:
            widget = getattr(element, kind)
            self.widgets[widget.label] = widget

    def open(self) -> tuple[float, float, float]:
        """Open the Lab (the default page) and learn its widgets (times as ``_timed``)."""
        request = BackMsg()
        request.rerun_script.query_string = ""
        return self._timed(request)


def changes(url: str) -> list[dict]:
    """Open the Lab, then make each change once: a row per change (what, card seconds, page seconds)."""
    visitor = Visitor(url)
    rows = [{"change": "open the Lab (its runs cached)", **dict(zip(TIMES, visitor.open()))}]
    alpha = field_label(Policy, "alpha")
    timeout = field_label(Server, "wait_timeout_ms")
    steps = [("arrival rate one step up", lambda: visitor.step(RATE_LABEL)),
             ("policy: dynamic", lambda: visitor.change("Policy", "string_value", POLICY_LABELS["dynamic"])),
             ("alpha one step up", lambda: visitor.step(alpha)),
             ("policy: fair queuing", lambda: visitor.change("Policy", "string_value", POLICY_LABELS["wfq"])),
             ("policy: dynamic again (cached)", lambda: visitor.change("Policy", "string_value",
                                                                      POLICY_LABELS["dynamic"])),
             ("wait time-out 50 ms", lambda: visitor.change(timeout, "double_value", 50.0)),
             ("wait time-out 100 ms", lambda: visitor.change(timeout, "double_value", 100.0)),
             ("arrival rate one more step up", lambda: visitor.step(RATE_LABEL))]
    for name, make in steps:
        rows.append({"change": name, **dict(zip(TIMES, make()))})
    visitor.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, default=REPO, help="the checkout whose app runs (default: this one)")
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args()
    with app_server(Path("/tmp/bench_changes_streamlit.log"), repo=args.tree.resolve()) as (url, _):
        open_page(url)  # the server's first page (loads the compiled simulator)
        rows = changes(url)
    print(f"One session on {args.tree.resolve()}, the Lab on the default preset:\n")
    print("| change | first KPI cards (s) | the full run's cards (s) | whole page (s) |\n|---|---:|---:|---:|")
    for row in rows:
        print(f"| {row['change']} | {row['cards_s']:.2f} | {row['full_cards_s']:.2f} | {row['page_s']:.2f} |")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
