"""The optimal mechanisms through the registry, the report format, the consumers' fold and the decoder:
each folds its wire reports into the sketch its decoder reads, refuses reports its channel cannot
produce, and a real client memoizes its permanent response."""

from __future__ import annotations

import numpy as np
import pytest

from ldpstream.consumers.fold import fold_messages
from ldpstream.errors import ConfigError
from ldpstream.estimators.dispatch import estimate
from ldpstream.mechanisms.base import pack_bits
from ldpstream.registry import Registry
from ldpstream.store import ALL_TIME, SketchKey
from ldpstream.wire import encode_records, payloads_from_reports, reports_from_payloads, symbol_payloads

CANDIDATES = [f"value-{i}" for i in range(20)]
REGISTRY = Registry.from_dict({
    "defaults": {"bucket_seconds": 100},
    "metrics": {
        "oue": {"id": 1, "mechanism": "oue", "k": 12, "epsilon": 1.0},
        "ss": {"id": 2, "mechanism": "ss", "k": 12, "epsilon": 1.0, "estimator": "mle"},
        "hr": {"id": 3, "mechanism": "hr", "k": 12, "epsilon": 1.0},
        "ooue": {"id": 4, "mechanism": "ooue", "k": 16, "epsilon": 2.0, "cohorts": 4, "candidates": CANDIDATES,
                 "estimator": "ls"},
        "cms": {"id": 5, "mechanism": "cms", "k": 16, "epsilon": 2.0, "cohorts": 4, "candidates": CANDIDATES,
                "estimator": "nnls"},
        "hcms": {"id": 6, "mechanism": "hcms", "k": 16, "epsilon": 2.0, "cohorts": 4, "candidates": CANDIDATES,
                 "estimator": "mle"},
    },
})


@pytest.mark.parametrize("name", ["oue", "ss", "hr", "ooue", "cms", "hcms"])
def test_client_reports_fold_exactly_into_the_mechanisms_sketch_and_decode(name):
    metric = REGISTRY[name]
    m = metric.mechanism
    rng = np.random.default_rng(1)
    values = rng.integers(0, 12, 3000)
    cohorts, reports = m.encode_clients(values, rng, m.value_table(None if m.closed else CANDIDATES))
    payloads = payloads_from_reports(m, reports)
    np.testing.assert_array_equal(reports_from_payloads(m, payloads), np.asarray(reports).astype(np.int64)
                                  if m.report_kind == "symbol" else reports)
    rows = encode_records(metric.id, metric.fingerprint, cohorts, payloads, event_time=50)
    folded = fold_messages([rows.tobytes()], np.zeros(1, dtype=np.int64), REGISTRY, now=1000)
    assert folded.rejections == [] and folded.applied == {name: 3000}
    sketch = folded.increments[SketchKey(name, metric.fingerprint, ALL_TIME)]
    np.testing.assert_array_equal(sketch, m.sketch(cohorts, reports))
    assert sketch.shape == (m.cohorts, m.sketch_width)
    est = estimate(sketch, m, metric.estimator, candidates=metric.candidates)
    assert est.n_reports == 3000 and est.frequencies.shape == (len(metric.candidates or range(12)),)


def test_reports_the_channel_cannot_produce_are_refused_as_out_of_range():
    hr, ss = REGISTRY["hr"], REGISTRY["ss"]
    too_big = encode_records(hr.id, hr.fingerprint, [0], symbol_payloads(np.array([16])), event_time=50)
    ok = encode_records(hr.id, hr.fingerprint, [0], symbol_payloads(np.array([15])), event_time=50)
    d = ss.mechanism.d
    bits = np.zeros((2, 12), dtype=bool)
    bits[0, :d] = True
    bits[1, : d + 1] = True  # one bit too many: not a subset-selection report
    ss_rows = encode_records(ss.id, ss.fingerprint, [0, 0], pack_bits(bits), event_time=50)
    values = [too_big.tobytes(), ok.tobytes(), ss_rows[:1].tobytes(), ss_rows[1:].tobytes()]
    folded = fold_messages(values, np.zeros(4, dtype=np.int64), REGISTRY, now=1000)
    assert [(r.message_index, r.reason) for r in folded.rejections] == [(0, "out_of_range"), (3, "out_of_range")]
    assert folded.applied == {"hr": 1, "ss": 1}


def test_registry_refuses_an_instantaneous_layer_and_a_bad_bucket_count():
    for spec in ({"mechanism": "oue", "k": 8, "epsilon": 1.0, "epsilon_permanent": 2.0},
                 {"mechanism": "hcms", "k": 12, "epsilon": 1.0, "cohorts": 2},
                 {"mechanism": "ss", "k": 8, "epsilon": 1.0, "subset_size": 8},
                 {"mechanism": "cms", "k": 8, "epsilon": 1.0, "cohorts": 2, "hashes": 2}):
        with pytest.raises(ConfigError):
            Registry.from_dict({"metrics": {"m": {"id": 1, **spec}}})


@pytest.mark.parametrize("name", ["oue", "ss", "hr", "hcms", "ooue"])
def test_a_real_client_memoizes_its_permanent_response(name):
    m = REGISTRY[name].mechanism
    value = 3 if m.closed else CANDIDATES[3]
    one, again = m.client_encoder(b"a-secret", 1 % m.cohorts), m.client_encoder(b"a-secret", 1 % m.cohorts)
    first = one.encode_report(value)
    np.testing.assert_array_equal(first[1], again.encode_report(value)[1])  # a restarted client: the same
    np.testing.assert_array_equal(first[1], one.encode_report(value)[1])
    others = {str(m.client_encoder(bytes([i]) * 8, 1 % m.cohorts).encode_report(value)[1]) for i in range(1, 40)}
    assert len(others) > 1  # the permanent response depends on the secret


@pytest.mark.parametrize("name", ["oue", "ss", "hr", "ooue", "cms", "hcms"])
def test_a_window_of_repeated_memoized_reports_is_widened_not_broken(name):
    """The same clients report in two buckets (memoized: identical reports): the window's intervals widen by a
    design effect near 2 (HR and HCMS measure it on their transformed cells)."""
    from ldpstream.decoder.published import decode_window

    metric = REGISTRY[name]
    m = metric.mechanism
    rng = np.random.default_rng(4)
    table = m.value_table(None if m.closed else CANDIDATES)
    cohorts, reports = m.encode_clients(rng.integers(0, 12, 20_000), rng, table)
    bucket = m.sketch(cohorts, reports)
    est, design, deff = decode_window(metric, 2 * bucket, [bucket, bucket])
    assert deff.shape == est.frequencies.shape
    assert design.overlap == pytest.approx(1.0, abs=0.2) and np.all(deff > 1.5)


def test_an_association_of_a_new_mechanism_is_refused_until_the_joint_decoder_models_it():
    metrics = {"a": {"id": 1, "mechanism": "krr", "k": 4, "epsilon": 1.0},
               "b": {"id": 2, "mechanism": "ss", "k": 4, "epsilon": 1.0}}
    with pytest.raises(ConfigError, match="joint decoder"):
        Registry.from_dict({"metrics": metrics,
                            "associations": {"ab": {"id": 1, "metrics": ["a", "b"], "retention": "30d"}}})
