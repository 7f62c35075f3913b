"""The conformance suite of a mechanism: what every mechanism the factory knows must satisfy.

:func:`check_mechanism` runs every check on one instance (small enough to enumerate its reports, as the
:meth:`~ldpstream.mechanisms.base.Mechanism.examples` are); each check raises :class:`AssertionError` with what
failed. The checks:

- :func:`check_parameters_round_trip`: ``make_mechanism(m.parameters()) == m`` (plain values; any case of the name);
- :func:`check_immutable`: the instance cannot be changed;
- :func:`check_declared_shape`: reports are symbols with a ``(C, k)`` sketch or bits with a ``(C, k + 1)`` one,
  ε > 0 and ε_∞ ≥ ε;
- :func:`check_sketches`: the sketch of encoded reports and the simulated sketch have the declared shape and count
  every report, sketches add up (the sketch of two batches is the sum of theirs), the design matrix is ``(C·k, S)``;
- :func:`check_simulate_sketch_law`: ``simulate_sketch`` has the law of the sketch of ``encode_clients`` (the mean
  and the spread of every cell, two-sample z-tests at a family-wise level of 10⁻⁶, fixed seeds);
- :func:`check_channel_privacy`: the enumerated :meth:`~ldpstream.mechanisms.base.Mechanism.report_channel` is a
  law per value and its worst-case likelihood ratio over pairs of values and outputs is e^ε exactly;
- :func:`check_reports_follow_channel`: the reports ``encode_clients`` draws follow that channel (chi-square per
  value, level 10⁻⁴ Bonferroni over the values);
- :func:`check_for_alphabet`: a direct mechanism's ``for_alphabet(S, ε)`` has k = S and ε; a hashed one refuses;
- :func:`check_discovery_report`: a discovery carrier's ``discovery_report`` has exactly the asked ε; any other
  mechanism refuses one;
- :func:`check_decoder_recovers`: decoding the simulated sketch of a known population gives its frequencies within
  a few standard errors of the decoder's own variance (only when a decoder is passed: decoders live above the
  mechanisms).

The mechanisms' own tests (tests/unit/mechanisms/test_conformance.py) run it on every example of every mechanism in
:data:`~ldpstream.mechanisms.factory.MECHANISMS`. docs/math/mechanisms.md, "Adding a mechanism".
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np
from scipy import stats

from ldpstream.errors import ParameterError
from ldpstream.mechanisms.base import Mechanism, pack_bits
from ldpstream.mechanisms.factory import MECHANISMS, make_mechanism

#: Values of an open alphabet that the checks encode (their hashes vary by cohort).
OPEN_VALUES = 6
#: Family-wise level of the law checks (a correct mechanism fails one in a million runs; the seeds are fixed).
LAW_LEVEL = 1e-6
#: Level of the chi-square checks of the reports, Bonferroni over the values.
CHANNEL_LEVEL = 1e-4
#: Relative tolerance of the privacy check: the worst ratio is e^ε to float precision.
PRIVACY_RTOL = 1e-9


class Decode(Protocol):
    """A decoder of a mechanism's sketch: ``decode(sketch, mechanism, candidates)`` gives an estimate with
    ``frequencies`` and ``std_errors`` of the S values (``candidates`` None for a closed alphabet)."""

    def __call__(self, sketch: np.ndarray, mechanism: Mechanism, candidates: Sequence[Any] | None) -> Any: ...


def alphabet(mechanism: Mechanism) -> tuple[list[str] | None, np.ndarray | None, int]:
    """``(candidates, table, S)`` the checks encode: on an open alphabet :data:`OPEN_VALUES` strings whose design
    columns are linearly independent (:meth:`~ldpstream.mechanisms.base.Mechanism.probe_value` 0, 1, … skipping
    those that add nothing, so that a decoder can tell them apart), else the closed alphabet itself (``candidates``
    None); ``table`` is the mechanism's value table of them."""
    candidates: list[str] | None = None
    if not mechanism.closed:
        candidates = []
        columns = np.zeros((mechanism.cohorts * mechanism.k, 0))
        for i in range(50 * OPEN_VALUES):
            column = mechanism.design_matrix(mechanism.value_table([mechanism.probe_value(i)])).toarray()
            wider = np.hstack([columns, column])
            if np.linalg.matrix_rank(np.hstack([wider, np.ones((wider.shape[0], 1))])) > columns.shape[1] + 1:
                candidates.append(mechanism.probe_value(i))
                columns = wider
            if len(candidates) == OPEN_VALUES:
                break
    table = mechanism.value_table(candidates)
    S = mechanism.design_matrix(table).shape[1]
    return candidates, table, int(S)


