"""Longitudinal privacy of k-RR, k-RAPPOR, O-RR and O-RAPPOR: memoized permanent responses, the instantaneous
layer, ε_1 / ε_∞ per configuration (docs/math/privacy-accounting.md#longitudinal-privacy-memoized-permanent-response).

Exact checks compose the layers' channel matrices by enumeration; statistical checks use fixed seeds (secrets
drawn from seeded generators, the fresh layers given a seeded ``rng``) and bounds derived from the binomial or
multinomial variance, with the family false-alarm rate stated at each.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import math

import numpy as np
import pytest
from scipy import stats

from ldpstream.device import ClientPrivatizer
from ldpstream.errors import ConfigError, ParameterError
from ldpstream.estimators import krr_unbiased, krr_variance
from ldpstream.mechanisms import KRR, ORR, KRappor, ORappor, Rappor, make_mechanism
from ldpstream.mechanisms.longitudinal import MemoizedEncoder
from ldpstream.mechanisms.rates import bit_rates, krr_channel
from ldpstream.registry import Registry
from tests.unit.mechanisms.channels import flip_matrix, max_log_ratio

RTOL = 1e-9

#: One mechanism of each kind per configuration: (memoize, epsilon_permanent).
CONFIGS = [(True, None), (True, 3.5), (False, None)]


def mechanisms(memoize: bool, permanent: float | None) -> list:
    kw = {"memoize": memoize, "epsilon_permanent": permanent}
    return [
        KRR(5, 1.5, **kw),
        KRappor(4, 1.5, **kw),
        ORR(4, 1.5, 3, support=12, **kw),
        ORappor(6, 1.5, 3, hashes=2, support=12, **kw),
        ORappor(8, 1.5, 2, hashes=1, **kw),  # open alphabet
    ]


def value_of(m, i: int):
    return f"value-{i}" if (m.name in ("orr", "orappor") and not m.closed) else i




def vector_channel(bit_channel: np.ndarray, inputs: list[np.ndarray]) -> np.ndarray:
    """Rows: the inputs (bool vectors); columns: every output in {0,1}^k; independent bits."""
    k = inputs[0].size
    ys = np.array(list(itertools.product([0, 1], repeat=k)), dtype=np.int64)
    return np.array([bit_channel[x.astype(np.int64)[None, :], ys].prod(axis=1) for x in inputs])


def layer_channels(m):
    """(one-report channel the estimators invert, composed layers, first layer) as unit-channel matrices."""
    first, irr = m.layers
    if m.report_kind == "symbol":
        target, prr = krr_channel(m.k, m.epsilon), krr_channel(m.k, first)
        composed = prr if irr is None else prr @ krr_channel(m.k, irr)
    else:
        target = np.array([[1 - m.p_star, m.p_star], [1 - m.q_star, m.q_star]])
        prr = flip_matrix(first)
        composed = prr if irr is None else prr @ flip_matrix(irr)
    return target, composed, prr


# -- rates and exact channels ---------------------------------------------------------------------------


@pytest.mark.parametrize(("memoize", "permanent"), CONFIGS)
def test_each_mechanism_s_layers_give_one_report_the_registry_channel_and_the_permanent_one_epsilon_inf(
        memoize, permanent):
    for m in mechanisms(memoize, permanent):
        target, composed, prr = layer_channels(m)
        np.testing.assert_allclose(composed, target, rtol=1e-9)
        if m.report_kind == "symbol":
            one_report, permanent_channel = composed, prr
        else:
            # whole bit vectors: every pair of inputs with h bits each, disjoint ones included (the worst case)
            h = getattr(m, "hashes", 1)
            inputs = [np.isin(np.arange(m.k), s) for s in itertools.combinations(range(m.k), h)]
            one_report, permanent_channel = vector_channel(composed, inputs), vector_channel(prr, inputs)
        assert max_log_ratio(one_report) == pytest.approx(m.epsilon, rel=1e-7)
        if memoize:
            assert max_log_ratio(permanent_channel) == pytest.approx(m.epsilon_inf, rel=1e-7)


def test_epsilon_inf_and_stateful_client_per_configuration():
    for m in mechanisms(True, None):
        assert (m.epsilon_inf, m.stateful_client) == (m.epsilon, True)
    for m in mechanisms(True, 3.5):
        assert (m.epsilon_inf, m.stateful_client) == (3.5, True)
    for m in mechanisms(False, None):
        assert (m.epsilon_inf, m.stateful_client) == (math.inf, False)
    r = Rappor(16, 2, 4, 0.25, 0.75, 0.5)  # unchanged: 2h ln((1 − f/2)/(f/2))
    assert r.epsilon_inf == pytest.approx(4 * math.log(3)) and r.stateful_client


# -- parameters, fingerprints, refusals -----------------------------------------------------------------


@pytest.mark.parametrize(("memoize", "permanent"), CONFIGS)
def test_parameters_round_trip_and_name_only_non_defaults(memoize, permanent):
    for m in mechanisms(memoize, permanent):
        params = m.parameters()
        assert make_mechanism(params) == m
        assert ("memoize" in params) == (not memoize)
        assert ("epsilon_permanent" in params) == (permanent is not None)


#: Fingerprints of deploy/metrics.toml computed at main before these fields existed (commit 1f0faa2).
MAIN_FINGERPRINTS = {"app_language": 2980216184, "screen_size_bucket": 2069665190, "font_choice": 3057140680,
                     "homepage_orappor": 2343977862, "homepage_rappor": 2685901065}


def test_fingerprints_of_default_metrics_are_unchanged_and_new_settings_change_them():
    registry = Registry.load("deploy/metrics.toml")
    assert {name: metric.fingerprint for name, metric in registry.metrics.items()} == MAIN_FINGERPRINTS
    base = {"id": 1, "mechanism": "krr", "k": 4, "epsilon": 1.0}
    prints = {Registry.from_dict({"metrics": {"m": {**base, **extra}}})["m"].fingerprint
              for extra in ({}, {"memoize": True}, {"memoize": False}, {"epsilon_permanent": 2.0})}
    assert len(prints) == 3  # memoize = true is the default: same channel, same fingerprint


@pytest.mark.parametrize("cls", [KRR, KRappor, ORR, ORappor])
def test_constructors_refuse_a_permanent_epsilon_not_above_epsilon_or_without_memo(cls):
    args = (4, 1.0) if cls in (KRR, KRappor) else (4, 1.0, 2)
    for bad in (1.0, 0.5, 0.0, -1.0, math.nan, math.inf):
        with pytest.raises(ParameterError, match="epsilon_permanent"):
            cls(*args, epsilon_permanent=bad)
    with pytest.raises(ParameterError, match=r"needs memoize"):
        cls(*args, memoize=False, epsilon_permanent=2.0)
    with pytest.raises(ParameterError, match="memoize must be"):
        cls(*args, memoize="yes")


def test_the_registry_refuses_a_permanent_epsilon_above_its_bound_or_not_above_epsilon():
    base = {"id": 1, "mechanism": "orr", "k": 4, "epsilon": 1.0, "cohorts": 2}
    with pytest.raises(ConfigError, match=r"epsilon_permanent .* at most 10"):
        Registry.from_dict({"metrics": {"m": {**base, "epsilon_permanent": 10.5}}})
    with pytest.raises(ConfigError, match="must exceed epsilon"):
        Registry.from_dict({"metrics": {"m": {**base, "epsilon_permanent": 1.0}}})
    assert Registry.from_dict({"metrics": {"m": {**base, "epsilon_permanent": 10.0}}})["m"].mechanism.epsilon_inf == 10


# -- memoization ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("permanent", [None, 3.5])
def test_permanent_responses_survive_a_restart_and_depend_on_secret_and_value(permanent):
    for m in mechanisms(True, permanent):
        cohort = m.cohorts - 1
        first, restarted = m.client_encoder(b"secret-1", cohort), m.client_encoder(b"secret-1", cohort)
        values = [value_of(m, i) for i in range(4)]
        for v in values:
            x = m.channel_input(v, cohort)
            np.testing.assert_array_equal(first.permanent(x), restarted.permanent(x))
            if permanent is None:  # memo only: every report is the permanent response
                reports = [first.encode_report(v) for _ in range(5)] + [restarted.encode_report(v)]
                assert all(c == cohort for c, _ in reports)
                assert all(np.array_equal(r, reports[0][1]) for _, r in reports)
                np.testing.assert_array_equal(reports[0][1], first.permanent(x))


@pytest.mark.parametrize("m", [KRR(4, 1.0, epsilon_permanent=2.0), KRappor(3, 1.0, epsilon_permanent=2.0)],
                         ids=["krr", "krappor"])
def test_permanent_responses_of_distinct_secrets_are_independent_draws_of_the_permanent_channel(m):
    """Over N secrets, the permanent response of one input, and the pair (PRR of input 0, PRR of input 1) of one
    secret, follow the permanent channel and its product: a chi-square test of the joint law (family error
    2e-6)."""
    n = 6000
    rng = np.random.default_rng(11)
    first, _ = m.layers
    single = krr_channel(m.k, first) if m.report_kind == "symbol" else None
    outcomes: list[tuple[int, int]] = []
    for _ in range(n):
        enc = MemoizedEncoder(m, rng.bytes(32), 0)
        pair = []
        for x in (0, 1):
            y = enc.permanent(m.channel_input(x, 0))
            pair.append(int(y) if single is not None else int(np.packbits(y, bitorder="little")[0]))
        outcomes.append((pair[0], pair[1]))
    if single is not None:
        p0, p1 = single[0], single[1]
    else:  # bit vectors as little-endian integers
        flip = flip_matrix(first)
        ys = np.array(list(itertools.product([0, 1], repeat=m.k)))[:, ::-1]  # row index = integer value
        p0, p1 = (np.array([flip[m.channel_input(x, 0).astype(int), y].prod() for y in ys]) for x in (0, 1))
    expected = n * np.outer(p0, p1)
    observed = np.zeros_like(expected)
    for a, b in outcomes:
        observed[a, b] += 1
    chi2 = ((observed - expected) ** 2 / expected).sum()
    assert chi2 < stats.chi2.isf(1e-6, expected.size - 1)


@pytest.mark.parametrize("m", [KRR(5, 1.0, epsilon_permanent=3.0), ORappor(6, 1.0, 2, hashes=2, epsilon_permanent=3.0)],
                         ids=["krr", "orappor"])
def test_with_an_instantaneous_layer_repeated_reports_differ_and_follow_the_irr_channel_given_the_prr(m):
    n = 4000
    enc = MemoizedEncoder(m, b"device", 1 if m.cohorts > 1 else 0, rng=np.random.default_rng(5))
    value = value_of(m, 2)
    x = m.channel_input(value, enc.cohort)
    prr = enc.permanent(x)
    reports = np.array([enc.encode(value) for _ in range(n)])
    _, irr = m.layers
    if m.report_kind == "symbol":
        expected = n * krr_channel(m.k, irr)[int(prr)]
        observed = np.bincount(reports, minlength=m.k)
        # Pearson chi-square, df = k − 1; false alarm 1e-6
        assert ((observed - expected) ** 2 / expected).sum() < stats.chi2.isf(1e-6, m.k - 1)
    else:
        keep = bit_rates(irr)[0]
        rate = np.where(prr, keep, 1 - keep)
        z = stats.norm.isf(1e-6 / (2 * m.k))  # per bit, Bonferroni over k bits: family error 1e-6
        assert np.all(np.abs(reports.mean(axis=0) - rate) <= z * np.sqrt(rate * (1 - rate) / n))
    assert len({np.asarray(r).tobytes() for r in reports}) > 1


# -- devices: cohorts, secrets ----------------------------------------------------------------------------


def registry_of(**extra) -> Registry:
    return Registry.from_dict({"metrics": {
        "o": {"id": 1, "mechanism": "orr", "k": 8, "epsilon": 1.0, "cohorts": 16, **extra},
        "b": {"id": 2, "mechanism": "orappor", "k": 16, "epsilon": 1.0, "cohorts": 16, "hashes": 2, **extra},
    }})


@pytest.mark.parametrize("extra", [{}, {"memoize": False}, {"epsilon_permanent": 2.0}])
def test_a_device_s_cohort_is_stable_and_derived_from_its_secret(extra):
    registry = registry_of(**extra)
    for name in ("o", "b"):
        metric = registry[name]
        secret = b"d" * 32
        device = ClientPrivatizer(secret)
        cohorts = {device.privatize(metric, f"value-{i % 3}")[0] for i in range(20)}
        digest = hmac.new(secret, f"cohort:{name}".encode(), hashlib.sha256).digest()
        assert cohorts == {int.from_bytes(digest[:8], "big") % metric.mechanism.cohorts}
        # the restarted device (same secret) reports the same way
        first, again = ClientPrivatizer(secret).privatize(metric, "x"), ClientPrivatizer(secret).privatize(metric, "x")
        assert first[0] == again[0]
        if extra == {}:
            np.testing.assert_array_equal(first[1], again[1])


def test_a_memoizing_metric_needs_a_persistent_secret_and_a_one_time_metric_does_not():
    with pytest.raises(ParameterError, match=r"persistent secret.*memoize = false"):
        ClientPrivatizer().privatize(registry_of()["o"], "v")
    cohort, symbol = ClientPrivatizer().privatize(registry_of(memoize=False)["o"], "v")
    assert 0 <= cohort < 16 and 0 <= int(symbol) < 8


@pytest.mark.parametrize("m", [ORR(4, 1.0, 3), ORR(4, 1.0, 3, support=10), ORappor(8, 1.0, 3, 2),
                               ORappor(8, 1.0, 3, 3, support=10)],
                         ids=["orr", "orr-closed", "orappor", "orappor-closed"])
def test_channel_input_is_the_value_table_entry_the_decoder_assumes(m):
    cands = None if m.closed else [f"v{i}" for i in range(10)]
    table = m.value_table(cands)
    for c in range(m.cohorts):
        for s in range(10):
            x = m.channel_input(s if m.closed else f"v{s}", c)
            if m.report_kind == "symbol":
                assert x == table[c, s]
            else:
                np.testing.assert_array_equal(np.flatnonzero(x), np.unique(table[c, s]))


# -- populations: one report per device is the ε channel ----------------------------------------------------


def population_reports(m, values: np.ndarray, seed: int):
    """One report from each of len(values) devices with distinct secrets (cohorts derived from them)."""
    rng = np.random.default_rng(seed)
    cohorts, reports, inputs = [], [], []
    for v in values:
        secret = rng.bytes(32)
        cohort = int.from_bytes(hashlib.sha256(secret).digest()[:8], "big") % m.cohorts
        enc = MemoizedEncoder(m, secret, cohort, rng=rng)
        value = value_of(m, int(v))
        c, r = enc.encode_report(value)
        cohorts.append(c)
        reports.append(r)
        inputs.append(m.channel_input(value, c))
    return np.array(cohorts), np.array(reports), np.array(inputs)


@pytest.mark.statistical
@pytest.mark.parametrize(("memoize", "permanent"), CONFIGS)
def test_a_population_of_devices_reporting_once_gives_the_epsilon_channel(memoize, permanent):
    """Per sketch cell, the count is a sum of independent Bernoulli(Q(cell | the device's input)) over devices:
    mean Σ Q, variance Σ Q(1 − Q); |count − mean| ≤ z·sd with Bonferroni over every cell of every mechanism
    (family error 1e-4). The standard k-RR estimator is unbiased within z·SE from krr_variance."""
    n = 4000
    ms = mechanisms(memoize, permanent)
    cells = sum(m.cohorts * m.k for m in ms) + ms[0].k
    z = stats.norm.isf(1e-4 / (2 * cells))
    truth = np.random.default_rng(3).choice(12, size=n, p=np.arange(12, 0, -1) / 78)
    for index, m in enumerate(ms):
        values = truth % m.k if m.name in ("krr", "krappor") else truth
        cohorts, reports, inputs = population_reports(m, values, seed=100 + index)
        sketch = m.sketch(cohorts, reports)
        if m.report_kind == "symbol":
            hi, lo = m.response_rates
            prob = np.where(inputs[:, None] == np.arange(m.k)[None, :], hi, lo)
            counts = sketch
        else:
            prob = np.where(inputs, m.q_star, m.p_star)
            counts = sketch[:, 1:]
        mean = np.zeros((m.cohorts, m.k))
        var = np.zeros((m.cohorts, m.k))
        np.add.at(mean, cohorts, prob)
        np.add.at(var, cohorts, prob * (1 - prob))
        assert np.all(np.abs(counts - mean) <= z * np.sqrt(var) + 1e-9), m
        if m.name == "krr":
            p = np.bincount(values, minlength=m.k) / n
            estimate = krr_unbiased(sketch[0], m.epsilon)
            assert np.all(np.abs(estimate - p) <= z * np.sqrt(krr_variance(p, n, m.epsilon))), m


def test_the_memo_is_bounded_and_an_evicted_permanent_response_comes_back_identical(monkeypatch):
    import ldpstream.mechanisms.longitudinal as longitudinal

    monkeypatch.setattr(longitudinal, "MEMO_CAPACITY", 8)
    m = KRR(1000, 1.0)
    enc = MemoizedEncoder(m, b"device", 0)
    first = [int(enc.permanent(np.int64(x))) for x in range(50)]
    assert len(enc._memo) == 8
    again = MemoizedEncoder(m, b"device", 0)
    assert [int(enc.permanent(np.int64(x))) for x in range(50)] == first
    assert [int(again.permanent(np.int64(x))) for x in range(50)] == first
