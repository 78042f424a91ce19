"""Which cause a drill found: the leading cause of the first verdict that holds two polls."""

from __future__ import annotations

from governor.drills.finding import Finder, leading, ranked
from governor.drills.observe import Share


def test_the_leading_cause_is_the_largest_share_over_every_slo() -> None:
    shares = [Share("itl", "batching", 0.4), Share("ttft", "queue", 0.9),
              Share("itl", "kv_cache", 0.6)]
    assert leading(shares) == "queue"
    assert leading([]) is None


def test_equal_shares_lead_in_the_order_causes_are_declared() -> None:
    assert leading([Share("itl", "gpu_shared", 1.0), Share("ttft", "kv_cache", 1.0)]) == \
        "kv_cache"


def test_unknown_leads_like_any_cause() -> None:
    assert leading([Share("itl", "unknown", 1.0)]) == "unknown"


def test_ranked_lists_each_slo_s_causes_from_the_largest_once() -> None:
    shares = [Share("itl", "batching", 0.3, "a"), Share("itl", "batching", 0.5, "b"),
              Share("itl", "kv_cache", 0.4, "a"), Share("ttft", "queue", 1.0, "a")]
    assert [(s.slo, s.cause, s.share) for s in ranked(shares)] == [
        ("itl", "batching", 0.5), ("itl", "kv_cache", 0.4), ("ttft", "queue", 1.0)]


def test_a_verdict_that_flickers_for_one_poll_is_not_a_finding() -> None:
    finder = Finder()
    for seconds, shares in ((5.0, [Share("itl", "batching", 1.0)]), (10.0, []),
                            (15.0, [Share("itl", "queue", 1.0)]),
                            (20.0, [Share("itl", "kv_cache", 1.0)])):
        finder.observe(seconds, shares)
    assert finder.found is None


def test_the_finding_is_timed_at_its_first_poll_and_kept_once_made() -> None:
    finder = Finder()
    finder.observe(5.0, [Share("itl", "unknown", 1.0)])
    finder.observe(10.0, [Share("itl", "gpu_throttled", 0.8)])
    finder.observe(15.0, [Share("itl", "gpu_throttled", 0.7), Share("itl", "batching", 0.2)])
    finder.observe(20.0, [Share("itl", "batching", 1.0)])
    finder.observe(25.0, [Share("itl", "batching", 1.0)])
    assert finder.found is not None
    assert (finder.found.cause, finder.found.seconds) == ("gpu_throttled", 10.0)
    assert [s.cause for s in finder.found.verdict] == ["gpu_throttled"]
