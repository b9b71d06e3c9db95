"""The results store from the app: history, comparisons, export, delete (History's keys and
the palette's: the requests in tui.messages)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from engine.core.errors import SlmDvfsError
from engine.core.interval import Interval
from tui.messages import (
    DeleteRequested,
    ExportRequested,
    PairRequested,
    RecordsRequested,
    RunHighlighted,
    RunOpenRequested,
    SweepOpenRequested,
)
from tui.screens.modals import ConfirmScreen
from tui.state import AppState, StoredRecords


class StoreActions(AppState):
    """Mixin of SlmDvfsApp."""

    # ------------------------------------------------------------------ History's requests
    def on_records_requested(self, message: RecordsRequested) -> None:
        self.load_records(more=message.more)

    def on_run_highlighted(self, message: RunHighlighted) -> None:
        self.highlighted_run = message.run_id

    def on_run_open_requested(self, message: RunOpenRequested) -> None:
        self.open_run(message.run_id)

    def on_sweep_open_requested(self, message: SweepOpenRequested) -> None:
        self.open_sweep(message.sweep_id)

    def on_pair_requested(self, message: PairRequested) -> None:
        self.open_pair(message.first, message.second)

    def on_export_requested(self, message: ExportRequested) -> None:
        self.export_run(message.run_id)

    def on_delete_requested(self, message: DeleteRequested) -> None:
        self.delete_run(message.run_id)

    # ------------------------------------------------------------------ the store
    def load_records(self, more: str | None = None) -> None:
        """The store's runs and sweeps for the History page, a page at a time (engine.results.history):
        the newest, or with `more` ("runs" / "sweeps") that table's next page after the rows held."""
        from engine.results.history import history_page

        store = self.store
        if store is None:
            return
        held = self.records if more is not None else None
        try:
            if held is None:
                page = history_page(store)
            elif more == "runs" and held.more_runs and held.runs:
                page = history_page(store, runs_before=held.runs[-1].id, sweeps=False)
            elif more == "sweeps" and held.more_sweeps and held.sweeps:
                page = history_page(store, sweeps_before=held.sweeps[-1][0].id, runs=False)
            else:
                return  # nothing older to read
        except SlmDvfsError as exc:
            self.notify(f"{exc.what}\n{exc.remedy}", title="Cannot read the store", severity="error")
            return
        if held is None:
            self.records = StoredRecords(page.runs, page.sweeps, page.more_runs, page.more_sweeps)
        elif more == "runs":
            self.records = replace(held, runs=(*held.runs, *page.runs), more_runs=page.more_runs)
        else:
            self.records = replace(held, sweeps=(*held.sweeps, *page.sweeps), more_sweeps=page.more_sweeps)

    def open_run(self, run_id: int, baseline_id: int | None = None, *, switch: bool = True,
                 estimate: Interval | None = None) -> None:
        """Show a run against a baseline (given, recorded, or found) on the Compare page; `estimate`:
        the experiment's board estimate of the saving, computed by the engine (shown as it is)."""
        from engine.results.baseline import find_baseline
        from tui.compare_model import build_comparison

        store = self.store
        if store is None:
            return
        try:
            run = store.get_run(run_id)
            base = store.get_run(baseline_id) if baseline_id is not None else find_baseline(store, run)
            view = build_comparison(run, base, store.power_samples(run.id),
                                    store.power_samples(base.id) if base is not None else (), store=store)
        except SlmDvfsError as exc:
            self.notify(f"{exc.what}\n{exc.remedy}", title="Cannot open the run", severity="error")
            return
        self.compare_view = replace(view, estimate=estimate) if estimate is not None else view
        if switch:
            self.action_page("compare")

    def open_pair(self, a: int, b: int) -> None:
        """Compare two stored runs: a MAXN one is the baseline; with none, the Compare page says why the
        second marked is not one (engine.results.compare.mismatch, as `slm-dvfs compare` refuses it)."""
        from engine.results.baseline import BASELINE_POLICY

        store = self.store
        if store is None:
            return
        try:
            ra = store.get_run(a)
        except SlmDvfsError as exc:
            self.notify(exc.what, severity="error")
            return
        run, base = (b, a) if ra.policy == BASELINE_POLICY else (a, b)
        self.open_run(run, base)

    def export_run(self, run_id: int) -> Path | None:
        from engine.core import paths
        from engine.results.export import export_run

        store = self.store
        if store is None:
            return None
        try:
            out_dir = paths.data_dir() / "exports"
            out_dir.mkdir(parents=True, exist_ok=True)
            out = out_dir / f"run-{run_id}.csv"
            run, n_samples = export_run(store, run_id, out, "csv")
        except (SlmDvfsError, OSError) as exc:
            self.notify(str(exc), title="Export failed", severity="error")
            return None
        self.notify(f"run {run_id} written to {out}: its summary and {n_samples} power samples "
                    f"[{run.source.value}] as CSV (every export goes to {out_dir})", title="Exported")
        return out

    def delete_run(self, run_id: int) -> None:
        store = self.store
        if store is None:
            return

        def answer(ok: bool | None) -> None:
            if not ok:
                return
            try:
                store.delete_run(run_id)
            except SlmDvfsError as exc:
                self.notify(exc.what, title="Delete failed", severity="error")
                return
            if self.compare_view is not None and run_id in (self.compare_view.run.id,
                                                            getattr(self.compare_view.base, "id", None)):
                self.compare_view = None
            self.notify(f"run {run_id} deleted")
            self.load_records()

        self.push_screen(ConfirmScreen(f"Delete run {run_id}?",
                                       "Its figures, power trace and comparisons leave the store for good.",
                                       yes="Delete"), answer)

    def _history_run(self) -> int | None:
        """The run History highlights (RunHighlighted), for the palette's export and delete."""
        if self.highlighted_run is None:
            self.notify("highlight a run on the History page (5) first", severity="warning")
            self.action_page("history")
        return self.highlighted_run

    def action_export_selected(self) -> None:
        run_id = self._history_run()
        if run_id is not None:
            self.export_run(run_id)

    def action_delete_selected(self) -> None:
        run_id = self._history_run()
        if run_id is not None:
            self.delete_run(run_id)
