"""slm-dvfs engine: everything that works without a screen (never imports textual)."""

__version__ = "0.1.0"
