"""The Textual app: a keyboard-driven client of the engine, usable over SSH at 80x24."""
