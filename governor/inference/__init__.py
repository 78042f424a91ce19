"""The OpenAI-compatible inference service over vLLM or the embedded simulated engine."""

__version__ = "0.1.0"
