"""The vLLM engine: ``AsyncLLM`` in process, retuned live through a vLLM general plugin."""
