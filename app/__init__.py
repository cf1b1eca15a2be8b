"""Runwatch: experiment tracking that proves a resumed run trained on the data it was meant to."""

__version__ = "0.1.0"
