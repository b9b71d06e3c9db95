"""Sweeps measured elsewhere, read from a file (`slm-dvfs import-sweep`); nothing here writes the store.

- `read`: the file's bytes and its rows, CSV or JSON, with where each came from;
- `fields`: one cell checked against the board's tables (clocks, modes, rails) and plausible bounds;
- `sweep_file`: the rows into `FinishedSweep`s, one per workload and rail set, that
  `Store.add_finished_sweeps` records.
"""
