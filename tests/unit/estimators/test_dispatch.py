"""dispatch.estimate: closed alphabets, mechanisms that need candidates, and the caller's design-matrix cache."""

import numpy as np
import pytest
from scipy import stats

from ldpstream.errors import ParameterError
from ldpstream.estimators import DesignCache, decode_bits, decode_orr, design_matrix, estimate
from ldpstream.mechanisms.krappor import KRappor
from ldpstream.mechanisms.krr import KRR
from ldpstream.mechanisms.orappor import ORappor
from ldpstream.mechanisms.orr import ORR
from ldpstream.mechanisms.rappor import Rappor

S, N = 64, 200_000
P = np.zeros(S)
P[[3, 17, 40]] = [0.5, 0.3, 0.2]


@pytest.mark.parametrize(
    "mech",
    [ORR(k=16, epsilon=2.0, cohorts=8, support=S), ORappor(k=32, epsilon=2.0, cohorts=8, hashes=2, support=S)],
    ids=["orr", "orappor"],
)
@pytest.mark.parametrize("method", ["ls", "project", "nnls", "mle"])
def test_closed_alphabet_decodes_against_own_design(mech, method):
    rng = np.random.default_rng(10)
    sketch = mech.simulate_sketch(rng.multinomial(N, P), rng)
    est = estimate(sketch, mech, method)
    assert list(est.labels) == list(range(S))
    assert est.frequencies.shape == (S,)
    # same as decoding against design_matrix(None) over range(S), without an "other" term
    X = mech.design_matrix(None)
    if isinstance(mech, ORR):
        ref = decode_orr(sketch, X, mech.epsilon, method, other=False)
    else:
        ref = decode_bits(sketch, X, mech.q_star, mech.p_star, method, other=False)
    np.testing.assert_allclose(est.frequencies, ref.frequencies, rtol=1e-12, atol=1e-15)
    # and it recovers the distribution, against the least-squares fit of the same sketch, whose SEs are the
    # exact sandwich (calibrated: tests/statistical/test_estimators_candidates.py). z: two-sided Bonferroni
    # over the S coordinates of the 8 parametrized cases at family-wise level 1e-3.
    ls = estimate(sketch, mech, "ls")
    z = stats.norm.isf(1e-3 / (2 * 8 * S))
    assert np.all(np.abs(ls.frequencies - P) <= z * ls.std_errors)
    if method == "project":
        # the Euclidean projection onto the simplex (which contains P) is non-expansive: exact bound
        assert np.linalg.norm(est.frequencies - P) <= np.linalg.norm(ls.frequencies - P) + 1e-12
    elif method != "ls":
        # NNLS (the Ga-metric projection of the LS fit onto Σp <= 1, p >= 0) and the MLE are at least as
        # efficient as LS to first order; at the p = 0 coordinates the constraint only shrinks the error
        assert np.all(np.abs(est.frequencies - P) <= z * ls.std_errors)
    assert {i for i, _ in est.top(3)} == {3, 17, 40}
    # the published interval is the LS one in its score form (centre shifted by z²b/2), clipped to [0, 1]; the
    # ls decoder's own is its Wald interval
    if method == "ls":
        assert est.interval is None and est.interval_method == "wald"
        return
    raw, shift = est.unclipped_interval, est.interval_shift
    assert raw is not None and shift is not None
    np.testing.assert_allclose((raw.low + raw.high) / 2, ls.frequencies + shift, atol=1e-12)
    np.testing.assert_allclose((raw.high - raw.low) / 2, np.sqrt(shift**2 + (1.959963984540054 * ls.std_errors) ** 2),
                               rtol=1e-10)


def test_closed_alphabet_is_not_decoded_as_krr():
    """Summing cohorts of a closed O-RR and decoding as k-RR (the old behaviour) is biased; the design is not."""
    rng = np.random.default_rng(11)
    mech = ORR(k=16, epsilon=3.0, cohorts=8, support=S)
    sketch = mech.simulate_sketch(rng.multinomial(N, P), rng)
    est = estimate(sketch, mech, "ls")
    assert est.method == "orr/ls"
    assert abs(est.frequencies[3] - 0.5) <= 5 * est.std_errors[3]


def test_mechanisms_that_need_candidates_raise():
    rappor = Rappor(k=32, hashes=2, cohorts=4, p=0.25, q=0.75, f=0.5)
    with pytest.raises(ParameterError, match="candidate"):
        estimate(np.zeros((4, 33)), rappor)
    with pytest.raises(ParameterError, match="candidate"):
        estimate(np.zeros((4, 16)), ORR(k=16, epsilon=1.0, cohorts=4))
    with pytest.raises(ParameterError, match="candidate"):
        estimate(np.zeros((4, 17)), ORappor(k=16, epsilon=1.0, cohorts=4))


def test_krr_and_krappor_keep_direct_decoders():
    rng = np.random.default_rng(12)
    krr, krap = KRR(8, 2.0), KRappor(8, 2.0)
    counts = rng.multinomial(10_000, np.full(8, 1 / 8))
    assert estimate(krr.simulate_sketch(counts, rng), krr).method == "krr/project"
    assert estimate(krap.simulate_sketch(counts, rng), krap, "mle").method == "krappor/mle"


