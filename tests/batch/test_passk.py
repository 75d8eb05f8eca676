"""pass@k, the unbiased estimator, against values worked out by hand."""

from __future__ import annotations

import math

import pytest

from steward.batch.passk import pass_at_k


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (4, 2, 1, 0.5),  # pass@1 is the share of passing attempts
        (4, 2, 2, 1 - 1 / 6),  # 1 - C(2,2)/C(4,2): one pair of the six is both failures
        (4, 2, 3, 1.0),  # any three of four hold a passing one
        (5, 1, 2, 1 - 6 / 10),  # 1 - C(4,2)/C(5,2)
        (10, 3, 5, 1 - 21 / 252),  # 1 - C(7,5)/C(10,5)
        (4, 0, 4, 0.0),
        (4, 4, 1, 1.0),
    ],
)
def test_pass_at_k_matches_the_closed_form(n: int, c: int, k: int, expected: float) -> None:
    assert pass_at_k(n, c, k) == pytest.approx(expected)
    if n - c >= k:  # the same as the binomial form it stands for
        assert pass_at_k(n, c, k) == pytest.approx(1 - math.comb(n - c, k) / math.comb(n, k))


def test_pass_at_k_stays_finite_for_many_attempts() -> None:
    assert pass_at_k(2000, 1, 1) == pytest.approx(1 / 2000)
    assert 0 < pass_at_k(2000, 1, 1000) < 1


@pytest.mark.parametrize(("n", "c", "k"), [(4, 2, 5), (4, 2, 0), (4, 5, 1), (4, -1, 1)])
def test_pass_at_k_refuses_what_cannot_be_estimated(n: int, c: int, k: int) -> None:
    with pytest.raises(ValueError, match="must be between"):
        pass_at_k(n, c, k)
