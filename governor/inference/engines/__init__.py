"""Engines behind the service: ``sim`` (embedded, no GPU) and ``vllm``."""
