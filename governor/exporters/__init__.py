"""The GPU exporter: NVML/GPM sampler → immutable snapshots → Prometheus exposition."""
