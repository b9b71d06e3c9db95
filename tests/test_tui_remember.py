"""Setup remembers its last values across restarts of the app (tui.remembered: a small file in
the state directory), and a file that is corrupt, foreign or holds values that no longer check is
ignored with a note, never a crash."""

from __future__ import annotations

import json
from typing import Any

import pytest

from engine.device.session import DeviceSession
from engine.results.store import Store
from test_tui_flow import env  # noqa: F401 - the flow tests' isolation and frozen trace
from tui_helpers import drive, make_app


async def test_setup_remembers_its_values_across_restarts(twin_session: DeviceSession, results_store: Store,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from tui.screens.setup import SetupScreen

    monkeypatch.setattr(SetupScreen, "SAVE_AFTER_S", 3600.0)  # no pause long enough: only leaving writes
    app = make_app(twin_session, store=results_store, poll=False)
    async with drive(app) as ui:
        await ui.press("2")
        await ui.type_into("model", "bert-mini")
        await ui.type_into("batch_size", "16")
        app.screen.query_one("#task").value = "mrpc"
        app.screen.query_one("#compare").value = False
        await ui.press("escape", "q")  # quit at once: what was typed is remembered on the way out
    again = make_app(twin_session, store=results_store, poll=False)
    async with drive(again) as ui:
        await ui.press("2")
        v = again.screen.values()
        assert (v.model, v.batch_size, v.task, v.compare) == ("bert-mini", "16", "mrpc", False)
        assert not again._notifications  # nothing was ignored
        await ui.press("6")
        assert again.screen.query_one("#sw-model").value == "bert-mini"  # the Sweep page follows it
        await ui.press("q")


@pytest.mark.parametrize("content, said", [
    (b"{not json", "not valid JSON"),
    (b"[" * 60_000, "nests deeper than 64 levels"),  # json.loads recursed until RecursionError: a crash at start
    (json.dumps({"version": 99, "values": {}}).encode(), "not a file this version wrote"),
    (json.dumps({"version": 1, "values": {"task": "nope", "batch_size": "-3", "mode": "xx", "compare": "yes",
                                          "model": "/no/such/config.json", "seq_len": "32"}}).encode(),
     "task, mode, compare with MAXN, model, batch size did not check"),
], ids=["corrupt", "nested", "foreign", "values-that-do-not-check"])
async def test_remembered_values_that_do_not_check_are_ignored_with_a_note(
        twin_session: DeviceSession, results_store: Store, content: bytes, said: str) -> None:
    from tui.remembered import setup_file

    path = setup_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    app = make_app(twin_session, store=results_store, poll=False)
    async with drive(app) as ui:
        await ui.press("2")
        v = app.screen.values()
        assert (v.model, v.task, v.mode, v.batch_size, v.compare) == ("bert-tiny", "sst2", "full", "", True)
        if "did not check" in said:
            assert v.seq_len == "32"  # what checks is kept
        notes = [str(n.message) for n in app._notifications]
        assert any(said in n and str(path) in n for n in notes), notes
        await ui.press("q")
    assert app.return_code == 0


def test_remembering_survives_a_state_dir_it_cannot_write(isolated_env: Any, caplog: pytest.LogCaptureFixture) -> None:
    from tui.forms import SetupValues
    from tui.remembered import load_setup, save_setup

    blocked = isolated_env.state_dir
    blocked.parent.mkdir(parents=True, exist_ok=True)
    blocked.write_text("a file where the folder should be")
    assert save_setup(SetupValues(model="bert-mini")) is False
    assert "cannot remember Setup's values" in caplog.text
    assert load_setup().values == SetupValues() and load_setup().note is not None


async def test_remembered_numbers_are_read_as_the_form_reads_them(twin_session: DeviceSession,
                                                                 results_store: Store) -> None:
    """A number the form refuses (too long, a separator, superscript or Arabic-Indic digits) is not
    restored: a 300-digit batch size came back and the memory line showed a 300-digit GiB figure."""
    from tui.remembered import setup_file

    path = setup_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"version": 1, "values": {
        "mode": "lora", "batch_size": "1" * 300, "seq_len": "٣٢", "lora_rank": "²", "slowdown": "1_0",
        "amount": "1" * 4000, "train_samples": "2_5"}}))
    app = make_app(twin_session, store=results_store, poll=False)
    async with drive(app) as ui:
        await ui.press("2")
        v = app.screen.values()
        assert v.mode == "lora"  # what checks is kept
        numbers = (v.batch_size, v.seq_len, v.lora_rank, v.slowdown, v.amount, v.train_samples)
        assert numbers == ("", "", "8", "", "100", "")  # each back to its default
        notes = [str(n.message) for n in app._notifications]
        assert any("slowdown limit, length, batch size, seq length, train samples, LoRA rank did not check" in n
                   for n in notes), notes
        assert "memory: fits" in str(app.screen.query_one("#memory").content)
        await ui.press("q")
    assert app.return_code == 0
