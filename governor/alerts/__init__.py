"""The generators of Prometheus rules and their promtool tests, Alertmanager and Prometheus
configuration, from the SLO spec (:mod:`governor.slo`)."""
