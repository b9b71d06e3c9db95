"""The command palette (ctrl+p): the app's actions by name, for those who forget the keys."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from textual.command import DiscoveryHit, Hit, Hits, Provider

# (title, help, app action, argument or None)
COMMANDS: tuple[tuple[str, str, str, str | None], ...] = (
    ("Page: Device", "live rails, clocks, temperatures (1)", "page", "device"),
    ("Page: Setup", "choose model, task, policy; start a run (2)", "page", "setup"),
    ("Page: Run", "the run in progress (3)", "page", "run"),
    ("Page: Compare", "the run against the board's baseline, MAXN or MAXN_SUPER (4)", "page", "compare"),
    ("Page: History", "stored runs and sweeps (5)", "page", "history"),
    ("Page: Sweep", "characterisation sweeps and the selector (6)", "page", "sweep"),
    ("Page: Fleet", "the boards of a Ray fleet: power, what each runs (7)", "page", "fleet"),
    ("Start experiment", "start the run the Setup page describes", "start_from_setup", None),
    ("Ask the selector", "what it would choose for the Setup page's workload (predicted)", "predict_from_setup", None),
    ("Pause / resume run", "at the next step boundary", "pause_resume", None),
    ("Cancel run", "stop at the next step boundary and restore the clocks", "cancel_run", None),
    ("Start or resume sweep", "the sweep the Sweep page describes", "start_sweep", None),
    ("Fleet sweep", "the Sweep page's workload on every board of the connected fleet", "fleet_sweep", None),
    ("Train selector", "from the store's sweeps of this device", "train_selector", None),
    ("Export selected run", "CSV of the run highlighted in History", "export_selected", None),
    ("Delete selected run", "the run highlighted in History (asks first)", "delete_selected", None),
    ("Help", "every page's keys, the Setup fields, the policies, where results are stored (? or F1)", "help",
     None),
    ("Quit", "cancel any run, restore the clocks, exit", "quit", None),
)


class SlmDvfsCommands(Provider):
    """Offers every action of the app by name."""

    def _callback(self, action: str, arg: str | None) -> Callable[[], object]:
        method = getattr(self.app, f"action_{action}")
        return partial(method, arg) if arg is not None else method

    async def discover(self) -> Hits:
        for title, help_text, action, arg in COMMANDS:
            yield DiscoveryHit(title, self._callback(action, arg), help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for title, help_text, action, arg in COMMANDS:
            score = matcher.match(title)
            if score > 0:
                yield Hit(score, matcher.highlight(title), self._callback(action, arg), text=title, help=help_text)
