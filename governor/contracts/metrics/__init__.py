"""Every metric of the stack, one module per family of names.

``service``: the inference service's ``governor_*``; ``vllm``: vLLM's ``vllm:*``, which the sim
engine emits identically; ``gpu``: the GPU exporter's ``gpu_*``; ``controller``:
``governor_controller_*``; ``slo``: the ``slo:*`` series the generated rules record, and the
alerts' names; ``scrape``: what Prometheus writes at every scrape, ``up`` and the target labels.
"""
