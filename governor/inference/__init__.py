"""The OpenAI-compatible inference service over vLLM or the embedded simulated engine."""
