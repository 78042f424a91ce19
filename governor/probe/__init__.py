"""``governor probe``: the synthetic probe. It sends a small streaming request to each target
``slo.yaml`` names, on an interval, and exports what a client saw (time to first token,
inter-token latency, success) on its own ``/metrics``; its requests carry a header that
``governor serve`` leaves out of the service's own series."""
