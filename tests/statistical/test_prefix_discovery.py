"""Prefix-extension discovery's promises, measured over seeds (docs/math/dictionary.md#prefix-extension): the
false share of the dictionary at most the level (the mean false discovery proportion of 12 runs within
α + 3 of its standard errors), and the power the variance arithmetic predicts (every string whose frequency is
at least twice the detectable one, 2·z*·σ₁·√G, is found in every run).

Setting: 40 URL-like strings of 6–10 characters, Zipf(1), 4·10^5 clients, ε = 4, length 10 (five groups of
prefixes 2, 4, …, 10), 512 hash functions, the level 0.10.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from ldpstream.distributions import parse_distribution
from ldpstream.estimators.discovery.prefixes import PrefixScheme
from ldpstream.simulation.prefix_discovery import run_prefix_discovery

pytestmark = pytest.mark.statistical

RUNS = 12


def strings(count: int) -> list[str]:
    rng = np.random.default_rng(7)
    syllables = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]
    out: list[str] = []
    while len(out) < count:
        text = "".join(rng.choice(syllables, size=int(rng.integers(2, 4)))) + "." + str(rng.choice(["com", "de"]))
        if text not in out and len(text) <= 10:
            out.append(text)
    return out


def test_false_share_within_the_level_and_the_predicted_strings_found():
    values = strings(40)
    p = parse_distribution("zipf:1", len(values), np.random.default_rng(0))
    scheme = PrefixScheme(epsilon=4.0, length=10, cohorts=512)
    n, alpha = 400_000, 0.10
    e = math.exp(4.0)
    sigma = math.sqrt(4 * e / (e - 1) ** 2 / n)
    detectable = 4.0 * sigma * math.sqrt(scheme.groups)  # z* ≈ 4 among ~60,000 candidates a step
    sure = {s for s, f in zip(values, p, strict=True) if f >= 2 * detectable}
    assert len(sure) >= 10
    shares = []
    for seed in range(RUNS):
        run = run_prefix_discovery(scheme, values, p, n, seed, alpha=alpha)
        found = {d.string for d in run.result.discovered}
        assert sure <= found, sorted(sure - found)
        shares.append(run.false_positives / max(len(found), 1))
    mean, se = float(np.mean(shares)), float(np.std(shares, ddof=1)) / math.sqrt(RUNS)
    assert mean <= alpha + 3 * max(se, 0.01), shares
