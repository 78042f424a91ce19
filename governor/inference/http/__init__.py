"""The service's HTTP edge: the listener and its connection book, request bodies, timed writes,
OpenAI-style error bodies and the rate-limited server log. Nothing here knows about generation."""
