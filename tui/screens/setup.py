"""Page 2: what to fine-tune and how; starts an experiment (optionally against the board's baseline, its uncapped
mode by name and id: MAXN (mode 0) on an AGX Orin, MAXN_SUPER (mode 2) on an Orin Nano 8GB).

Every typed field has a validator, so a bad value is marked in the field itself and its
reason shown below the form. Enter moves to the next field; escape leaves the form so
the number keys switch pages again. The form's values are remembered across restarts
(tui.remembered): written once typing pauses and as the page goes, read back checked.

The page tells the app each change of the form (SetupChanged), and binds what the app works out
from it: the selector's preview line and what the policy still needs.
"""

from __future__ import annotations

from collections.abc import Callable

from rich.text import Text
from textual import events, on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid, Horizontal, VerticalScroll
from textual.reactive import var
from textual.suggester import SuggestFromList
from textual.timer import Timer
from textual.validation import ValidationResult, Validator
from textual.widget import Widget
from textual.widgets import Button, Checkbox, Input, Label, Select, Static

from engine.core.provenance import Source
from tui import forms, setup_fit
from tui.messages import ExperimentRequested, PreviewRequested, SetupChanged
from tui.remembered import load_setup, save_setup
from tui.screens.base import PageScreen, TickBox


class CheckValidator(Validator):
    """A Textual validator over one of tui.forms' checks (None = good, else the reason)."""

    def __init__(self, check: Callable[..., str | None], **options: object) -> None:
        super().__init__()
        self.check = check
        self.options = options

    def validate(self, value: str) -> ValidationResult:
        reason = self.check(value, **self.options)
        return self.success() if reason is None else self.failure(reason)


class AmountValidator(Validator):
    """Steps or epochs, depending on the unit chosen beside it."""

    def __init__(self, screen: SetupScreen) -> None:
        super().__init__()
        self.screen = screen

    def validate(self, value: str) -> ValidationResult:
        reason = forms.check_amount(value, self.screen.unit)
        return self.success() if reason is None else self.failure(reason)


class ModelInput(Input):
    """The model field: ↓ lists the zoo (as the ▼ beside it does)."""

    BINDINGS = [Binding("down", "screen.pick_model", "Zoo", show=False)]


FIELD_HINT = "tab enters the form; the field in focus is explained here; ? explains every field and policy"
# Widget id -> its key in forms.FIELD_HELP
HELP_KEYS = {"batch_size": "batch size", "seq_len": "seq length", "train_samples": "train samples",
             "slowdown": "slowdown ≤", "amount": "length", "unit": "length", "compare": "compare with MAXN",
             "zoo-pick": "model", "lora_rank": "LoRA rank", "memory": "memory"}
SELECTOR_PROMPT = "selector: press p to ask what it would choose (figures predicted)"


def _row(label: str, widget: Widget) -> Horizontal:
    return Horizontal(Label(label, classes="field-label"), widget, classes="field")


