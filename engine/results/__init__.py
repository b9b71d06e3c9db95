"""The one results API: the store, comparisons, baselines, sweep summaries, export and reports."""
