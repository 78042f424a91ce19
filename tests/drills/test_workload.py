"""A drill's traffic as data: scaling, descriptions, the requests it draws."""

from __future__ import annotations

import random

import pytest

from governor.drills import catalog
from governor.drills.clients import Outcome
from governor.drills.loadgen import Tally, workload_of
from governor.drills.workload import SlowBody, SlowReader, Traffic, Workload, request_body


def test_a_traffic_class_is_open_or_closed_loop_not_both() -> None:
    with pytest.raises(ValueError, match="a rate or a concurrency"):
        Traffic("x", (1, 2), (1, 2), rate_per_second=1.0, concurrency=2)
    with pytest.raises(ValueError, match="a rate or a concurrency"):
        Traffic("x", (1, 2), (1, 2))
    with pytest.raises(ValueError, match="max_tokens must be"):
        Traffic("x", (1, 2), (5, 2), rate_per_second=1.0)


def test_scaling_multiplies_rates_and_clients() -> None:
    load = Workload((Traffic("a", (1, 2), (1, 2), rate_per_second=3.0),
                     Traffic("b", (1, 2), (1, 2), concurrency=3)))
    scaled = load.scaled(0.5).traffic
    assert (scaled[0].rate_per_second, scaled[1].concurrency) == (1.5, 2)
    assert load.scaled(0.01).traffic[1].concurrency == 1


def test_descriptions_say_how_clients_behave() -> None:
    slow = Traffic("slow", (20, 40), (600, 600), concurrency=4, client=SlowReader(4096, 0.5))
    assert slow.describe().startswith("slow: 4 clients closed loop, prompts 20-40 words, "
                                      "600 tokens, streamed, read 4096 B every 0.5 s")
    body = Traffic("b", (5, 5), (1, 9), rate_per_second=2.0, client=SlowBody(128, 0.2))
    assert "bodies sent 128 B every 0.2 s" in body.describe()


def test_a_seed_draws_the_same_requests() -> None:
    chats = catalog.HEALTHY.traffic[0]
    first = [request_body(chats, "m", random.Random("1/chats")) for _ in range(2)]
    again = [request_body(chats, "m", random.Random("1/chats")) for _ in range(2)]
    assert first == again
    words = len(first[0]["messages"][1]["content"].split())  # type: ignore[index]
    assert chats.prompt_words[0] <= words <= chats.prompt_words[1]


def test_the_healthy_phase_is_the_scaled_healthy_load_and_the_drill_s_background() -> None:
    plain = workload_of("queue", "healthy", 2.0)
    assert plain.traffic == catalog.HEALTHY.scaled(2.0).traffic
    throttled = workload_of("gpu_throttled", "healthy", 1.0)
    assert throttled.traffic[1:] == catalog.by_name("gpu_throttled").background.traffic
    assert workload_of("healthy", "inject", 1.0).traffic == ()


def test_a_tally_reports_and_starts_again() -> None:
    tally = Tally()
    tally.add(Outcome(200, 1.0))
    tally.add(Outcome(429, 3.0))
    tally.add(Outcome(0, 2.0, "refused"))
    assert tally.take("chats") == {"traffic": "chats", "answered": {"200": 1, "429": 1,
                                                                   "error": 1},
                                   "mean_seconds": 2.0, "shed": 0}
    assert tally.take("chats")["answered"] == {}
