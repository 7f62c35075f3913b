"""The panel of :mod:`ldpstream.simulation.panel`: memoized reports repeat until the values change halfway, the
movers alone draw new permanent responses, and a window's truth weighs each half by its buckets."""

import numpy as np

from ldpstream.estimators import estimate
from ldpstream.registry import Registry
from ldpstream.simulation.panel import panel_bucket_sketches, run_window_trials


def _metric(**spec):
    return Registry.from_dict({"metrics": {"m": {"id": 1, "bucket_seconds": 3600, **spec}}})["m"]


def test_memoized_reports_repeat_and_only_the_movers_change_at_the_middle_bucket():
    metric = _metric(mechanism="krr", k=8, epsilon=1.0)
    rng = np.random.default_rng(0)
    values = rng.integers(0, 8, 4000)
    changed = values.copy()
    changed[:100] = (values[:100] + 1) % 8  # 100 movers
    held = panel_bucket_sketches(metric, values, 6, rng, changed=changed)
    assert all(np.array_equal(h, held[0]) for h in held[:3])  # memo only: identical reports
    assert all(np.array_equal(h, held[3]) for h in held[3:])
    assert 0 < np.abs(held[3] - held[0]).sum() <= 2 * 100  # at most the movers' reports moved
    assert all(h.sum() == 4000 for h in held)
    fresh = panel_bucket_sketches(metric, values, 3, rng, panel=False)
    assert not np.array_equal(fresh[0], fresh[1])  # new clients every bucket: new noise


def test_window_trials_measure_against_the_values_over_the_window():
    metric = _metric(mechanism="krr", k=4, epsilon=8.0)  # almost noiseless: the estimate is the window's truth
    p = np.array([0.4, 0.3, 0.2, 0.1])
    res = run_window_trials(metric, p, 20_000, 4, 0.5, 3, np.random.default_rng(1),
                            lambda summed, _buckets: estimate(summed, metric.mechanism, "project"))
    assert res.losses["empirical"]["l1"].max() < 0.01
    assert res.coverage is not None and res.coverage > 0.5

