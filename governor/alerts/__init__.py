"""SLO spec model and the generators of rules, Alertmanager and Prometheus configuration."""
