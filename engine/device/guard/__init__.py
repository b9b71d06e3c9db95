"""The clock guard: a journalled snapshot of every clock, restored whatever happens."""
