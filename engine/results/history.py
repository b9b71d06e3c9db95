"""A page of the store's runs and sweeps, newest first, as the TUI's History page lists them: a page
costs what its rows cost, whatever the store holds (keyset paging on the ids, one query a table)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from engine.results.records import RunRecord, SweepRecord

if TYPE_CHECKING:  # annotations only: engine.results.store imports the results modules
    from engine.results.store import Store

PAGE_ROWS = 100  # rows of each table a page holds: a screenful or a few


@dataclass(frozen=True)
class HistoryPage:
    """Runs and sweeps (each sweep with its workload's text and its points stored); `more_runs` /
    `more_sweeps`: older rows follow (`history_page(..., runs_before=page.runs[-1].id)`)."""

    runs: tuple[RunRecord, ...] = ()
    sweeps: tuple[tuple[SweepRecord, str, int], ...] = ()
    more_runs: bool = False
    more_sweeps: bool = False


def history_page(store: Store, *, runs_before: int | None = None, sweeps_before: int | None = None,
                 rows: int = PAGE_ROWS, runs: bool = True, sweeps: bool = True) -> HistoryPage:
    """The `rows` newest runs and sweeps with ids below `runs_before` / `sweeps_before` (None: from the
    newest); `runs` / `sweeps` False leaves that table out (the next page of the other)."""
    run_rows = store.list_runs(limit=rows + 1, before=runs_before) if runs else []
    sweep_rows = store.list_sweeps(limit=rows + 1, before=sweeps_before) if sweeps else []
    page_sweeps = sweep_rows[:rows]
    stored = store.stored_point_counts([s.id for s in page_sweeps])
    names = store.workload_names({s.workload_id for s in page_sweeps})
    return HistoryPage(
        runs=tuple(run_rows[:rows]),
        sweeps=tuple((s, names.get(s.workload_id, "-"), stored.get(s.id, 0)) for s in page_sweeps),
        more_runs=len(run_rows) > rows, more_sweeps=len(sweep_rows) > rows,
    )