def _counting_designs(monkeypatch):
    calls = []
    original = ORappor.design_matrix

    def counting(self, candidates_or_table=None):
        calls.append(candidates_or_table)
        return original(self, candidates_or_table)

    monkeypatch.setattr(ORappor, "design_matrix", counting)
    return calls


def test_design_cache_hits_and_is_read_only(monkeypatch):
    calls = _counting_designs(monkeypatch)
    cache = DesignCache()
    mech = ORappor(k=32, epsilon=2.0, cohorts=4, hashes=2)
    cands = [f"s{i}" for i in range(20)]
    rng = np.random.default_rng(13)
    table = mech.bloom_table(cands)
    sketch = mech.simulate_sketch(rng.multinomial(50_000, np.full(20, 1 / 20)), rng, table=table)
    a = estimate(sketch, mech, "project", candidates=cands, design_cache=cache)
    b = estimate(sketch, mech, "project", candidates=list(cands), design_cache=cache)
    c = estimate(sketch, ORappor(k=32, epsilon=2.0, cohorts=4, hashes=2), "ls", candidates=tuple(cands),
                 design_cache=cache)
    assert len(calls) == 1  # equal mechanisms and equal candidate lists share one entry
    assert (cache.misses, cache.hits, len(cache)) == (1, 2, 1)
    np.testing.assert_allclose(a.frequencies, b.frequencies, rtol=1e-12, atol=1e-15)
    assert c.method == "bits/ls"
    estimate(sketch[:, :], mech, "project", candidates=cands[::-1], design_cache=cache)
    assert len(calls) == 2
    X = design_matrix(mech, cands, cache)
    assert not X.data.flags.writeable
    with pytest.raises(ValueError):
        X.data[0] = 2.0
    cache.clear()
    estimate(sketch, mech, "project", candidates=cands, design_cache=cache)
    assert len(calls) == 3
    assert hash(mech) == hash(ORappor(k=32, epsilon=2.0, cohorts=4, hashes=2))
    small = DesignCache(max_entries=1)
    design_matrix(mech, cands, small)
    design_matrix(mech, cands[::-1], small)
    assert len(small) == 1 and len(calls) == 5


def test_without_a_cache_every_call_builds_its_design(monkeypatch):
    """No cache is held between calls: the same decode twice hashes the candidates twice, and the design is the
    caller's to edit."""
    calls = _counting_designs(monkeypatch)
    mech = ORappor(k=32, epsilon=2.0, cohorts=4, hashes=2)
    cands = [f"s{i}" for i in range(20)]
    rng = np.random.default_rng(13)
    sketch = mech.simulate_sketch(rng.multinomial(50_000, np.full(20, 1 / 20)), rng, table=mech.bloom_table(cands))
    first = estimate(sketch, mech, "project", candidates=cands)
    second = estimate(sketch, mech, "project", candidates=cands)
    assert len(calls) == 2
    np.testing.assert_array_equal(first.frequencies, second.frequencies)
    X = design_matrix(mech, cands)
    assert X.data.flags.writeable and len(calls) == 3


@pytest.mark.parametrize("other", [True, False])
@pytest.mark.parametrize("method", ["nnls", "mle"])
def test_a_warm_start_reaches_the_cold_decodes_optimum(method, other):
    """The iterative candidate decoders started from the solution of slightly fewer reports (what the live
    decoder passes) stop where the cold decode stops, within the stopping rule's slack
    (docs/math/estimators.md#warm-starts-of-the-iterative-decoders: below 1e-2 standard errors)."""
    mech = ORR(k=16, epsilon=2.0, cohorts=8)
    candidates = [f"value-{s}" for s in range(S)]
    table = mech.value_table(candidates)
    rng = np.random.default_rng(12)
    before = np.asarray(mech.simulate_sketch(rng.multinomial(N, P), rng, table=table))
    after = before + np.asarray(mech.simulate_sketch(rng.multinomial(N // 100, P), rng, table=table))
    options = {"candidates": candidates, "other": other, "factor_cache": None}
    previous = estimate(before, mech, method, **options)
    start = np.append(previous.frequencies, previous.residual) if other else previous.frequencies
    cold = estimate(after, mech, method, **options)
    warm = estimate(after, mech, method, **options, start=start)
    assert warm.info["warm_start"] is True and "warm_start" not in cold.info
    assert np.max(np.abs(warm.frequencies - cold.frequencies) / cold.std_errors) < 1e-2
    if method == "mle":
        # the same likelihood, to the stopping rule's 1e-7 nats per iteration (times the iterations' tail)
        assert warm.info["log_likelihood"] >= cold.info["log_likelihood"] - 1e-4


def test_a_warm_start_of_the_wrong_size_is_refused():
    mech = ORR(k=16, epsilon=2.0, cohorts=8, support=S)
    rng = np.random.default_rng(13)
    sketch = mech.simulate_sketch(rng.multinomial(N, P), rng)
    with pytest.raises(ParameterError, match="warm start"):
        estimate(sketch, mech, "mle", start=np.full(S + 5, 1.0 / S))
    # the closed forms ignore it; so do the direct decoders
    estimate(sketch, mech, "project", start=np.full(S + 5, 1.0 / S))
    estimate(np.array([10, 20, 30, 40]), KRR(k=4, epsilon=1.0), "mle", start=np.ones(3))
