# A stand-in for python:3.11-slim, the base of Governor's Dockerfile, for the compose test only
# (no image registry is reachable where the tests run): Debian bookworm's Python 3.11 on a local
# Debian base, in a virtual environment first on PATH, so that `python` and `pip` work as in the
# official image (Debian's own interpreter refuses `pip install` outside one, PEP 668).
ARG BASE_IMAGE
FROM ${BASE_IMAGE}
RUN apt-get update -qq \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
       python3 python3-venv >/dev/null \
    && rm -rf /var/lib/apt/lists/* \
    && python3 -m venv /usr/local/python
ENV PATH=/usr/local/python/bin:$PATH LANG=C.UTF-8
CMD ["python3"]
