"""The controller's decision law: pure functions from observations and state to a decision.

Nothing here does I/O or reads a clock; callers import the submodules (:mod:`.decide` is the
entry point). The law reads only :mod:`governor.controller.model` and the layers below it.
"""
