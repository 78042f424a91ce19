# Governor's image for the sim engine, the exporter and the controller (no vLLM, no CUDA).
# The GPU exporter talks to the driver through NVML, which the NVIDIA container runtime mounts.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /app
COPY pyproject.toml README.md slo.yaml ./
COPY governor ./governor
RUN pip install --no-compile '.[gpu]' && useradd --uid 10001 --no-create-home governor \
    && mkdir -p /var/lib/governor && chown governor /var/lib/governor
USER governor
ENTRYPOINT ["governor"]
CMD ["serve"]
