# Governor's image for the sim engine, the exporter and the controller (no vLLM, no CUDA).
# The GPU exporter talks to the driver through NVML, which the NVIDIA container runtime mounts.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /app
# The dependencies first, from the project's metadata alone, so that editing the sources does
# not reinstall them: this layer is rebuilt only when pyproject.toml changes.
COPY pyproject.toml README.md LICENSE ./
COPY governor/__init__.py governor/__init__.py
RUN pip install --no-compile '.[gpu]' && pip uninstall -y governor-slo
COPY governor ./governor
COPY slo.yaml ./
RUN pip install --no-compile --no-deps . && useradd --uid 10001 --no-create-home governor \
    && mkdir -p /var/lib/governor && chown governor /var/lib/governor
USER governor
ENTRYPOINT ["governor"]
CMD ["serve"]
