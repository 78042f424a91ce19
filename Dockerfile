# Governor's image for the sim engine, the exporter and the controller (no vLLM, no CUDA).
# The GPU exporter talks to the driver through NVML, which the NVIDIA container runtime mounts.
# The base is an argument: another Python 3.11 image with `python` and `pip` on PATH will do
# (the compose test builds on a local one: docs/deploy.md).
ARG PYTHON_IMAGE=python:3.11-slim
FROM ${PYTHON_IMAGE}

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
# The user the components run as, and the controller's state directory (a volume in compose).
RUN useradd --uid 10001 --no-create-home --shell /usr/sbin/nologin governor \
    && mkdir -p /var/lib/governor && chown governor /var/lib/governor
WORKDIR /app
# The dependencies first, from the project's metadata alone, so that editing the sources does
# not reinstall them: this layer is rebuilt only when pyproject.toml changes.
COPY pyproject.toml README.md LICENSE ./
COPY governor/__init__.py governor/__init__.py
RUN pip install --no-compile '.[gpu]' && pip uninstall -y governor-slo
COPY governor ./governor
COPY slo.yaml ./
RUN pip install --no-compile --no-deps .
USER governor
ENTRYPOINT ["governor"]
CMD ["serve"]
