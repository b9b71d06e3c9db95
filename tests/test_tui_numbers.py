"""Numbers given to the TUI are read as the CLI reads its flags (engine.core.userinput within
engine.core.plausible's bounds): on Setup and the Sweep form, a number that is too long, written
with a separator, in superscript or in Arabic-Indic digits, or out of range marks its field red
with the reason and starts nothing, and never crashes the app (a 310-digit batch size did, in the
memory estimate). `--fleet-twins` and the Fleet page's `twins:N` read the count as `fleet --twins`
does; an exception the app does not handle makes `slm-dvfs` exit non-zero."""

from __future__ import annotations

from typing import Any

import pytest
from textual import events

from engine.device.session import DeviceSession
from engine.results.store import Store
from test_tui_flow import env  # noqa: F401 - the flow tests' isolation and frozen trace
from tui_helpers import Ui, drive, make_app, plain

HUGE = "1" * 5000
# text -> what the reason says (each is a number Python's int() or float() would read, or choke on)
BAD = {HUGE: "too long for a number", "2_5": "without separators", "²": "ASCII digits", "٣٢": "ASCII digits"}


async def enter(ui: Ui, field: str, text: str) -> None:
    """Text into a field as a user puts it there: pasted (a terminal's bracketed paste) over what it held."""
    ui.app.screen.set_focus(None)
    await ui.settle()
    ui.app.screen.query_one(f"#{field}").focus()
    await ui.settle()  # focusing selects the old value: the paste replaces it
    ui.app.post_message(events.Paste(text))
    await ui.settle()


def shown(widget: Any) -> str:
    """A widget's text as the page shows it, a line a reason (no wrapping)."""
    return plain(widget.content, width=10_000)


def notes(app: Any) -> str:
    return "\n".join(str(n.message) for n in app._notifications)


async def test_a_long_batch_size_is_no_crash_and_bad_numbers_start_nothing(twin_session: DeviceSession,
                                                                           results_store: Store) -> None:
    app = make_app(twin_session, store=results_store, poll=False)
    async with drive(app, size=(100, 40)) as ui:
        await ui.press("2")
        setup = app.screen
        errors, memory = setup.query_one("#setup-errors"), setup.query_one("#memory")
        # 310 digits crashed the memory estimate (OverflowError); 300 printed a 300-digit GiB figure
        for text, reason in {"1" * 310: "too long", "1" * 300: "too long", "2147483648": "out of range",
                             **BAD}.items():
            await enter(ui, "batch_size", text)
            assert setup.query_one("#batch_size").has_class("-invalid"), text
            said = shown(errors)
            assert said.startswith("⚠ batch size: the batch size") and reason in said, (text, said)
            if reason in ("too long", "out of range"):
                assert "give a whole number from 1 to 2147483647" in said
            assert shown(memory).strip() == "memory: estimated once the fields marked in red are fixed"
        await ui.press("escape", "s")  # refused: nothing starts
        assert app.engine_busy is None and app.screen is setup and not results_store.list_runs()
        # epochs within their bound can come to more steps than MAX_STEPS (at batch size 1)
        await enter(ui, "batch_size", "1")
        setup.query_one("#unit").value = "epochs"
        await enter(ui, "amount", "10000")
        await ui.press("escape", "s")
        assert app.engine_busy is None and not results_store.list_runs()
        assert "length: 10000 epochs are 20000000 steps, more than 10000000" in notes(app)  # synthetic: 2000 samples
        await ui.press("q")
    assert app.return_code == 0


@pytest.mark.slow  # every number field of Setup, each bad text (about 40 fields filled): ~6 s
async def test_every_setup_number_is_read_strictly(twin_session: DeviceSession, results_store: Store) -> None:
    app = make_app(twin_session, store=results_store, poll=False)
    async with drive(app, size=(100, 40)) as ui:
        await ui.press("2")
        setup = app.screen
        setup.query_one("#mode").value = "lora"  # its rank field shows
        await ui.settle()
        errors = setup.query_one("#setup-errors")
        fields = {"batch_size": "batch size", "seq_len": "seq length", "train_samples": "train samples",
                  "amount": "length", "lora_rank": "LoRA rank", "slowdown": "slowdown limit"}
        for field, label in fields.items():
            for text, reason in BAD.items():
                await enter(ui, field, text)
                assert setup.query_one(f"#{field}").has_class("-invalid"), (field, text)
                said = [line for line in shown(errors).splitlines() if line.startswith(f"⚠ {label}:")]
                assert len(said) == 1 and reason in said[0], (field, text, said)
            await enter(ui, field, "0" if field != "slowdown" else "-1")
            assert "is out of range" in shown(errors), field
            await ui.press("escape", "s")  # refused: nothing starts
            assert app.engine_busy is None and app.screen is setup
            await enter(ui, field, {"lora_rank": "8", "amount": "40"}.get(field, ""))
        setup.query_one("#unit").value = "epochs"
        for text, reason in {**BAD, "0": "out of range", "1e9": "out of range", "nan": "not a number"}.items():
            await enter(ui, "amount", text)
            assert setup.query_one("#amount").has_class("-invalid") and reason in shown(errors), text
        await ui.press("escape", "s")
        assert app.engine_busy is None and not results_store.list_runs()
        await ui.press("q")
    assert app.return_code == 0


