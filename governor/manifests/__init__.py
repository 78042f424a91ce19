"""Kubernetes manifests for the stack, generated from the spec's ``kubernetes`` and ``targets``."""
