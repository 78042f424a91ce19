"""Bounded admission on asyncio: the queue that holds requests for an engine slot
(:mod:`.queue`), driving the pure policies of :mod:`governor.admission`."""
