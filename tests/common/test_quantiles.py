"""Percentiles without numpy: the simulator's windows must score as they did with numpy."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from governor.common.quantiles import percentiles

FINITE = st.floats(min_value=-1e12, max_value=1e12, allow_nan=False, allow_infinity=False)
PERCENTS = st.lists(st.floats(min_value=0, max_value=100), min_size=1, max_size=6)


@given(st.lists(FINITE, min_size=1, max_size=300), PERCENTS)
def test_every_percentile_equals_numpys_to_the_last_bit(values: list[float],
                                                         percents: list[float]) -> None:
    expected = [float(v) for v in np.percentile(np.asarray(values), percents)]
    assert percentiles(values, percents) == expected


def test_the_usual_quantiles_of_latencies_equal_numpys() -> None:
    rng = np.random.default_rng(7)
    values = list(rng.lognormal(-3, 0.8, 5000))
    qs = [50, 90, 99, 99.9]
    assert percentiles(values, qs) == [float(v) for v in np.percentile(values, qs)]


def test_no_values_give_nan_for_each_percentile() -> None:
    assert all(math.isnan(v) for v in percentiles([], [50, 99]))


def test_a_percentile_outside_0_to_100_is_refused() -> None:
    with pytest.raises(ValueError, match="within"):
        percentiles([1.0], [101])
