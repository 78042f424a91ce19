"""Bounded admission: the queue that holds requests for an engine slot (:mod:`.queue`) and the
pure per-class policy it consults (:mod:`.policy`)."""