def output_index(mechanism: Mechanism, cohorts: np.ndarray, reports: np.ndarray) -> np.ndarray:
    """The :meth:`~ldpstream.mechanisms.base.Mechanism.report_channel` column of each report."""
    cohorts = np.asarray(cohorts, dtype=np.int64)
    if mechanism.report_kind == "symbol":
        return cohorts * mechanism.sketch_width + np.asarray(reports, dtype=np.int64)
    packed = np.asarray(pack_bits(np.asarray(reports)), dtype=np.int64)
    code: np.ndarray = packed @ (256 ** np.arange(packed.shape[1], dtype=np.int64))
    index: np.ndarray = cohorts * 2**mechanism.k + code
    return index


def check_parameters_round_trip(mechanism: Mechanism) -> None:
    """Parameters are plain values, name a mechanism of the factory, and rebuild an equal, equally hashed instance
    (whatever the case of the name)."""
    params = mechanism.parameters()
    assert params["mechanism"] == mechanism.name and MECHANISMS[mechanism.name] is type(mechanism), params
    assert all(isinstance(v, int | float | str | bool) for v in params.values()), params
    rebuilt = make_mechanism(params)
    assert rebuilt == mechanism and hash(rebuilt) == hash(mechanism), (rebuilt, mechanism)
    assert make_mechanism({**params, "mechanism": str(params["mechanism"]).upper()}) == mechanism


def check_immutable(mechanism: Mechanism) -> None:
    """A frozen dataclass: setting a field raises."""
    instance: Any = mechanism
    assert dataclasses.is_dataclass(instance), type(mechanism)
    for field in dataclasses.fields(instance):
        try:
            setattr(instance, field.name, getattr(instance, field.name))
        except dataclasses.FrozenInstanceError:
            continue
        raise AssertionError(f"{mechanism.name}: field {field.name} can be set")


def check_declared_shape(mechanism: Mechanism) -> None:
    """Symbol reports have ``k`` sketch columns (HR, HCMS: their output count), bit reports ``k + 1``; ε > 0 and
    ε_∞ ≥ ε; the class says which alphabet it takes."""
    if mechanism.report_kind == "bits":
        assert mechanism.sketch_width == mechanism.k + 1
        assert mechanism.response_rates == (mechanism.q_star, mechanism.p_star)  # type: ignore[attr-defined]
    else:
        assert mechanism.report_kind == "symbol" and mechanism.sketch_width >= mechanism.k
    assert mechanism.epsilon > 0 and mechanism.epsilon_inf >= mechanism.epsilon
    assert mechanism.alphabet in ("closed", "either", "open")
    assert mechanism.closed == (mechanism.alphabet == "closed" or mechanism.parameters().get("support") is not None)


def check_sketches(mechanism: Mechanism, seed: int = 0) -> None:
    """Encoded and simulated sketches have shape ``(C, sketch_width)``, count every report, and add up."""
    candidates, table, S = alphabet(mechanism)
    del candidates
    C, width = mechanism.cohorts, mechanism.sketch_width
    assert mechanism.design_matrix(table).shape == (C * mechanism.k, S)
    rng = np.random.default_rng(seed)
    values = rng.integers(0, S, size=200)
    cohorts, reports = mechanism.encode_clients(values, rng, table)
    assert cohorts.shape == (200,) and len(reports) == 200
    whole = mechanism.sketch(cohorts, reports)
    assert whole.shape == (C, width) and whole.dtype == np.int64
    assert int(mechanism.reports_per_cohort(whole).sum()) == 200
    np.testing.assert_array_equal(mechanism.reports_per_cohort(whole), np.bincount(cohorts, minlength=C))
    parts = mechanism.sketch(cohorts[:70], reports[:70]) + mechanism.sketch(cohorts[70:], reports[70:])
    np.testing.assert_array_equal(parts, whole)
    simulated = mechanism.simulate_sketch(np.full(S, 5), rng, table=table)
    assert simulated.shape == (C, width)
    assert int(mechanism.reports_per_cohort(simulated).sum()) == 5 * S
    by_cohort = np.ones((C, S), dtype=np.int64)
    np.testing.assert_array_equal(mechanism.reports_per_cohort(mechanism.simulate_sketch(by_cohort, rng, table)),
                                  np.full(C, S))


