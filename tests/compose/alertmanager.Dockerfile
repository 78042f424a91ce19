# A stand-in for prom/alertmanager:v0.25.0, for the compose test only (no image registry is
# reachable where the tests run). Built from Debian's package of the same release on a local
# Debian base, laid out as the official image is (prometheus/alertmanager, Dockerfile at v0.25.0):
# the binaries at /bin/alertmanager and /bin/amtool (Debian names the first
# prometheus-alertmanager), configuration in /etc/alertmanager, data in /alertmanager, the same
# entrypoint and default flags, user nobody, and busybox's wget for compose's health probe.
ARG BASE_IMAGE
FROM ${BASE_IMAGE}
RUN apt-get update -qq \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
       prometheus-alertmanager busybox >/dev/null \
    && rm -rf /var/lib/apt/lists/* \
    && ln -s prometheus-alertmanager /usr/bin/alertmanager \
    && test -x /bin/alertmanager && test -x /bin/amtool \
    && ln -s /bin/busybox /usr/local/bin/wget \
    && mkdir -p /etc/alertmanager /alertmanager \
    && cp /etc/prometheus/alertmanager.yml /etc/alertmanager/alertmanager.yml \
    && chown -R nobody:nogroup /etc/alertmanager /alertmanager
USER nobody
EXPOSE 9093
VOLUME ["/alertmanager"]
WORKDIR /alertmanager
ENTRYPOINT ["/bin/alertmanager"]
CMD ["--config.file=/etc/alertmanager/alertmanager.yml", "--storage.path=/alertmanager"]
