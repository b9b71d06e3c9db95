"""Page 6: characterisation sweeps (start or resume), their energy heat map, and the selector.

The form follows Setup's workload (model, task, batch, length, precision, mode): each time
the page is shown after Setup changed, it takes them again; edits made here last until then.
A sweep opened from History puts its own workload in the form (padding and loop included), so its heat
map never sits beside another workload's form and `s` sweeps that workload again (resuming the
sweep if it is unfinished); the heat map and the progress pane name the workload they are of.

The page binds the app's sweep view, Setup's values, the fleet and the engine's state (tui.state);
`s`, `f`, `t` and `c` go up to the app as messages (tui.messages)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.table import Table
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.reactive import var
from textual.widget import Widget
from textual.widgets import (
    Button,
    Checkbox,
    Input,
    Label,
    Log,
    ProgressBar,
    Select,
    Static,
)

from engine.core.provenance import Source
from engine.dvfs.space import SPACES
from engine.results.format import versus_text
from tui import forms
from tui.fleet_model import STATUS_CONNECTED, FleetView
from tui.fmt import fit, tag, title_room
from tui.messages import CalibrationRequested, SelectorTrainingRequested, SweepRequested
from tui.screens.base import PageScreen, TickBox
from tui.screens.setup import CheckValidator
from tui.state import EngineTask, SweepOrder
from tui.sweep_model import HeatMap, SweepView, workload_text
from tui.widgets.quiet import set_title, show

if TYPE_CHECKING:
    from engine.results.records import SweepRecord, WorkloadRecord

# What identifies a stored sweep (SweepSpec.space_key) that the form has no field for: SweepSpec fields of those names.
SPACE_FIELDS = ("rails", "seed", "cpu_stride", "include_maxn", "thermal")
HEAT_STYLES = ("bold white on dark_green", "black on green3", "black on yellow3", "black on dark_orange",
               "white on red3")
HEAT_LEGEND = "★ the least energy; row MAXN or MAXN_SUPER: the baseline"


def heat_table(heat: HeatMap, max_rows: int = 40) -> Table | Text:
    """The heat map as a table: rows GPU (or mode), columns EMC; cells mJ per sample."""
    if not heat.cells:
        return Text("no points yet", style="dim")
    table = Table(box=None, padding=(0, 1), expand=False, caption=HEAT_LEGEND, caption_justify="left")
    table.add_column(Text.assemble("mJ/sample ", tag(heat.source)), no_wrap=True)
    for col in heat.cols:
        table.add_column(f"EMC {col}", justify="right")
    for row in heat.rows[:max_rows]:
        cells: list[Text | str] = []
        for col in heat.cols:
            cell = heat.cells.get((row, col))
            if cell is None:
                cells.append("")
                continue
            style = HEAT_STYLES[min(len(HEAT_STYLES) - 1, int(cell.rel * len(HEAT_STYLES)))]
            # the baseline's cell is its row, named by its mode (MAXN, MAXN_SUPER): a letter after a figure
            # reads as a unit (M: mega)
            mark = "★" if cell.best else " "
            cells.append(Text(f"{cell.mj_per_sample:8.2f}{mark}", style=style))
        table.add_row(row, *cells)
    return table


class SweepScreen(PageScreen):
    PAGE = "sweep"
    TITLE_TEXT = "6 Sweep"
    BINDINGS = [
        Binding("s", "start", "Start", tooltip="Start/resume"),  # short in the footer: 80 columns show every key
        # shown only while a fleet is connected (page 7)
        Binding("f", "fleet_sweep", "Fleet", tooltip="Fleet sweep: the form's workload on every board of the "
                "connected fleet (page 7); the model field may list several, comma-separated"),
        Binding("t", "train", "Train selector"),
        Binding("c", "calibrate", "Calibrate", tooltip="Calibrate the twin to measured sweeps"),
        Binding("x", "app.cancel_run", "Cancel"),
        Binding("escape", "leave_form", "Leave form", show=False),
    ]

    # Bound to the app's (tui.state.AppState).
    sweep_view: var[SweepView | None] = var(None, init=False)  # the sweep running, ended, or opened
    setup_values: var[forms.SetupValues | None] = var(None, init=False)  # what Setup holds
    engine_busy: var[EngineTask | None] = var(None, init=False)  # while a sweep runs the form says what it sweeps
    source: var[Source | None] = var(None, init=False)  # fast is the twin's only
    fleet_view: var[FleetView | None] = var(None, init=False)  # `f` is offered while a fleet is connected
    sweep_order: var[SweepOrder | None] = var(None, init=False)  # the app asks the form to take Setup's workload

    def __init__(self) -> None:
        super().__init__()
        self.setup = forms.SetupValues()  # the Setup workload the form last took
        self._followed: tuple[str, ...] | None = None
        self.opened: WorkloadRecord | None = None  # the stored workload of a sweep opened from History, while the form holds it
        self._opened_id: int | None = None
        self._opened_view: SweepView | None = None  # the opened sweep's view whose workload the form took
        self._sweep_fields: dict[str, Any] = {}  # the opened sweep's SweepSpec fields the form has no field for
        self._takes_sweep = False  # the form holds all of the opened sweep's parameters: `s` resumes it
        self._shown: SweepView | None = None
        self._heat_drawn: HeatMap | None = None  # the heat map the table shows

    def follow_setup(self, values: forms.SetupValues, *, force: bool = False) -> bool:
        """Take Setup's workload, unless it has not changed since the last time (edits made
        here then stay); returns whether the form changed."""
        key = forms.workload_key(values)
        if key == self._followed and not force:
            return False
        self._followed, self.setup, self.opened = key, values, None
        self._fill(values)
        return True

    def take_workload(self, workload: WorkloadRecord, sweep_id: int | None = None,
                      record: SweepRecord | None = None) -> None:
        """An opened sweep's own workload in the form, until
        Setup changes: `s` then sweeps that workload (resuming the sweep if unfinished), and the heat
        map is not shown beside another. With its `record`, what else makes it that
        sweep in the store too: its space, fast or not, warm-up, steps and repeats in the form, and
        what the form has no field for (rails, seed, CPU stride, MAXN, thermal) kept for `s`."""
        lora = workload.lora.rank if workload.mode == "lora" and workload.lora is not None else 8
        self.opened, self._opened_id = workload, sweep_id
        self.setup = forms.SetupValues(model=workload.model, task=workload.task, batch_size=str(workload.batch_size),
                                       seq_len=str(workload.seq_len), precision=workload.precision,
                                       mode=workload.mode, lora_rank=str(lora))
        self._fill(self.setup)
        self._sweep_fields, self._takes_sweep = {}, False
        if record is None:
            return  # the workload alone: `s` starts a new sweep of it
        space = record.space
        if space.get("method") not in ("run", "fast") or space.get("space") not in SPACES:
            return  # imported, or explicit settings: no sweep of the form's is that one; `s` starts a new one
        self.query_one("#sw-space", Select).value = space["space"]
        for name, value in (("warmup", record.warmup_steps), ("steps", record.steps), ("repeats", record.repeats)):
            self.query_one(f"#sw-{name}", Input).value = str(value)
        fast = self.query_one("#sw-fast", Checkbox)
        if not fast.disabled:  # a board has no fast mode: its sweep is not this one, whatever the box said
            fast.value = space["method"] == "fast"
        self._sweep_fields = {name: space[name] for name in SPACE_FIELDS if name in space}
        # `s` resumes it here: a sweep of this source (the twin's, or a board's), fast only on the twin
        self._takes_sweep = (record.source == self.source and fast.value == (space["method"] == "fast"))

    def _fill(self, values: forms.SetupValues) -> None:
        self.query_one("#sw-model", Input).value = values.model.strip()
        task = self.query_one("#sw-task", Select)
        if values.task != task.value:
            task.value = values.task
        self.query_one("#sw-workload", Static).update(self._workload_text())

    def _workload_text(self) -> str:
        if self.opened is not None:
            return f"sweep {self._opened_id}'s workload: {workload_text(self.opened)}"
        v = self.setup
        parts = [f"batch {v.batch_size.strip()}" if v.batch_size.strip() else "",
                 f"seq {v.seq_len.strip()}" if v.seq_len.strip() else "",
                 v.precision if v.precision != "default" else "", v.mode]
        return "as on Setup (2): " + ", ".join(p for p in parts if p)

    def workload(self) -> dict:
        """The SweepSpec fields of the form's workload beyond the model and task (an opened sweep's
        padding, loop and checkpointing too: `s` sweeps that very workload, resuming it if unfinished)."""
        v = self.setup
        bad = self._setup_errors()  # refused by errors(); never read here

        def count(field: str) -> int | None:
            return None if field in bad else forms.int_or_none(getattr(v, field))

        fields = {"batch_size": count("batch_size"), "max_seq_len": count("seq_len"),
                  "precision": None if v.precision == "default" else v.precision, "mode": v.mode,
                  "lora": None if "lora_rank" in bad else forms.lora_settings(v)}
        if self.opened is not None:
            fields.update(padding=self.opened.padding, loop=self.opened.loop, grad_checkpointing=self.opened.grad_checkpointing,
                          lora=self.opened.lora if self.opened.mode == "lora" else None, **self._sweep_fields)
        else:  # Setup's run's loop: a fast sweep of it is what that run's oracle finds (forms.sweep_loop)
            fields["setup_loop"] = forms.run_loop(v)
        return fields

    def compose_body(self) -> ComposeResult:
        def field(label: str, widget: Widget) -> Horizontal:
            return Horizontal(Label(label, classes="field-label"), widget, classes="field")

        def number(bounds: forms.Bounds) -> list[CheckValidator]:
            return [CheckValidator(forms.check_number, bounds=bounds)]

        with Horizontal(id="sweep-body"):
            with Vertical(id="sweep-left"):
                with Vertical(id="sweep-form", classes="pane"):
                    yield field("model", Input(self.setup.model, id="sw-model", compact=True,
                                               validators=[CheckValidator(forms.check_models)]))
                    yield field("task", Select([(d, k) for d, k in forms.task_choices()], value=self.setup.task,
                                               id="sw-task", allow_blank=False, compact=True))
                    yield Static(self._workload_text(), id="sw-workload")
                    yield field("space", Select([(s, s) for s in SPACES], value="gpu", id="sw-space",
                                                allow_blank=False, compact=True))
                    yield field("warm-up", Input("1", id="sw-warmup", compact=True,
                                                 validators=number(forms.WARMUP_STEPS)))
                    yield field("steps", Input("5", id="sw-steps", compact=True, validators=number(forms.POINT_STEPS)))
                    yield field("repeats", Input("1", id="sw-repeats", compact=True, validators=number(forms.REPEATS)))
                    yield TickBox("fast (twin model, no training)", True, id="sw-fast", compact=True)
                    with Horizontal(classes="field"):
                        yield Button("Start (s)", id="sw-start", variant="success", compact=True)
                        yield Button("Train selector (t)", id="sw-train", compact=True)
                with Vertical(id="sweep-status", classes="pane"):
                    yield Static("no sweep yet: s starts one", id="sweep-summary")
                    # Hidden until a sweep has a size: a bar without a total animates as if busy.
                    yield ProgressBar(id="sweep-progress", show_eta=False, total=0)
                    yield Log(id="sweep-log", max_lines=200)
            yield Static(id="sweep-heat", classes="pane")

    def on_mount(self) -> None:
        self.query_one("#sweep-form").border_title = "Sweep"
        self.query_one("#sweep-status").border_title = "Progress"
        self.query_one("#sweep-heat").border_title = "Energy per sample"
        self.query_one("#sweep-heat", Static).update(Text("start a sweep, or open one from History (5)", style="dim"))
        self.query_one("#sweep-progress", ProgressBar).display = False
        self._log_lines: tuple[str, ...] = ()

    def values(self) -> dict[str, Any]:
        def text(name: str) -> str:
            return self.query_one(f"#sw-{name}", Input).value.strip()

        return {
            "model": text("model"), "task": str(self.query_one("#sw-task", Select).value),
            "space": str(self.query_one("#sw-space", Select).value), "warmup": text("warmup"),
            "steps": text("steps"), "repeats": text("repeats"), "fast": self.query_one("#sw-fast", Checkbox).value,
            "workload": self.workload(),
        }

    def _setup_errors(self) -> dict[str, str]:
        """Setup's workload fields this form sweeps that do not check (typed on Setup, said here)."""
        return {} if self.opened is not None else self.setup.shape_errors()  # else: a stored sweep's own

    def errors(self) -> dict[str, str]:
        v = self.values()
        checks = {
            "model": forms.check_models(v["model"]),
            "warm-up": forms.check_number(v["warmup"], forms.WARMUP_STEPS),
            "steps": forms.check_number(v["steps"], forms.POINT_STEPS),
            "repeats": forms.check_number(v["repeats"], forms.REPEATS),
            **{f"{forms.label_of(k)} (Setup, 2)": why for k, why in self._setup_errors().items()},
        }
        for inp in self.query(Input):
            inp.validate(inp.value)
        return {k: r for k, r in checks.items() if r}

    # ------------------------------------------------------------------ the app's state
    def on_screen_resume(self) -> None:
        if self.composed:
            self.refresh_bindings()  # `f` (fleet sweep) shows while a fleet is connected
            self._follow_setup_if_idle()

    def watch_setup_values(self, values: forms.SetupValues | None) -> None:
        if values is not None:  # (bound before the sweep's view: an opened sweep's workload is taken after)
            self.paint("setup", self._follow_setup_if_idle)

    def _follow_setup_if_idle(self) -> None:
        """Setup's workload, each time the page is shown after Setup changed (edits made here stay
        until then); not while a sweep runs: the form says what it sweeps."""
        if self.engine_busy not in ("sweep", "fleet sweep") and self.setup_values is not None:
            self.follow_setup(self.setup_values)

    def watch_source(self, source: Source | None) -> None:
        if source is not None:
            self.paint("source", lambda: self._allow_fast(source is Source.TWIN))

    def _allow_fast(self, allowed: bool) -> None:
        box = self.query_one("#sw-fast", Checkbox)
        box.disabled = not allowed
        if not allowed:
            box.value = False

    def watch_fleet_view(self, old: FleetView | None, new: FleetView | None) -> None:
        if self._fleet_connected(old) != self._fleet_connected(new):
            self.refresh_bindings()  # `f` shows once connected

    @staticmethod
    def _fleet_connected(view: FleetView | None) -> bool:
        return view is not None and view.status == STATUS_CONNECTED

    def watch_sweep_view(self, view: SweepView | None) -> None:
        if view is not None:
            self.paint("sweep", lambda: self.draw_sweep(view))

    def watch_sweep_order(self, order: SweepOrder | None) -> None:
        if order is not None:
            self.paint("order", lambda: self._take_order(order))

    def _take_order(self, order: SweepOrder) -> None:
        """Setup's workload in the form (fast ticked if asked), and started if asked, as `s` starts it."""
        self.follow_setup(order.values, force=True)
        if order.fast:
            self.query_one("#sw-fast", Checkbox).value = True
        if order.start:
            self.action_start()

    def draw_sweep(self, view: SweepView) -> None:
        if view.opened and view.workload is not None and view is not self._opened_view:
            self._opened_view = view  # once per opening: a later change on Setup is followed again
            self.take_workload(view.workload, view.sweep_id, view.record)
        summary = Text()
        summary.append(view.status.upper(), style="bold")
        if view.sweep_id is not None:
            summary.append(f"  sweep {view.sweep_id}")
        summary.append(f"  {view.progress} points")
        if view.record is not None and view.record.resumable:
            summary.append(", resumable" + (": s resumes it" if self._resumes(view) else ""))
        if view.workload is not None:
            w = view.workload
            summary.append(f"\nof {w.model}/{w.task}: {workload_text(w)}")
        heat = view.heat
        if heat is not None and heat.best:
            summary.append(f"\nbest: {heat.best}")
            if heat.saving_pct is not None:
                summary.append(f"\n{versus_text(heat.saving_pct, heat.slowdown_pct, than=heat.baseline)} per sample ")
                summary.append_text(tag(heat.source))
        if view.last:
            summary.append(f"\nlast: {view.last}", style="dim")
        show(self.query_one("#sweep-summary", Static), summary)
        bar = self.query_one("#sweep-progress", ProgressBar)
        bar.display = bool(view.total)  # no bar where the plan is not known (a sweep stored before it was)
        bar.update(total=view.total or 0, progress=view.done)
        self._shown = view
        if heat is not None:
            if heat != self._heat_drawn:  # a progress message without a new point leaves the table as it is
                self.query_one("#sweep-heat", Static).update(heat_table(heat))
                self._heat_drawn = heat
            self._title_heat()
        elif view.fleet:
            self._heat_drawn = None
            self.query_one("#sweep-heat", Static).update(Text(
                "a fleet sweep: one sweep per model on the boards; the Fleet page (7) shows who runs what, "
                "History (5) opens each sweep's heat map", style="dim"))
        if view.log != self._log_lines:  # at most 200 lines, a few times a second: redraw it whole
            log = self.query_one("#sweep-log", Log)
            log.clear()
            log.write_lines(view.log)
            self._log_lines = view.log

    def _resumes(self, view: SweepView) -> bool:
        """Whether the form holds this stored sweep's own workload and parameters (`s` resumes it)."""
        return self.opened is not None and self._opened_id == view.sweep_id and self._takes_sweep

    def _title_heat(self) -> None:
        """The heat map's title names the sweep and its workload, as the width allows."""
        view, pane = self._shown, self.query_one("#sweep-heat", Static)
        if view is None or view.workload is None:
            set_title(pane, "Energy per sample")
            return
        w, sweep = view.workload, f"sweep {view.sweep_id}"
        set_title(pane, fit(title_room(pane), Text(f"{sweep}: {w.model}/{w.task}, energy per sample"),
                            Text(f"{sweep}: {w.model}/{w.task}"), Text(sweep)))  # Text: a name is never markup

    def on_resize(self) -> None:
        self.call_after_refresh(self._title_heat)

    def say(self, line: str) -> None:
        self.query_one("#sweep-log", Log).write_line(line)

    @on(Button.Pressed, "#sw-start")
    def _start(self, event: Button.Pressed) -> None:
        event.stop()
        self.action_start()

    @on(Button.Pressed, "#sw-train")
    def _train(self, event: Button.Pressed) -> None:
        event.stop()
        self.action_train()

    @on(Input.Submitted)
    def _next(self, event: Input.Submitted) -> None:
        event.stop()
        self.focus_next()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "fleet_sweep":  # hidden (the footer keeps its room) unless a fleet is connected
            return self._fleet_connected(self.fleet_view)
        return super().check_action(action, parameters)

    def _form_ok(self) -> bool:
        errors = self.errors()
        if errors:
            self.notify("; ".join(f"{k}: {v}" for k, v in errors.items()), title="Check the sweep form",
                        severity="warning")
        return not errors

    def action_fleet_sweep(self) -> None:
        if self._form_ok():
            self.tell(SweepRequested(self.values(), on_fleet=True))

    def action_start(self) -> None:
        if "," in self.values()["model"]:
            self.notify("a list of models sweeps on a fleet (f, once connected on page 7); s sweeps one model here",
                        title="Check the sweep form", severity="warning")
            return
        errors = self.errors()
        if errors:
            self.notify("; ".join(f"{k}: {v}" for k, v in errors.items()), title="Check the sweep form",
                        severity="warning")
            return
        self.tell(SweepRequested(self.values()))

    def action_train(self) -> None:
        self.tell(SelectorTrainingRequested())

    def action_calibrate(self) -> None:
        self.tell(CalibrationRequested())

    def action_leave_form(self) -> None:
        self.set_focus(None)