async def sweep_form_refuses(ui: Ui, fields: dict[str, str], texts: dict[str, str]) -> None:
    """Each text in each of the Sweep form's `fields` (id -> its range): red, and `s` refuses with the reason."""
    app, sweep = ui.app, ui.app.screen
    for field, bound in fields.items():
        for text, reason in {**texts, "1000001": bound}.items():
            await enter(ui, field, text)
            assert sweep.query_one(f"#{field}").has_class("-invalid"), (field, text)
            await ui.press("escape", "s")
            assert app.engine_busy is None, (field, text)
            said = notes(app).splitlines()[-1]
            assert reason in said and "invalid literal" not in said, (field, text, said)
        await enter(ui, field, "1")


async def test_sweep_numbers_are_read_strictly_and_setups_workload_is_checked(twin_session: DeviceSession,
                                                                             results_store: Store) -> None:
    app = make_app(twin_session, store=results_store, poll=False)
    async with drive(app, size=(100, 40)) as ui:
        await ui.press("6")
        # warm-up was checked with isdigit(): `²` passed, then int('²') said Python's "invalid literal"
        await sweep_form_refuses(ui, {"sw-warmup": "from 0 to 10000"}, {"²": "ASCII digits"})
        # Setup's batch size is the sweep's: `²` there was int('²') here, a crash
        await ui.press("escape", "2")
        await enter(ui, "batch_size", "²")
        await ui.press("escape", "6", "s")
        assert app.engine_busy is None
        assert "batch size (Setup, 2): the batch size '²' is not a whole number" in notes(app)
        await ui.press("q")
    assert app.return_code == 0 and not results_store.list_sweeps()


@pytest.mark.slow  # the Sweep form's three numbers, each bad text: ~4 s
async def test_every_sweep_number_is_read_strictly(twin_session: DeviceSession, results_store: Store) -> None:
    app = make_app(twin_session, store=results_store, poll=False)
    async with drive(app, size=(100, 40)) as ui:
        await ui.press("6")
        await sweep_form_refuses(ui, {"sw-warmup": "from 0 to 10000", "sw-steps": "from 1 to 100000",
                                      "sw-repeats": "from 1 to 1000"}, {**BAD, "-1": "out of range"})
        await ui.press("escape", "q")
    assert app.return_code == 0 and not results_store.list_sweeps()


@pytest.mark.parametrize("count, said", [
    ("²", "in ASCII digits 0-9"), (HUGE, "too long for a number"), ("2_5", "without separators"),
    ("0", "need a number of twins of 1 or more"),
], ids=["superscript", "5000-digits", "underscore", "zero"])
def test_fleet_twins_that_are_no_count_are_refused_without_a_traceback(isolated_env: Any, capsys: Any,
                                                                       count: str, said: str) -> None:
    from engine.cli import main

    assert main(["--fleet-twins", count]) == 2
    err = capsys.readouterr().err
    assert err.startswith("slm-dvfs: error: --fleet-twins") and said in err and "What to do" in err
    assert "Traceback" not in err and "invalid literal" not in err


async def test_the_fleet_pages_twin_count_is_read_as_fleet_twins_reads_it(twin_session: DeviceSession,
                                                                         results_store: Store) -> None:
    app = make_app(twin_session, store=results_store, poll=False)
    async with drive(app, size=(100, 30)) as ui:
        await ui.press("7")
        for text, said in (("²", "ASCII digits"), ("twins:٣", "ASCII digits"), (HUGE, "too long for a number")):
            await enter(ui, "fleet-target", text)
            await ui.press("enter")
            last = notes(app).splitlines()
            assert any(said in line for line in last[-2:]) and "invalid literal" not in notes(app), last
            assert app.fleet_tracker.view().status == "unconnected"  # nothing was dialled
        await ui.press("escape", "q")
    assert app.return_code == 0


# --------------------------------------------------------------------------- the exit status
@pytest.mark.parametrize("crash", [True, False], ids=["a-defect", "quit"])
def test_slm_dvfs_exits_non_zero_when_the_app_crashed(isolated_env: Any, monkeypatch: pytest.MonkeyPatch,
                                                      crash: bool) -> None:
    """`slm-dvfs` (engine.cli.main with no sub-command) runs the real App.run, headless, driven by
    Textual's auto pilot: an exception no handler caught ends it with status 1, a quit with 0."""
    from textual.app import App

    import tui.app

    def defect() -> None:
        raise RuntimeError("a defect no handler catches")

    async def pilot(p: Any) -> None:
        if crash:
            p.app.call_later(defect)
        else:
            await p.press("q")

    monkeypatch.setattr(tui.app.SlmDvfsApp, "run", lambda app: App.run(app, headless=True, auto_pilot=pilot))
    from engine.cli import main

    assert main([]) == (1 if crash else 0)
