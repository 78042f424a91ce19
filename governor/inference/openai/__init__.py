"""The OpenAI-compatible API: the request protocol, prompts, one generation and its routes.

:mod:`.routes` is the entry point (``/v1/completions``, ``/v1/chat/completions``); it admits a
request, prepares it (:mod:`.prompts`, :mod:`.protocol`) and runs a :class:`.generation.Generation`,
which streams server-sent events (:mod:`.sse`) or gathers one response.
"""
