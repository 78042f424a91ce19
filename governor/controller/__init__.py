"""The SLO controller: alert intake, PromQL observation, pure decisions, idempotent actuation."""