class SetupScreen(PageScreen):
    PAGE = "setup"
    TITLE_TEXT = "2 Setup"
    BINDINGS = [
        Binding("s", "start", "Start", tooltip="Start the experiment the form describes (with its baseline run, "
                "the board's uncapped mode, when ticked); on a board it asks first"),
        Binding("p", "predict", "Selector", tooltip="Ask the selector what it would choose for this workload and "
                "the saving it predicts [predicted]"),
        Binding("escape", "leave_form", "Leave form", show=False),
    ]

    SAVE_AFTER_S = 0.5  # the form is remembered once typing pauses (and when the page goes)

    # Bound to the app's (tui.state.AppState): the device's source (simulate is the twin's only), the
    # selector's preview for the form's workload ("": none), what the policy still needs ("": nothing).
    source: var[Source | None] = var(None, init=False)
    selector_line: var[str] = var("", init=False)
    policy_note: var[str] = var("", init=False)
    mem_total: var[int | None] = var(None, init=False)  # the board's MemTotal (bytes): the memory line's budget
    baseline_label: var[str] = var("MAXN (mode 0)", init=False)  # the board's baseline: MAXN_SUPER (mode 2)

    def __init__(self, values: forms.SetupValues | None = None, note: str | None = None) -> None:
        """`values` (and `note`: what was ignored of them) as remembered (tui.remembered); None: read them here."""
        super().__init__()
        if values is None:
            remembered = load_setup()
            values, note = remembered.values, remembered.note
        self.load_note = note  # said once the page is shown
        self.initial = values
        self.unit = self.initial.unit
        self._save_timer: Timer | None = None
        self._unsaved = values

    def compose_body(self) -> ComposeResult:
        v = self.initial
        with VerticalScroll(id="setup-form", can_focus=False):
            with Grid(id="setup-grid"):
                yield Horizontal(
                    Label("model", classes="field-label"),
                    ModelInput(v.model, id="model", compact=True,
                               suggester=SuggestFromList(forms.zoo_names(), case_sensitive=False),
                               validators=[CheckValidator(forms.check_model)]),
                    Button("▼", id="zoo-pick", compact=True, tooltip="the zoo's models"),
                    classes="field",
                )
                yield _row("batch size", Input(v.batch_size, id="batch_size", compact=True, placeholder="zoo default",
                                               validators=[CheckValidator(forms.check_number, bounds=forms.BATCH_SIZE,
                                                                           blank_ok=True)], valid_empty=True))
                yield _row("task", Select([(d, k) for d, k in forms.task_choices()], value=v.task, id="task",
                                          allow_blank=False, compact=True))
                yield _row("seq length", Input(v.seq_len, id="seq_len", compact=True, placeholder="zoo default",
                                               validators=[CheckValidator(forms.check_number, bounds=forms.SEQ_LEN,
                                                                           blank_ok=True)], valid_empty=True))
                yield _row("data", Input(v.data, id="data", compact=True,
                                         suggester=SuggestFromList(forms.DATA_CHOICES),
                                         validators=[CheckValidator(forms.check_data)]))
                yield _row("precision", Select([(p, p) for p in forms.PRECISION_CHOICES], value=v.precision,
                                               id="precision", allow_blank=False, compact=True))
                yield _row("policy", Input(v.policy, id="policy", compact=True,
                                           suggester=SuggestFromList(forms.POLICY_CHOICES),
                                           validators=[CheckValidator(forms.check_policy)]))
                yield Horizontal(
                    Label("mode", classes="field-label"),
                    Select([(m, m) for m in forms.MODE_CHOICES], value=v.mode, id="mode", allow_blank=False,
                           compact=True),
                    Label(" rank ", id="lora-rank-label"),
                    Input(v.lora_rank, id="lora_rank", compact=True, validators=[CheckValidator(forms.check_lora_rank)]),
                    classes="field",
                )
                yield _row("objective", Input(v.objective, id="objective", compact=True,
                                              suggester=SuggestFromList(forms.OBJECTIVE_CHOICES),
                                              validators=[CheckValidator(forms.check_objective)]))
                yield _row("train samples", Input(v.train_samples, id="train_samples", compact=True,
                                                  placeholder="all", valid_empty=True,
                                                  validators=[CheckValidator(forms.check_number, blank_ok=True,
                                                                             bounds=forms.TRAIN_SAMPLES)]))
                yield _row("slowdown ≤", Input(v.slowdown, id="slowdown", compact=True, placeholder="no limit (%)",
                                               valid_empty=True, validators=[CheckValidator(forms.check_slowdown)]))
                yield Horizontal(TickBox(f"compare with {self.baseline_label}", v.compare, id="compare", compact=True),
                                 classes="field")
                yield Horizontal(
                    Label("length", classes="field-label"),
                    Input(v.amount, id="amount", compact=True, validators=[AmountValidator(self)]),
                    Select([("steps", "steps"), ("epochs", "epochs")], value=v.unit, id="unit", allow_blank=False,
                           compact=True),
                    classes="field",
                )
                yield Horizontal(TickBox("simulate (twin, no training)", v.simulate, id="simulate", compact=True),
                                 classes="field")
            yield Static("", id="setup-errors")
            yield Static("", id="memory")
            yield Static("", id="policy-note")
            yield Static(SELECTOR_PROMPT, id="selector")
            with Horizontal(id="setup-buttons"):
                yield Button("Start (s)", id="start", variant="success", compact=True)
                yield Button("Ask selector (p)", id="predict", compact=True)
            yield Static(FIELD_HINT, id="field-help")

    # ------------------------------------------------------------------ reading the form
    def values(self) -> forms.SetupValues:
        def text(name: str) -> str:
            return self.query_one(f"#{name}", Input).value

        def choice(name: str) -> str:
            return str(self.query_one(f"#{name}", Select).value)

        return forms.SetupValues(
            model=text("model"), task=choice("task"), data=text("data"), policy=text("policy"),
            objective=text("objective"), slowdown=text("slowdown"), amount=text("amount"), unit=choice("unit"),
            batch_size=text("batch_size"), seq_len=text("seq_len"), precision=choice("precision"),
            mode=choice("mode"), lora_rank=text("lora_rank"), train_samples=text("train_samples"),
            compare=self.query_one("#compare", Checkbox).value, simulate=self.query_one("#simulate", Checkbox).value,
        )

    def mark_errors(self) -> dict[str, str]:
        """Validate every field (marking the bad ones) and list the reasons below the form."""
        values = self.values()
        errors = values.errors()
        for inp in self.query(Input):
            inp.validate(inp.value)
        if "slowdown" in errors:
            self.query_one("#slowdown", Input).set_class(True, "-invalid")
        self._list_errors(errors)
        return errors

    def _list_errors(self, errors: dict[str, str]) -> None:
        box = self.query_one("#setup-errors", Static)
        box.update(Text("\n".join(f"⚠ {forms.label_of(k)}: {v}" for k, v in errors.items())))
        box.display = bool(errors)

    def on_mount(self) -> None:
        self._toggle_lora_rank()
        self._estimate_memory()
        if self.load_note:
            self.notify(self.load_note, title="Setup", severity="warning")

    def on_unmount(self) -> None:
        if self._save_timer is not None:  # a change not remembered yet: the app is closing
            self._save_timer.stop()
            self._remember()

    def _remember_soon(self, values: forms.SetupValues) -> None:
        """Remember the form once typing pauses: one small write, not one a keystroke."""
        self._unsaved = values  # kept: the widgets may be gone by the time the page unmounts
        if self._save_timer is not None:
            self._save_timer.stop()
        self._save_timer = self.set_timer(self.SAVE_AFTER_S, self._remember)

    def _remember(self) -> None:
        self._save_timer = None
        save_setup(self._unsaved)

    def _estimate_memory(self) -> None:
        """The form's workload's estimated peak memory against the board (torch-free)."""
        status = setup_fit.memory_status(self.values(), self.mem_total)
        widget = self.query_one("#memory", Static)
        widget.update(Text(status.text))
        widget.set_class(status.over, "-over")

    def _toggle_lora_rank(self) -> None:
        lora = str(self.query_one("#mode", Select).value) == "lora"
        for widget in (self.query_one("#lora-rank-label", Label), self.query_one("#lora_rank", Input)):
            widget.display = lora

    def action_pick_model(self) -> None:
        """The zoo's models in a list (name, family, size, defaults); the one chosen fills the field."""
        from tui.screens.modals import ZooPickerScreen

        model = self.query_one("#model", Input)

        def chosen(name: str | None) -> None:
            if name:
                model.value = name
            model.focus()

        self.app.push_screen(ZooPickerScreen(setup_fit.zoo_rows(), model.value.strip()), chosen)

    def watch_source(self, source: Source | None) -> None:
        if source is not None:
            self.paint("source", lambda: self._allow_simulate(source is Source.TWIN))

    def watch_mem_total(self, total: int | None) -> None:
        self.paint("memory", self._estimate_memory)

    def watch_baseline_label(self, label: str) -> None:
        self.paint("baseline", lambda: setattr(self.query_one("#compare", Checkbox), "label", f"compare with {label}"))

    def _allow_simulate(self, allowed: bool) -> None:
        box = self.query_one("#simulate", Checkbox)
        box.disabled = not allowed
        if not allowed:
            box.value = False

    def watch_selector_line(self, line: str) -> None:
        """The selector's preview for the form's workload ("" : none yet, the prompt)."""
        self.paint("selector", lambda: self.query_one("#selector", Static).update(Text(line or SELECTOR_PROMPT)))

    def watch_policy_note(self, note: str) -> None:
        """What the policy still needs before a run (a sweep for oracle, a selector for ml), or ""."""
        self.paint("policy-note", lambda: self._note_policy(note))

    def _note_policy(self, note: str) -> None:
        widget = self.query_one("#policy-note", Static)
        widget.update(Text(note))  # [predicted] is no markup
        widget.display = bool(note)

    def on_descendant_focus(self, event: events.DescendantFocus) -> None:
        self._explain(getattr(event, "widget", None) or self.focused)

    def on_descendant_blur(self, event: events.DescendantBlur) -> None:
        self.call_after_refresh(lambda: self._explain(self.focused))

    def _explain(self, widget: Widget | None) -> None:
        """The focused field's meaning under the form (the policy's own, from the engine, too)."""
        field = getattr(widget, "id", None) or ""
        key = HELP_KEYS.get(field, field)
        text = forms.FIELD_HELP.get(key)
        if text is None:
            self.query_one("#field-help", Static).update(Text(FIELD_HINT))
            return
        line = f"{key}: {text}"
        if field == "policy":
            from tui.screens.help import policy_help

            typed = self.query_one("#policy", Input).value.strip().lower().split(":", 1)[0]
            line += "".join(f"\n{name}: {what}" for name, what in policy_help()
                            if name.split(":", 1)[0] == typed)
        self.query_one("#field-help", Static).update(Text(line))

    def on_screen_resume(self) -> None:
        if self.composed:  # what the policy needs is looked up again: the store may have changed
            self.tell(SetupChanged(self.values()))

    def _tell_app(self) -> None:
        if not self.composed:
            return
        values = self.values()
        self.tell(SetupChanged(values))
        self._remember_soon(values)

    # ------------------------------------------------------------------ events
    @on(Input.Changed)
    def _changed(self, event: Input.Changed) -> None:
        errors = self.values().errors()
        if event.input.id == "objective" or event.input.id == "slowdown":
            self.query_one("#slowdown", Input).set_class("slowdown" in errors, "-invalid")
        # The reasons follow the form as it is now: a field emptied back to its default (blank
        # batch size: the zoo's) has no validation result, and its old reason must go too.
        self._list_errors(errors)
        self._estimate_memory()
        self._tell_app()
        if event.input.id == "policy" and event.input.has_focus:
            self._explain(event.input)

    @on(Select.Changed)
    @on(Checkbox.Changed)
    def _choice_changed(self, event: Select.Changed | Checkbox.Changed) -> None:
        if event.control.id == "mode":
            self._toggle_lora_rank()
        self._list_errors(self.values().errors())  # a choice can make a field's reason (LoRA rank) come or go
        self._estimate_memory()
        self._tell_app()

    @on(Select.Changed, "#unit")
    def _unit_changed(self, event: Select.Changed) -> None:
        self.unit = str(event.value)
        amount = self.query_one("#amount", Input)
        amount.validate(amount.value)
        self.mark_errors()

    @on(Input.Submitted)
    def _next_field(self, event: Input.Submitted) -> None:
        event.stop()
        self.focus_next()

    @on(Button.Pressed, "#start")
    def _start_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.action_start()

    @on(Button.Pressed, "#zoo-pick")
    def _zoo_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.action_pick_model()

    @on(Button.Pressed, "#predict")
    def _predict_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.action_predict()

    def action_start(self) -> None:
        if self.mark_errors():
            return
        self.tell(ExperimentRequested(self.values()))

    def action_predict(self) -> None:
        if not self.mark_errors():
            self.tell(PreviewRequested(self.values()))

    def action_leave_form(self) -> None:
        self.set_focus(None)
