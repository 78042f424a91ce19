"""Content negotiation and the render cache shared by the event loop and the sampler thread."""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_om

from governor.contracts.metrics import gpu as m
from governor.exporters.exposition import ExpositionCache, Format, accepts_gzip, negotiate
from governor.exporters.gpu.fake import FakeNvml
from governor.exporters.gpu.sampler import Sampler
from tests.exporters.conftest import FakeClock, make_sampler

PROMETHEUS_ACCEPT = ("application/openmetrics-text;version=1.0.0;q=0.5,"
                     "application/openmetrics-text;version=0.0.1;q=0.4,"
                     "text/plain;version=0.0.4;q=0.3,*/*;q=0.2")


@pytest.mark.parametrize(
    ("accept", "fmt"),
    [
        pytest.param(PROMETHEUS_ACCEPT, Format.OPENMETRICS, id="what Prometheus sends"),
        pytest.param("application/openmetrics-text", Format.OPENMETRICS, id="bare OpenMetrics"),
        pytest.param("APPLICATION/OpenMetrics-Text; version=1.0.0", Format.OPENMETRICS,
                     id="any case"),
        pytest.param("application/openmetrics-text; version=9.9.9", Format.OPENMETRICS,
                     id="a future version gets the one we speak"),
        pytest.param("text/plain", Format.TEXT, id="text"),
        pytest.param("*/*", Format.TEXT, id="anything"),
        pytest.param(None, Format.TEXT, id="no header"),
        pytest.param("", Format.TEXT, id="empty"),
        pytest.param("application/openmetrics-text;q=0", Format.TEXT, id="OpenMetrics refused"),
        pytest.param("application/openmetrics-text;q=zero", Format.OPENMETRICS,
                     id="a malformed q is ignored"),
        pytest.param(";;;,,,==", Format.TEXT, id="punctuation"),
        pytest.param("text/plain," * 10_000 + "application/openmetrics-text", Format.TEXT,
                     id="a huge header is read only so far"),
        pytest.param("\x00\xff garbage", Format.TEXT, id="garbage"),
    ],
)
def test_negotiate(accept: str | None, fmt: Format) -> None:
    assert negotiate(accept) is fmt


CacheAndSampler = tuple[ExpositionCache, Sampler]


@pytest.fixture
def cache_and_sampler(clock: FakeClock, tmp_path: Path) -> Iterator[CacheAndSampler]:
    sampler = make_sampler(FakeNvml(2, clock=clock), clock, tmp_path)
    sampler.tick()
    yield ExpositionCache("t"), sampler
    sampler.close()


def test_a_snapshot_is_rendered_once_per_format(
    cache_and_sampler: CacheAndSampler, clock: FakeClock
) -> None:
    cache, sampler = cache_and_sampler
    snapshot = sampler.latest()
    bodies = {cache.body(snapshot, fresh=True, fmt=Format.TEXT, age_seconds=0.1 * i)
              for i in range(20)}
    assert cache.renders == 1
    assert len(bodies) == 20  # the age differs, the rest is shared
    cache.body(snapshot, fresh=True, fmt=Format.OPENMETRICS, age_seconds=0.0)
    assert cache.renders == 2
    clock.advance(1.0)
    cache.body(sampler.tick(), fresh=True, fmt=Format.TEXT, age_seconds=0.0)
    assert cache.renders == 3


def test_openmetrics_ends_with_one_eof_after_the_age(cache_and_sampler: CacheAndSampler) -> None:
    cache, sampler = cache_and_sampler
    body = cache.body(sampler.latest(), fresh=True, fmt=Format.OPENMETRICS, age_seconds=0.25)
    text = body.decode()
    assert text.endswith("# EOF\n") and text.count("# EOF") == 1
    names = {f.name for f in parse_om(text)}  # type: ignore[no-untyped-call]
    assert {m.EXPORTER_SNAPSHOT_AGE.name, m.UP.name, "gpu"} <= names


def test_prepare_renders_ahead_only_what_was_scraped(
    cache_and_sampler: CacheAndSampler, clock: FakeClock
) -> None:
    cache, sampler = cache_and_sampler
    clock.advance(1.0)
    cache.prepare(sampler.tick())
    assert cache.renders == 0  # nobody scraped: nothing rendered
    cache.body(sampler.latest(), fresh=True, fmt=Format.OPENMETRICS, age_seconds=0.0)
    clock.advance(1.0)
    snapshot = sampler.tick()
    cache.prepare(snapshot)  # the sampler thread's work
    assert cache.renders == 2
    cache.body(snapshot, fresh=True, fmt=Format.OPENMETRICS, age_seconds=0.0)
    assert cache.renders == 2  # the scrape found it ready
    for _ in range(3):  # a target scraped rarely is not rendered every round
        clock.advance(1.0)
        cache.prepare(sampler.tick())
    assert cache.renders == 3