def _two_sample_z(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``|z|`` of the difference of the column means of ``a`` and ``b`` (trials × cells); 0 where both columns are
    constant and equal, ∞ where they are constant and differ."""
    diff = a.mean(axis=0) - b.mean(axis=0)
    se = np.sqrt(a.var(axis=0, ddof=1) / a.shape[0] + b.var(axis=0, ddof=1) / b.shape[0])
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(se > 0, np.abs(diff) / np.where(se > 0, se, 1.0), np.where(diff == 0, 0.0, np.inf))
    return np.asarray(z)


def check_simulate_sketch_law(mechanism: Mechanism, seed: int = 0, trials: int = 1500) -> None:
    """``simulate_sketch`` and the sketch of ``encode_clients`` agree in law: over ``trials`` populations (each
    value s held by s + 1 clients), every cell's mean and every cell's squared deviation from its mean (its
    spread, fourth moments included) pass a two-sample z-test, Bonferroni at :data:`LAW_LEVEL` over the cells."""
    _, table, S = alphabet(mechanism)
    counts = np.arange(1, S + 1, dtype=np.int64)
    n = int(counts.sum())
    rng = np.random.default_rng([seed, 1])
    simulated = np.stack([mechanism.simulate_sketch(counts, rng, table=table).ravel() for _ in range(trials)])
    values = np.tile(np.repeat(np.arange(S), counts), trials)
    cohorts, reports = mechanism.encode_clients(values, np.random.default_rng([seed, 2]), table)
    encoded = np.stack([
        mechanism.sketch(cohorts[t * n:(t + 1) * n], reports[t * n:(t + 1) * n]).ravel() for t in range(trials)
    ])
    cells = simulated.shape[1]
    limit = float(stats.norm.isf(LAW_LEVEL / (4 * cells)))
    z_mean = _two_sample_z(simulated.astype(float), encoded.astype(float))
    assert z_mean.max() < limit, f"{mechanism.name}: cell means differ (z = {z_mean.max():.2f} ≥ {limit:.2f})"
    spread_s = (simulated - simulated.mean(axis=0)) ** 2
    spread_e = (encoded - encoded.mean(axis=0)) ** 2
    z_var = _two_sample_z(spread_s, spread_e)
    assert z_var.max() < limit, f"{mechanism.name}: cell variances differ (z = {z_var.max():.2f} ≥ {limit:.2f})"


def max_log_ratio(channel: np.ndarray) -> float:
    """``max over outputs y and inputs x, x' of ln Q(y|x) − ln Q(y|x')`` (rows are inputs; outputs no input
    reaches are left out, one that some input reaches and another does not gives ∞)."""
    reached = channel.max(axis=0) > 0
    with np.errstate(divide="ignore"):
        logq = np.log(channel[:, reached])
    return float((logq.max(axis=0) - logq.min(axis=0)).max())


def check_channel_privacy(mechanism: Mechanism) -> None:
    """Every row of the enumerated report channel is a law, and the worst ratio is e^ε to :data:`PRIVACY_RTOL`
    (ε-LDP and tight: the examples hold two values that the channel separates fully)."""
    _, table, S = alphabet(mechanism)
    channel = mechanism.report_channel(table)
    width = mechanism.sketch_width if mechanism.report_kind == "symbol" else 2**mechanism.k
    assert channel.shape == (S, mechanism.cohorts * width), channel.shape
    assert channel.min() >= 0
    np.testing.assert_allclose(channel.sum(axis=1), 1.0, rtol=1e-12)
    worst = max_log_ratio(channel)
    assert math.isclose(worst, mechanism.epsilon, rel_tol=PRIVACY_RTOL), (mechanism.name, worst, mechanism.epsilon)


def check_reports_follow_channel(mechanism: Mechanism, seed: int = 0) -> None:
    """Reports of each value drawn by ``encode_clients`` follow its row of the report channel: nothing where it is
    0, and a chi-square test at :data:`CHANNEL_LEVEL` Bonferroni over the values."""
    _, table, S = alphabet(mechanism)
    channel = mechanism.report_channel(table)
    draws = max(20_000, 40 * int((channel > 0).sum(axis=1).max()))
    rng = np.random.default_rng([seed, 3])
    for value in range(S):
        cohorts, reports = mechanism.encode_clients(np.full(draws, value), rng, table)
        observed = np.bincount(output_index(mechanism, cohorts, reports), minlength=channel.shape[1])
        expected = channel[value] * draws
        reached = expected > 0
        assert observed[~reached].sum() == 0, f"{mechanism.name}: value {value} gave an output of probability 0"
        _, pvalue = stats.chisquare(observed[reached], expected[reached])
        assert pvalue > CHANNEL_LEVEL / S, f"{mechanism.name}: value {value}'s reports do not follow (p = {pvalue})"


def check_decoder_recovers(mechanism: Mechanism, decode: Decode, seed: int = 0, n: int = 200_000) -> None:
    """The decoded frequencies of a known population (``n`` clients, frequencies ∝ 0.7^s) are within z standard
    errors of the truth in every coordinate, the standard errors those the decoder reports (its own variance
    formula), z the normal quantile of 10⁻⁶ two-sided Bonferroni over the S values."""
    candidates, table, S = alphabet(mechanism)
    weights = 0.7 ** np.arange(S)
    counts = np.floor(n * weights / weights.sum()).astype(np.int64)
    counts[0] += n - int(counts.sum())
    sketch = mechanism.simulate_sketch(counts, np.random.default_rng([seed, 4]), table=table)
    estimate = decode(sketch, mechanism, candidates)
    freq = np.asarray(estimate.frequencies, dtype=float)[:S]
    assert estimate.std_errors is not None, f"{mechanism.name}: the decoder gives no standard errors"
    se = np.asarray(estimate.std_errors, dtype=float)[:S]
    assert np.all(se > 0) and np.all(np.isfinite(se)), se
    z = float(stats.norm.isf(LAW_LEVEL / (2 * S)))
    error = np.abs(freq - counts / n)
    assert np.all(error <= z * se), f"{mechanism.name}: errors {error} exceed {z:.2f} × se {se}"


def check_for_alphabet(mechanism: Mechanism) -> None:
    """A direct mechanism builds its instance over ``0..S-1`` at ε (what simulations and the tuner ask; S = the
    example's k): of its own class, k = S, exactly that ε; a hashed one refuses."""
    cls = type(mechanism)
    if not cls.decoder_family.startswith("direct"):
        try:
            cls.for_alphabet(5, 1.0)
        except ParameterError:
            return
        raise AssertionError(f"{cls.name} hashes its values yet built an instance for an alphabet alone")
    for epsilon in (0.7, 2.5):
        instance = cls.for_alphabet(mechanism.k, epsilon)
        assert type(instance) is cls, instance
        assert instance.k == mechanism.k and math.isclose(instance.epsilon, epsilon, rel_tol=1e-12), instance
        assert make_mechanism(instance.parameters()) == instance


def check_discovery_report(mechanism: Mechanism) -> None:
    """A :attr:`~Mechanism.discovery_carrier` builds reports of its own class with the asked k, h, C and exactly
    the asked ε (tight by enumeration); any other class refuses with a ParameterError."""
    cls = type(mechanism)
    if not cls.discovery_carrier:
        try:
            cls.discovery_report(1.0, 4, 2, 2)
        except ParameterError:
            return
        raise AssertionError(f"{cls.name} is no discovery carrier yet built a discovery report")
    for epsilon, k, hashes, cohorts in ((1.3, 4, 2, 2), (0.4, 5, 1, 3)):
        report = cls.discovery_report(epsilon, k, hashes, cohorts)
        assert type(report) is cls and (report.k, report.cohorts) == (k, cohorts), report
        assert getattr(report, "hashes", None) == hashes, report
        assert math.isclose(report.epsilon, epsilon, rel_tol=1e-12), (report.epsilon, epsilon)
        check_channel_privacy(report)
    for option in cls.discovery_options:
        assert option in {f.name for f in dataclasses.fields(report)}, (cls.name, option)  # type: ignore[arg-type]


def check_mechanism(mechanism: Mechanism, decode: Decode | None = None, seed: int = 0) -> None:
    """Every check of the module on ``mechanism`` (the decoder check only with ``decode``)."""
    check_parameters_round_trip(mechanism)
    check_immutable(mechanism)
    check_declared_shape(mechanism)
    check_sketches(mechanism, seed)
    check_channel_privacy(mechanism)
    check_reports_follow_channel(mechanism, seed)
    check_simulate_sketch_law(mechanism, seed)
    check_for_alphabet(mechanism)
    check_discovery_report(mechanism)
    if decode is not None:
        check_decoder_recovers(mechanism, decode, seed)
