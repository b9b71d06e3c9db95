"""The results store from the app: history, comparisons, export, delete."""

from __future__ import annotations

from pathlib import Path

from engine.core.errors import SlmDvfsError
from tui.screens.compare import CompareScreen
from tui.screens.history import HistoryScreen
from tui.screens.modals import ConfirmScreen


class StoreActions:
    """Mixin of SlmDvfsApp."""

    def reload_history(self) -> None:
        store = self.store
        screen = self.screen
        if store is None or not isinstance(screen, HistoryScreen):
            return
        try:
            runs = store.list_runs(limit=500)
            sweeps = []
            stored = store.stored_point_counts()  # one query, not one a sweep
            for s in store.list_sweeps():
                try:
                    w = store.get_workload(s.workload_id)
                    workload = f"{w.model}/{w.task}"
                except SlmDvfsError:
                    workload = "-"
                sweeps.append((s, workload, stored.get(s.id, 0)))
        except SlmDvfsError as exc:
            self.notify(f"{exc.what}\n{exc.remedy}", title="Cannot read the store", severity="error")
            return
        screen.show_records(runs, sweeps)

    def open_run(self, run_id: int, baseline_id: int | None = None, *, switch: bool = True) -> None:
        """Show a run against a baseline (given, recorded, or found) on the Compare page."""
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
        self.compare_view = view
        if switch:
            self.action_page("compare")
        if (page := self._current(CompareScreen)) is not None:
            page.show_comparison(view)

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
            self.reload_history()

        self.push_screen(ConfirmScreen(f"Delete run {run_id}?",
                                       "Its figures, power trace and comparisons leave the store for good.",
                                       yes="Delete"), answer)

    def _history_run(self) -> int | None:
        screen = self.get_screen("history")
        run = screen.selected_run() if getattr(screen, "composed", False) else None  # type: ignore[attr-defined]
        if run is None:
            self.notify("highlight a run on the History page (5) first", severity="warning")
            self.action_page("history")
            return None
        return run.id

    def action_export_selected(self) -> None:
        run_id = self._history_run()
        if run_id is not None:
            self.export_run(run_id)

    def action_delete_selected(self) -> None:
        run_id = self._history_run()
        if run_id is not None:
            self.delete_run(run_id)
