"""Page 5: runs and sweeps from the results store: open, compare two, export, delete."""

from __future__ import annotations

import datetime

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.reactive import var
from textual.widgets import DataTable, Static

from engine.results.format import format_setting, format_when, sweep_progress, sweep_state
from engine.results.records import RunRecord, SweepRecord, several_boards
from tui.fmt import energy, sig3
from tui.messages import (
    DeleteRequested,
    ExportRequested,
    PairRequested,
    RecordsRequested,
    RunHighlighted,
    RunOpenRequested,
    SweepOpenRequested,
)
from tui.screens.base import PageScreen
from tui.state import StoredRecords


RUN_ACTIONS = frozenset({"mark", "compare_marked", "export", "delete"})  # keys that act on the runs table


class HistoryScreen(PageScreen):
    """The run keys (m, c, e, d) act on the runs table's highlighted run whatever has the focus (a
    key brings the focus there, so the run it acts on is the one shown highlighted), and the
    footer offers them only while there are runs. `o` / enter open the focused table's row."""

    AUTO_FOCUS = "#runs"  # a table takes arrows and enter, not digits: the pages still switch
    PAGE = "history"
    TITLE_TEXT = "5 History"
    BINDINGS = [
        Binding("enter", "open", "Open", show=False),
        Binding("o", "open", "Open"),
        Binding("m", "mark", "Mark"),
        Binding("c", "compare_marked", "Compare 2"),
        Binding("e", "export", "Export"),
        Binding("d", "delete", "Delete"),
        Binding("r", "reload", "Reload"),
    ]

    # Bound to the app's records: what the store held when last read (each time the page is shown, and `r`).
    records: var[StoredRecords | None] = var(None, init=False)

    def __init__(self) -> None:
        super().__init__()
        self.marked: list[int] = []
        self._runs: list[RunRecord] = []
        self._sweeps: list[SweepRecord] = []

    def compose_body(self) -> ComposeResult:
        with Vertical(id="history-body"):
            # One space between columns (each cell leads with it), not Textual's two: 80 columns hold them all.
            yield DataTable(id="runs", cursor_type="row", zebra_stripes=True, classes="pane", cell_padding=0)
            yield DataTable(id="sweeps", cursor_type="row", classes="pane", cell_padding=0)
            yield Static("", id="history-status")

    def on_mount(self) -> None:
        runs = self.query_one("#runs", DataTable)
        runs.border_title = "Runs (m mark two, c compare, e export, d delete)"
        # `when` early and short, so that 80 columns show it whole: a narrow terminal cuts the tail.
        runs.add_columns(*(f" {c}" for c in ("id", "when", "workload", "policy", "energy", "time s", "src", "status")))
        sweeps = self.query_one("#sweeps", DataTable)
        sweeps.border_title = "Sweeps (o open)"
        sweeps.add_columns("id", *(f" {c}" for c in ("when", "workload", "space", "points", "src", "status")))

    # ------------------------------------------------------------------ data
    def on_screen_resume(self) -> None:
        self.tell(RecordsRequested())  # the store may have changed while the page was hidden

    def watch_records(self, records: StoredRecords | None) -> None:
        if records is not None:
            self.paint("records", self.draw_records)

    def draw_records(self) -> None:
        """The records bound last: runs (RunRecord) and sweeps as (SweepRecord, workload text, points stored)."""
        if self.records is None:
            return
        runs, sweeps = self.records.runs, self.records.sweeps
        self._runs = list(runs)
        self._sweeps = [s for s, _w, _n in sweeps]
        self.marked = [i for i in self.marked if any(r.id == i for r in runs)]
        table = self.query_one("#runs", DataTable)
        keep = table.cursor_row
        table.clear()
        this_year = this_year_text()
        for r in runs:
            mark = Text("●", style="bold magenta") if r.id in self.marked else Text(" ")
            workload = f"{r.model}/{r.task}" if r.model else "-"
            cells = (short_when(r.started_at, this_year), cut(workload, WORKLOAD_W), _policy(r)[:POLICY_W],
                     energy(r.energy_j), sig3(r.time_s), r.source.value, r.status)
            table.add_row(Text.assemble(mark, str(r.id)), *(f" {c}" for c in cells), key=str(r.id))
        if runs:
            table.move_cursor(row=min(keep, len(runs) - 1))
        st = self.query_one("#sweeps", DataTable)
        keep_sweep = st.cursor_row  # clear() puts the cursor on row 0: a next page must not move it
        st.clear()
        for s, workload, n in sweeps:
            space = s.space.get("space") or ("explicit" if s.space.get("settings") else "")
            method = s.space.get("method", "")
            space = space or ("" if method else "?")  # an imported sweep reads `import`
            method = "" if method == "run" and space else method  # a sweep that trains: the default, said by `fast`'s absence
            # points stored of those planned and the status as `slm-dvfs sweeps` says them: `15/60`, `abandoned, resumable`
            sweep_cells = (short_when(s.created_at, this_year), cut(workload, SWEEP_WORKLOAD_W),
                           cut(f"{space} {method}".strip(), SPACE_W), sweep_progress(s, n), s.source.value,
                           sweep_state(s))
            st.add_row(str(s.id), *(f" {c}" for c in sweep_cells), key=str(s.id))
        if sweeps:
            st.move_cursor(row=min(keep_sweep, len(sweeps) - 1))
        if not runs and not sweeps:
            self.say("The store holds no runs or sweeps yet.")
        elif not runs and self.focused is not st:
            st.focus()  # only sweeps: o and enter open them
        self._boards = several_boards(r.device for r in runs)
        self.refresh_bindings()  # the run keys are offered only while there are runs
        self._tell_highlighted()

    def _tell_highlighted(self) -> None:
        run = self.selected_run()
        self.tell(RunHighlighted(None if run is None else run.id))

    @on(DataTable.RowHighlighted, "#runs")
    def _run_highlighted(self, event: DataTable.RowHighlighted) -> None:
        """Which board the run is from, where the store's runs come from several of one kind; on the
        last row read, the next page of older runs is asked for (the store is read a page at a time)."""
        run = self.selected_run()
        if getattr(self, "_boards", False) and run is not None and run.device is not None:
            self.say(f"run {run.id}: {run.device.label()}")
        self._tell_highlighted()
        if self.records is not None and self.records.more_runs and event.cursor_row == len(self._runs) - 1:
            self.tell(RecordsRequested(more="runs"))

    @on(DataTable.RowHighlighted, "#sweeps")
    def _sweep_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if self.records is not None and self.records.more_sweeps and event.cursor_row == len(self._sweeps) - 1:
            self.tell(RecordsRequested(more="sweeps"))

    def say(self, text: str) -> None:
        self.query_one("#history-status", Static).update(text)

    def selected_run(self) -> RunRecord | None:
        table = self.query_one("#runs", DataTable)
        if not self._runs or table.cursor_row < 0 or table.cursor_row >= len(self._runs):
            return None
        return self._runs[table.cursor_row]

    def selected_sweep(self) -> SweepRecord | None:
        table = self.query_one("#sweeps", DataTable)
        if not self._sweeps or table.cursor_row < 0 or table.cursor_row >= len(self._sweeps):
            return None
        return self._sweeps[table.cursor_row]

    # ------------------------------------------------------------------ actions
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in RUN_ACTIONS and not self._runs:
            return False  # not offered: there is no run to act on
        return super().check_action(action, parameters)

    def _sweeps_focused(self) -> bool:
        return self.focused is self.query_one("#sweeps", DataTable)

    def _run_target(self) -> RunRecord | None:
        """The run a run key acts on: the runs table's highlighted one, the focus brought there
        (from the sweeps table, or from nothing) so that it is the one shown highlighted."""
        runs = self.query_one("#runs", DataTable)
        if self.focused is not runs and self._runs:
            runs.focus()
        run = self.selected_run()
        if run is None:
            self.say("the store holds no runs: run an experiment on Setup (2)")
        return run

    def action_reload(self) -> None:
        self.tell(RecordsRequested())

    @on(DataTable.RowSelected)
    def _row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self.action_open(sweeps=event.data_table.id == "sweeps")

    def action_open(self, sweeps: bool | None = None) -> None:
        if sweeps is None:  # the focused table's row; with neither focused, a run (a sweep if there are no runs)
            sweeps = self._sweeps_focused() or (not self._runs and bool(self._sweeps))
        if sweeps:
            sweep = self.selected_sweep()
            if sweep is not None:
                self.tell(SweepOpenRequested(sweep.id))
            return
        run = self.selected_run()
        if run is not None:
            self.tell(RunOpenRequested(run.id))

    def action_mark(self) -> None:
        run = self._run_target()
        if run is None:
            return
        if run.id in self.marked:
            self.marked.remove(run.id)
        else:
            self.marked = (self.marked + [run.id])[-2:]
        self.say("marked: " + (", ".join(f"run {i}" for i in self.marked) or "none")
                 + ("  (c compares them)" if len(self.marked) == 2 else ""))
        self.draw_records()  # its mark in the table

    def action_compare_marked(self) -> None:
        if len(self.marked) != 2:
            self.say("mark two runs with m first (the MAXN one, if any, is the baseline)")
            return
        a, b = self.marked
        self.tell(PairRequested(a, b))

    def action_export(self) -> None:
        run = self._run_target()
        if run is not None:
            self.tell(ExportRequested(run.id))

    def action_delete(self) -> None:
        run = self._run_target()
        if run is not None:
            self.tell(DeleteRequested(run.id))


