"""The conformance suite (:mod:`ldpstream.mechanisms.checks`) on every example of every mechanism the factory knows,
so a new mechanism is covered by adding it to :data:`~ldpstream.mechanisms.MECHANISMS`; plus the cheap checks on
larger instances, and the checks' own power (a wrong channel or a wrong aggregate simulation fails them)."""

import dataclasses

import numpy as np
import pytest

from ldpstream.estimators.dispatch import estimate
from ldpstream.mechanisms import KRR, MECHANISMS, ORR, BitMechanism, KRappor, ORappor, Rappor, checks
from ldpstream.mechanisms.base import Mechanism

EXAMPLES = [pytest.param(m, id=f"{name}-{i}") for name, cls in MECHANISMS.items() for i, m in enumerate(cls.examples())]

#: Larger instances (hashed into many cohorts or bits): the checks that do not enumerate the report space.
LARGER = [
    KRR(k=4, epsilon=1.0),
    KRappor(k=8, epsilon=2.0),
    ORR(k=16, epsilon=1.5, cohorts=4),
    ORR(k=16, epsilon=1.5, cohorts=4, support=100),
    ORappor(k=32, epsilon=3.0, cohorts=2, hashes=2),
    ORappor(k=32, epsilon=3.0, cohorts=2, hashes=1, support=50),
    Rappor(k=16, hashes=2, cohorts=64, p=0.5, q=0.75, f=0.5),
]


def decode(sketch: np.ndarray, mechanism: Mechanism, candidates: list[str] | None):
    """The live decoder's unbiased estimator of the mechanism's family (its own standard errors)."""
    method = "unbiased" if mechanism.decoder_family.startswith("direct") else "ls"
    return estimate(sketch, mechanism, method, candidates=candidates)


def test_every_mechanism_has_examples_and_says_what_the_other_modules_need():
    assert list(MECHANISMS) == [cls.name for cls in MECHANISMS.values()]
    for cls in MECHANISMS.values():
        assert cls.examples() and all(type(m) is cls for m in cls.examples())
        assert cls.alphabet in ("closed", "either", "open")
        assert cls.tuning_parameters is None or set(cls.tuning_parameters) <= {"k", "cohorts", "hashes"}
        if cls.tuning_parameters:
            assert all(set(pt) == set(cls.tuning_parameters) for pt in cls.tuning_grid(64, False, 10**5))
        assert not cls.discovery_carrier or (cls.joint_member and cls.report_kind == "bits")


@pytest.mark.parametrize("mechanism", EXAMPLES)
def test_conformance(mechanism):
    checks.check_mechanism(mechanism, decode)


@pytest.mark.parametrize("mechanism", LARGER, ids=repr)
def test_cheap_checks_on_larger_instances(mechanism):
    checks.check_parameters_round_trip(mechanism)
    checks.check_immutable(mechanism)
    checks.check_declared_shape(mechanism)
    checks.check_sketches(mechanism)
    hi, lo = mechanism.response_rates
    if isinstance(mechanism, BitMechanism):
        assert mechanism.sketch_width == mechanism.k + 1 and (hi, lo) == (mechanism.q_star, mechanism.p_star)
    else:
        assert mechanism.sketch_width == mechanism.k and mechanism.report_kind == "symbol"
        channel = KRR(mechanism.k, mechanism.epsilon).channel()
        assert hi == pytest.approx(channel[0, 0]) and lo == pytest.approx(channel[0, 1])
    with pytest.raises(dataclasses.FrozenInstanceError):
        mechanism.k = 3  # type: ignore[misc]


def test_the_privacy_check_catches_a_channel_looser_than_its_epsilon():
    class Leaky(KRR):
        def report_channel(self, table=None):
            return KRR(self.k, 1.1 * self.epsilon).report_channel(table)  # leaks more than it claims

    with pytest.raises(AssertionError):
        checks.check_channel_privacy(Leaky(k=5, epsilon=1.5))


class _WrongSimulation(KRappor):
    """k-RAPPOR whose aggregate simulation flips at the wrong rate."""

    def simulate_sketch(self, counts, rng, table=None):
        true_counts = np.asarray(counts, dtype=np.int64).reshape(1, -1)
        n = true_counts.sum()
        out = np.empty((1, self.k + 1), dtype=np.int64)
        out[0, 0] = n
        out[0, 1:] = rng.binomial(true_counts[0], self.q_star) + rng.binomial(n - true_counts[0], self.p_star * 1.1)
        return out


def test_the_law_check_catches_a_wrong_simulate_sketch():
    with pytest.raises(AssertionError, match="means differ"):
        checks.check_simulate_sketch_law(_WrongSimulation(k=5, epsilon=1.5))


def test_the_channel_check_catches_reports_that_do_not_follow_it():
    class Skewed(KRR):
        def report_channel(self, table=None):
            channel = super().report_channel(table)
            return (channel + np.eye(self.k) * 0.05) / 1.05

    with pytest.raises(AssertionError, match="do not follow"):
        checks.check_reports_follow_channel(Skewed(k=5, epsilon=1.5))


def test_the_decoder_check_catches_a_biased_decoder():
    def biased(sketch, mechanism, candidates):
        est = decode(sketch, mechanism, candidates)
        return dataclasses.replace(est, frequencies=est.frequencies + 10 * est.std_errors)

    with pytest.raises(AssertionError, match="exceed"):
        checks.check_decoder_recovers(KRR.example(), biased)
