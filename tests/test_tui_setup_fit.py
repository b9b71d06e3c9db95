"""Setup's zoo picker, modes and live memory estimate: the pure parts (tui.setup_fit, tui.forms)
and the page driven by keys on the twin."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.device.session import DeviceSession
from engine.results.store import Store
from engine.workload.zoo import load_zoo
from tui import forms, setup_fit
from tui_helpers import drive, make_app


def test_the_picker_lists_every_zoo_model_with_family_and_size() -> None:
    rows = setup_fit.zoo_rows()
    assert {r.name for r in rows} == set(load_zoo())
    assert [r.params for r in rows] == sorted(r.params for r in rows)
    gemma = next(r for r in rows if r.name == "gemma-2b")
    assert gemma.label().split()[:3] == ["gemma-2b", "gemma", "2.51B"]
    assert setup_fit.params_text(4_386_178) == "4.4M"


def test_the_memory_line_fits_or_says_what_would() -> None:
    line = setup_fit.memory_line(forms.SetupValues(model="bert-tiny"))
    assert line.startswith("memory: fits: ") and " of 58.4 GiB" in line and "activations" in line
    assert line.endswith("[predicted]")  # an estimate: labelled as the model's figure
    big = forms.SetupValues(model="gemma-2b", batch_size="64", seq_len="512", precision="fp32")
    line = setup_fit.memory_line(big)
    assert line.startswith("memory: does not fit: 248.5 GiB of 58.4 GiB; try batch size 5 or seq length 40")
    assert "--grad-checkpointing" not in line  # the form has no such field: not offered here
    # Setup marks the line by the status's flag, never by matching its text
    assert setup_fit.memory_status(big).over and not setup_fit.memory_status(forms.SetupValues(model="bert-tiny")).over
    lora = forms.SetupValues(model="gemma-2b", batch_size="4", precision="fp32", mode="lora", lora_rank="8")
    assert setup_fit.memory_line(lora).startswith("memory: fits: ")
    higher = setup_fit.memory_line(forms.SetupValues(**{**lora.__dict__, "lora_rank": "256"}))
    assert higher != setup_fit.memory_line(lora)  # the rank counts


def test_hub_ids_local_configs_and_bad_fields(tmp_path: Path) -> None:
    assert "once the model is resolved" in setup_fit.memory_line(forms.SetupValues(model="org/some-model"))
    path = tmp_path / "config.json"
    path.write_text(json.dumps(load_zoo()["smollm2-135m"].config))
    assert setup_fit.memory_line(forms.SetupValues(model=str(path))).startswith("memory: fits: ")
    assert "fields marked in red" in setup_fit.memory_line(forms.SetupValues(batch_size="0"))
    assert "fields marked in red" in setup_fit.memory_line(forms.SetupValues(mode="lora", lora_rank="x"))
    too_long = setup_fit.memory_line(forms.SetupValues(model="bert-tiny", seq_len="4096"))
    assert too_long == "memory: seq length 4096 exceeds the 512 positions bert-tiny takes"


def test_the_lora_rank_is_checked_only_in_mode_lora() -> None:
    assert "lora_rank" not in forms.SetupValues(lora_rank="x").errors()
    assert "lora_rank" in forms.SetupValues(mode="lora", lora_rank="x").errors()
    assert "lora_rank" in forms.SetupValues(mode="lora", lora_rank="5000").errors()
    key = forms.workload_key(forms.SetupValues(mode="lora", lora_rank="8"))
    assert key != forms.workload_key(forms.SetupValues(mode="lora", lora_rank="16"))


async def test_setup_picks_a_zoo_model_shows_the_rank_and_the_estimate(twin_session: DeviceSession,
                                                                      results_store: Store) -> None:
    from textual.widgets import Input, OptionList, Select, Static

    from tui.screens.modals import ZooPickerScreen

    app = make_app(twin_session, store=results_store, poll=False)
    async with drive(app) as ui:
        await ui.press("2")
        setup = app.screen
        memory = setup.query_one("#memory", Static)
        assert str(memory.render()).startswith("memory: fits: 1.6 GiB")
        setup.query_one("#model", Input).focus()
        await ui.press("down")  # ↓ in the model field lists the zoo
        assert isinstance(app.screen, ZooPickerScreen)
        listing = app.screen.query_one(OptionList)
        listing.highlighted = [o.id for o in listing.options].index("gemma-2b")
        await ui.press("enter")
        assert app.screen is setup and setup.query_one("#model", Input).value == "gemma-2b"
        assert str(memory.render()).startswith("memory: fits: ")
        setup.query_one("#batch_size", Input).value = "64"
        setup.query_one("#seq_len", Input).value = "512"
        await ui.settle()
        assert "does not fit" in str(memory.render()) and memory.has_class("-over")
        rank = setup.query_one("#lora_rank", Input)
        assert not rank.display  # only in mode lora
        setup.query_one("#mode", Select).value = "lora"
        await ui.settle()
        assert rank.display and setup.values().mode == "lora" and setup.values().lora_rank == "8"
        setup.query_one("#zoo-pick").focus()
        await ui.press("enter")  # the ▼ button opens the same list; escape keeps the field
        assert isinstance(app.screen, ZooPickerScreen)
        await ui.press("escape")
        assert setup.query_one("#model", Input).value == "gemma-2b"


@pytest.mark.parametrize("mode", ["full", "bitfit", "head", "lora"])
def test_every_mode_becomes_the_spec(mode: str) -> None:
    spec = forms.build_spec(forms.SetupValues(mode=mode), twin_profile="agx-orin-64gb", is_twin=True)
    assert spec.workload.mode == mode
