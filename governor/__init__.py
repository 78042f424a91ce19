"""The ``governor`` command: one entry point dispatching to each component."""

__version__ = "0.1.0"
