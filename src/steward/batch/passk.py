"""pass@k: the chance that at least one of k attempts passes, estimated from n attempts.

The unbiased estimator of Chen et al., "Evaluating Large Language Models Trained on Code"
(2021): with ``c`` of ``n`` attempts passing, pass@k = 1 - C(n - c, k) / C(n, k), the chance
that k attempts drawn without replacement from the n are not all failures. Computed as a
product so that large n never overflows.
"""

from __future__ import annotations


def pass_at_k(n: int, c: int, k: int) -> float:
    """The estimate of pass@k from ``c`` passing attempts out of ``n`` (``1 <= k <= n``)."""
    if not 0 <= c <= n:
        raise ValueError(f"passing attempts must be between 0 and {n}, got {c}")
    if not 1 <= k <= n:
        raise ValueError(f"k must be between 1 and the number of attempts ({n}), got {k}")
    if n - c < k:  # every draw of k holds a passing attempt
        return 1.0
    all_fail = 1.0
    for i in range(n - c + 1, n + 1):  # C(n - c, k) / C(n, k) as a product of k factors
        all_fail *= 1.0 - k / i
    return 1.0 - all_fail