# The name columns' widest text: at 80 columns the figures (energy, time) and their source stay in
# view whatever the names (a static setting's clocks, a long hub id are cut here; `o` shows them whole).
POLICY_W = 14
WORKLOAD_W = 18
# The sweeps' table: at 80 columns its points (`15/60`), source and status (`abandoned, resumable`) stay whole.
SWEEP_WORKLOAD_W = 14
SPACE_W = 10


def cut(text: str, width: int) -> str:
    """A name cut to `width` with an ellipsis (said: not silently truncated)."""
    return text if len(text) <= width else text[:width - 1] + "…"


def this_year_text() -> str:
    """The current year (tests fix it, so that what `short_when` drops does not change with the date)."""
    return str(datetime.date.today().year)


def short_when(stamp: str | None, this_year: str) -> str:
    """`01-02 03:04` this year, `2024-01-02` before (as ls does); `-` when there is none."""
    when = format_when(stamp)
    if len(when) < 16:
        return when
    return when[5:] if when.startswith(this_year) else when[:10]


def _policy(run: RunRecord) -> str:
    notes = run.notes or ""
    if notes.startswith("policy "):
        return notes[len("policy "):].split(";")[0]
    if run.simulated:
        return f"{run.policy} (sim)"
    return run.policy if run.setting is None else f"{run.policy} {format_setting(run.setting)}"[:28]
