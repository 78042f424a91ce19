"""NVML and GPM sampling, the fake NVML, and the shaping of readings into metric families."""
