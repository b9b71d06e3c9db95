"""The clock guard: journals (journal.py), the per-device lock (lock.py), and the guard that restores (guard.py)."""
