"""Contracts between Governor's parts, each declared once: metrics, endpoints and PromQL.

The bottom layer: it imports the standard library and prometheus_client, nothing else of
Governor's, so every component (the service, the exporter, the controller) and every generator
(rules, boards) can import it and none of them restates what it declares:

>>> from governor.contracts.metrics import vllm
>>> vllm.PROMPT_TOKENS.total
'vllm:prompt_tokens_total'

:mod:`~governor.contracts.declaration` is the declaration of a metric;
:mod:`~governor.contracts.instruments` and :mod:`~governor.contracts.families` build
prometheus_client objects from one; :mod:`~governor.contracts.metrics` holds every metric, a module
per family of names; :mod:`~governor.contracts.endpoints` the ports, job names and paths;
:mod:`~governor.contracts.promql` the one PromQL builder.
"""