def test_an_older_snapshot_never_serves_a_newer_body(
    cache_and_sampler: CacheAndSampler, clock: FakeClock
) -> None:
    cache, sampler = cache_and_sampler
    old = sampler.latest()
    clock.advance(1.0)
    new = sampler.tick()
    new_body = cache.body(new, fresh=True, fmt=Format.TEXT, age_seconds=0.0)
    old_body = cache.body(old, fresh=True, fmt=Format.TEXT, age_seconds=0.0)
    assert old_body != new_body
    assert b"gpu_exporter_collections_total 1.0" in old_body


@pytest.mark.parametrize(
    ("header", "gzip"),
    [
        pytest.param("gzip", True, id="gzip"),
        pytest.param("deflate, gzip;q=1.0, *;q=0.5", True, id="a list"),
        pytest.param("GZIP", True, id="any case"),
        pytest.param("gzip;q=0", False, id="gzip refused"),
        pytest.param("identity", False, id="identity"),
        pytest.param("br, zstd", False, id="other codings"),
        pytest.param(None, False, id="no header"),
        pytest.param("identity," * 10_000 + "gzip", False, id="a huge header is read only so far"),
    ],
)
def test_accepts_gzip(header: str | None, gzip: bool) -> None:
    assert accepts_gzip(header) is gzip


@pytest.mark.parametrize("fmt", [Format.TEXT, Format.OPENMETRICS], ids=lambda f: f.name.lower())
def test_a_gzipped_body_is_one_member_holding_the_plain_body(
    cache_and_sampler: CacheAndSampler, fmt: Format
) -> None:
    cache, sampler = cache_and_sampler
    snapshot = sampler.latest()
    plain = cache.body(snapshot, fresh=True, fmt=fmt, age_seconds=0.5)
    for age in (0.5, 0.5, 0.75):  # the prefix is reused, each tail is its own
        packed = cache.body(snapshot, fresh=True, fmt=fmt, age_seconds=age, gzip=True)
        one_member = zlib.decompressobj(wbits=16 + 15)
        unpacked = one_member.decompress(packed)
        assert one_member.eof and one_member.unused_data == b""
        expected = plain.replace(b"age_seconds 0.5", f"age_seconds {age}".encode())
        assert unpacked == expected
        assert gzip.decompress(packed) == expected
        assert len(packed) < len(plain) / 4
    assert cache.renders == 1


def test_prepare_also_compresses_ahead_when_scrapes_asked_for_gzip(
    cache_and_sampler: CacheAndSampler, clock: FakeClock
) -> None:
    cache, sampler = cache_and_sampler
    cache.body(sampler.latest(), fresh=True, fmt=Format.TEXT, age_seconds=0.0, gzip=True)
    cache.body(sampler.latest(), fresh=True, fmt=Format.TEXT, age_seconds=0.0)
    clock.advance(1.0)
    snapshot = sampler.tick()
    cache.prepare(snapshot)
    assert cache.renders == 2  # one render serves both encodings
    packed = cache.body(snapshot, fresh=True, fmt=Format.TEXT, age_seconds=0.0, gzip=True)
    assert cache.renders == 2
    assert b"gpu_exporter_collections_total 2.0" in gzip.decompress(packed)


def test_scrapes_see_a_snapshot_only_once_it_is_rendered(
    cache_and_sampler: CacheAndSampler, clock: FakeClock
) -> None:
    cache, sampler = cache_and_sampler
    clock.advance(1.0)
    first = sampler.tick()
    cache.body(first, fresh=True, fmt=Format.TEXT, age_seconds=0.0)
    cache.prepare(first)
    assert cache.published is first
    clock.advance(1.0)
    second = sampler.tick()  # the sampler has a newer snapshot, not rendered yet…
    assert cache.published is first  # …so scrapes keep serving the rendered one
    renders = cache.renders
    cache.prepare(second)
    assert cache.published is second
    cache.body(second, fresh=True, fmt=Format.TEXT, age_seconds=0.0)
    assert cache.renders == renders + 1  # rendered once, in the sampler thread
