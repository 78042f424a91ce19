"""Grafana dashboards and provisioning, generated from the SLO spec and the metric names."""
