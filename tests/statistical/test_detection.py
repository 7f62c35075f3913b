"""Detection (ldpstream.estimators.detection.detect): false detections controlled at the stated level over
fixed seeds, heavy hitters found, and no list of 'significant' strings from an underdetermined design."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from ldpstream.errors import ParameterError
from ldpstream.estimators.detection import detect
from ldpstream.mechanisms.rappor import Rappor

pytestmark = pytest.mark.statistical

SEEDS = range(20)


def _run(mech: Rappor, n_cands: int, probs: np.ndarray, n: int, seed: int):
    cands = [f"s{i}" for i in range(n_cands)]
    table = mech.bloom_table(cands)
    rng = np.random.default_rng(seed)
    counts = np.zeros(n_cands, dtype=np.int64)
    counts[: probs.size] = rng.multinomial(n, probs)
    sketch = mech.simulate_sketch(counts, rng, table)
    return sketch, mech.design_matrix(table), counts / n


def _probs(n_true: int) -> np.ndarray:
    w = 0.8 ** np.arange(n_true)
    return w / w.sum()


@pytest.mark.parametrize("correction", ["bonferroni", "bh"])
def test_false_detections_controlled_and_heavy_hitters_found(correction):
    """Well-determined design (C·k = 1024 rows, 80 candidates, 10 present). With Bonferroni the family-wise
    error rate is at most α = 0.05 per run, so over 20 independent seeds the number of runs with a false
    detection is Binomial(20, <= 0.05)-bounded (its 99.7% quantile is 4). With BH the false discovery rate
    E[V / max(R, 1)] is at most α·70/80 <= 0.05: the mean false discovery proportion over the seeds stays
    below 0.05 + 3 standard errors."""
    mech = Rappor(32, 2, 32, 0.25, 0.75, 0.5)
    probs = _probs(10)
    runs_with_false = 0
    fdp = []
    for seed in SEEDS:
        sketch, X, truth = _run(mech, 80, probs, 50_000, seed)
        est = detect(sketch, X, mech.q_star, mech.p_star, correction)
        mask = est.significant(0.05, correction)
        assert est.info["rule"] == correction and est.info["determined"]
        assert np.flatnonzero(mask).tolist() == est.info["detected"]
        runs_with_false += bool(np.any(mask & (truth == 0)))
        fdp.append(np.sum(mask & (truth == 0)) / max(int(mask.sum()), 1))
        # every string above 5% is detected: its z-score is far above Φ⁻¹(1 − 0.05/80) ≈ 3.2
        assert np.all(mask[truth >= 0.05]), seed
    if correction == "bonferroni":
        assert runs_with_false <= stats.binom.ppf(0.997, len(SEEDS), 0.05)
    else:
        assert np.mean(fdp) <= 0.05 + 3 * np.std(fdp, ddof=1) / np.sqrt(len(SEEDS))


def test_underdetermined_design_gives_no_long_false_list():
    """Candidates outnumber the cells (k = 8, m = 16: 128 rows, 400 candidates, 10 present): the screen stops at
    a well-determined subset, and the detected list is short and almost all true."""
    mech = Rappor(8, 2, 16, 0.25, 0.75, 0.5)
    probs = _probs(10)
    false_total = 0
    for seed in range(5):
        sketch, X, truth = _run(mech, 400, probs, 50_000, seed)
        for correction in ("bonferroni", "bh"):
            est = detect(sketch, X, mech.q_star, mech.p_star, correction)  # type: ignore[arg-type]
            mask = est.significant(0.05, correction)  # type: ignore[arg-type]
            assert est.info["selected"] <= 0.5 * 128
            assert mask.sum() <= 15
            assert mask[0], seed  # the top string (≈ 21%) is found
            false_total += int(np.sum(mask & (truth == 0)))
    assert false_total <= 3


def test_bad_arguments():
    mech = Rappor(8, 2, 2, 0.25, 0.75, 0.5)
    sketch, X, _ = _run(mech, 5, _probs(2), 1000, 0)
    with pytest.raises(ParameterError):
        detect(sketch, X, mech.q_star, mech.p_star, "holm")  # type: ignore[arg-type]
    with pytest.raises(ParameterError):
        detect(sketch, X[:3], mech.q_star, mech.p_star)
