"""What the service records about itself: its ``governor_*`` series (:mod:`.metrics`, with the
lock-free :mod:`.counted` families), the stage clock of every request (:mod:`.stages`), OTLP
traces (:mod:`.tracing`) and the request log (:mod:`.request_log`)."""
