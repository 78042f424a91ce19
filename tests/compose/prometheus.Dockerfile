# A stand-in for prom/prometheus:v2.42.0, for the compose test only (no image registry is reachable
# where the tests run). Built from Debian's package of the same release on a local Debian base,
# laid out as the official image is (prometheus/prometheus, Dockerfile at v2.42.0): the binaries
# at /bin/prometheus and /bin/promtool, configuration in /etc/prometheus, data in /prometheus, the
# same entrypoint and default flags, user nobody, and busybox's wget (the official image is built
# on busybox), which compose's health probe runs.
ARG BASE_IMAGE
FROM ${BASE_IMAGE}
RUN apt-get update -qq \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
       prometheus busybox >/dev/null \
    && rm -rf /var/lib/apt/lists/* \
    && test -x /bin/prometheus && test -x /bin/promtool \
    && ln -s /bin/busybox /usr/local/bin/wget \
    && mkdir -p /prometheus /usr/share/prometheus \
    && mv /etc/prometheus/console_libraries /etc/prometheus/consoles /usr/share/prometheus/ \
    && ln -s /usr/share/prometheus/console_libraries /usr/share/prometheus/consoles /etc/prometheus/ \
    && chown -R nobody:nogroup /etc/prometheus /prometheus
USER nobody
EXPOSE 9090
VOLUME ["/prometheus"]
WORKDIR /prometheus
ENTRYPOINT ["/bin/prometheus"]
CMD ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus", \
     "--web.console.libraries=/usr/share/prometheus/console_libraries", \
     "--web.console.templates=/usr/share/prometheus/consoles"]
