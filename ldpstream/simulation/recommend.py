"""The tuner's recommendation: a mechanism and its parameters for ``(ε, S, n, distribution)``.

Docs: docs/math/tuning.md, "Search and selection". The error model (:mod:`ldpstream.simulation.error_model`) is the
primary criterion (:func:`~ldpstream.simulation.error_model.criterion`: the projected prediction for decoders whose
output is on the simplex — ``project``, ``nnls``, ``mle``, ``truncate`` — the unprojected one for ``ls`` /
``unbiased``). For every mechanism family allowed by the alphabet (:func:`families`: closed: k-RR, k-RAPPOR, OUE,
SS, HR and the hashed ones; open: O-RR, O-RAPPOR, O-OUE, CMS, HCMS) the grid is ranked by the model
(:mod:`ldpstream.simulation.grid_search`); the ``keep`` best points of distinct k are simulated ``trials`` times on
shared populations (common random numbers), and :func:`select` recommends the model's best — the cheapest point
(smallest sketch k·C·h) within 1% of the smallest prediction, since the model cannot rank closer points — unless
the simulated mean of another alternative is lower by more than ``z`` (2.5) pooled standard errors.

Speed (n = 10^6, S = 256, 2 shared cores): 6–10 s of CPU per :func:`tune` call with OPENBLAS_NUM_THREADS=1 (10.4 s
with every family, ε = 1, open alphabet; 9.5 s before O-OUE, CMS and HCMS were searched).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ldpstream.distributions import empirical_distribution, sample_counts
from ldpstream.errors import ParameterError
from ldpstream.mechanisms.factory import MECHANISMS
from ldpstream.simulation.error_model import REFERENCES, criterion, predict
from ldpstream.simulation.grid_search import cost, ranked_predictions
from ldpstream.simulation.losses import LOSSES
from ldpstream.simulation.scenarios import build_setup
from ldpstream.simulation.setups import DIRECT_MECHANISMS, Setup, hashed_setup, require_epsilon


@dataclass
class Alternative:
    """One candidate configuration with its predicted and simulated errors.

    ``predicted`` is the model value used to rank (:func:`criterion` of the decoder); ``simulated_l1``
    is the median, ``simulated_mean`` / ``simulated_se`` the mean and its standard error over the trials
    (all ℓ1 against the tuning reference)."""

    mechanism: str
    params: dict[str, Any]
    predicted_l1: float
    predicted_l2sq: float
    predicted_l1_projected: float = math.nan
    predicted: float = math.nan
    simulated_l1: float | None = None
    simulated_l2sq: float | None = None
    simulated_mean: float | None = None
    simulated_se: float | None = None
    recommended: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "mechanism": self.mechanism,
            **self.params,
            "predicted": self.predicted,
            "predicted_l1": self.predicted_l1,
            "predicted_l1_projected": self.predicted_l1_projected,
            "predicted_l2sq": self.predicted_l2sq,
            "simulated_l1": self.simulated_l1,
            "simulated_mean": self.simulated_mean,
            "simulated_se": self.simulated_se,
            "simulated_l2sq": self.simulated_l2sq,
            "recommended": self.recommended,
        }


def select(alternatives: Sequence[Alternative], z: float = 2.5, rel_tol: float = 0.01) -> Alternative:
    """The model's choice, unless simulation shows another alternative clearly better.

    ``a`` = the cheapest (:func:`cost`) alternative whose ``predicted`` error is within ``rel_tol`` of the
    smallest (the model is accurate to a few %, so it cannot rank closer points; the smaller sketch decodes
    faster); ``b`` = smallest simulated mean. ``b`` replaces ``a`` only when
    ``mean_a − mean_b > z·sqrt(se_a² + se_b²)``: a difference the trials resolve. Smaller differences are
    within the trial noise and are left to the model."""
    if not alternatives:
        raise ParameterError("no alternatives to select from")
    lowest = min(x.predicted for x in alternatives)
    near = [x for x in alternatives if x.predicted <= lowest * (1 + rel_tol)]
    a = min(near, key=lambda x: (cost(x.params), x.predicted))
    sims = [x for x in alternatives if x.simulated_mean is not None]
    if a.simulated_mean is None or not sims:
        return a
    b = min(sims, key=lambda x: x.simulated_mean)  # type: ignore[arg-type, return-value]
    if b is a or a.simulated_se is None or b.simulated_se is None:
        return a
    se = math.sqrt(a.simulated_se**2 + b.simulated_se**2)
    return b if math.isfinite(se) and a.simulated_mean - b.simulated_mean > z * se else a  # type: ignore[operator]



@dataclass
class TuneResult:
    """Everything :func:`tune` computed; ``alternatives`` are sorted by predicted error."""

    epsilon: float
    support: int
    n: int
    closed: bool
    decoder: str
    trials: int
    alternatives: list[Alternative]
    seconds: float
    reference: str = "empirical"
    z: float = 2.5
    rel_tol: float = 0.01
    loss: str = "l1"

    @property
    def recommended(self) -> Alternative:
        return next(a for a in self.alternatives if a.recommended)

    def best(self, mechanism: str) -> Alternative:
        """The chosen alternative of one mechanism family (same rule as the recommendation, :func:`select`)."""
        fam = [a for a in self.alternatives if a.mechanism == mechanism]
        if not fam:
            raise ParameterError(f"{mechanism} was not tuned")
        return select(fam, self.z, self.rel_tol)

    def to_dict(self) -> dict[str, Any]:
        return {
            "epsilon": self.epsilon,
            "support": self.support,
            "n": self.n,
            "closed": self.closed,
            "decoder": self.decoder,
            "criterion": criterion(self.decoder) if self.loss == "l1" else "l2sq",
            "loss": self.loss,
            "reference": self.reference,
            "trials": self.trials,
            "seconds": self.seconds,
            "recommended": self.recommended.to_dict(),
            "alternatives": [a.to_dict() for a in self.alternatives],
        }


#: The losses :func:`tune` can minimize: ``l1`` (the default, ranked by :func:`criterion` of the decoder) or ``l2sq``
#: (ranked by the predicted ℓ2² of the unprojected estimate, simulated as the mean ℓ2²).
TUNE_LOSSES: tuple[str, ...] = ("l1", "l2sq")


def families(closed: bool) -> tuple[str, ...]:
    """Mechanism families usable on a closed / open alphabet: the hashed ones (O-RR, O-RAPPOR, O-OUE, CMS,
    HCMS) on both, searched over their grids (:func:`~ldpstream.simulation.grid_search.grid`); on a closed one
    also the direct mechanisms k-RR, k-RAPPOR, OUE, subset selection and Hadamard response."""
    tuned = [name for name, cls in MECHANISMS.items() if cls.tuning_parameters is not None]
    hashed = tuple(name for name in tuned if MECHANISMS[name].alphabet != "closed")
    direct = tuple(name for name in tuned if MECHANISMS[name].alphabet == "closed")
    return (*direct, *hashed) if closed else hashed


def tune(
    epsilon: float,
    support: int,
    n: int,
    p: np.ndarray,
    *,
    closed: bool = False,
    decoder: str = "project",
    trials: int = 4,
    keep: int = 2,
    seed: int = 0,
    mechanisms: Iterable[str] | None = None,
    reference: str = "empirical",
    z: float = 2.5,
    rel_tol: float = 0.01,
    loss: str = "l1",
    on_step: Callable[[int, int, str], None] | None = None,
) -> TuneResult:
    """Recommend a mechanism and its parameters (module docstring).

    Every family's grid is ranked by the model (:func:`~ldpstream.simulation.grid_search.ranked_predictions`);
    its ``keep`` best points (one for k-RR / k-RAPPOR) are simulated on the same ``trials`` populations
    (common random numbers: population t is drawn from seed ``(seed, t)`` for every alternative); the
    recommendation is
    :func:`select` over all alternatives; ``rel_tol = 0`` ignores the sketch size (pure accuracy, as in
    the paper's Figure 3, "free parameters set to minimize the median ℓ1"). ``loss="l2sq"`` ranks and simulates
    the ℓ2² instead (:data:`TUNE_LOSSES`). ``on_step(done, total, what)`` is told the families done of all and
    what runs now, before each family's search and each alternative's simulation."""
    t0 = time.perf_counter()
    eps = require_epsilon(epsilon)
    S = int(support)
    p = np.asarray(p, dtype=np.float64)
    if p.shape != (S,):
        raise ParameterError(f"distribution has {p.shape[0]} entries, support is {S}")
    if trials < 0 or keep < 1:
        raise ParameterError(f"need trials >= 0 and keep >= 1, got trials={trials}, keep={keep}")
    if reference not in REFERENCES:
        raise ParameterError(f"reference must be one of {REFERENCES}, got {reference!r}")
    if loss not in TUNE_LOSSES:
        raise ParameterError(f"loss must be one of {TUNE_LOSSES}, got {loss!r}")
    key = criterion(decoder) if loss == "l1" else "l2sq"
    allowed = families(closed)
    fams = allowed if mechanisms is None else tuple(mechanisms)
    bad = [m for m in fams if m not in allowed]
    if bad:
        raise ParameterError(f"mechanism(s) {bad} not available on a {'closed' if closed else 'open'} alphabet")
    populations = [sample_counts(p, n, np.random.default_rng([seed, t])) for t in range(trials)]
    alts: list[Alternative] = []
    rel_var: list[float] = []
    for done, fam in enumerate(fams):
        if on_step is not None:
            on_step(done, len(fams), f"{fam}: searching its grid")
        if fam in DIRECT_MECHANISMS:
            try:
                setups: list[tuple[Setup, dict[str, int]]] = [(build_setup(fam, eps, S, closed=True), {"k": S})]
            except ParameterError:
                if mechanisms is not None:
                    raise
                continue  # a direct mechanism that has no instance for S values (its for_alphabet refuses S)
        else:
            ranked: list[dict[str, Any]] = []
            for r in ranked_predictions(
                fam, eps, S, n, p, closed, decoder=decoder, reference=reference, rel_tol=rel_tol, loss=loss
            ):
                # distinct k: the simulation checks the model where it matters (k, as in the ε = 0.5 case
                # where k = 2 was taken over k = 4); neighbouring C differ by less than the trial noise
                if len(ranked) < keep and all(r["k"] != q["k"] for q in ranked):
                    ranked.append(r)
            setups = [
                (hashed_setup(fam, eps, S, closed, r["k"], r["cohorts"], r.get("hashes")),
                 {f: r[f] for f in ("k", "cohorts", "hashes") if f in r})
                for r in ranked
            ]
        for setup, params in setups:
            pred = predict(setup, p, n, reference)
            alt = Alternative(fam, params, pred["l1"], pred["l2sq"], pred["l1_projected"], pred[key])
            if trials:
                if on_step is not None:
                    on_step(done, len(fams), f"{fam} {' '.join(f'{k}={v}' for k, v in params.items())}: "
                            f"{trials} trials")
                rng = np.random.default_rng([seed, len(alts), 1])
                l1s, l2s = [], []
                for counts in populations:
                    est = setup.decode(setup.simulate_sketch(counts, rng), decoder)
                    ref = empirical_distribution(counts) if reference == "empirical" else p
                    l1s.append(float(LOSSES["l1"](est, ref)))
                    l2s.append(float(LOSSES["l2sq"](est, ref)))
                arr = np.asarray(l1s if loss == "l1" else l2s)
                alt.simulated_l1 = float(np.median(l1s))
                alt.simulated_mean = float(arr.mean())
                alt.simulated_l2sq = float(np.median(l2s))
                if trials > 1:
                    rel_var.append(float(arr.var(ddof=1)) / max(alt.simulated_mean, 1e-300) ** 2)
            alts.append(alt)
    # Standard errors from the pooled relative variance of all alternatives: a few trials give a poor
    # variance estimate per alternative (4 trials once gave an SE 4× too small), the ℓ1 of every
    # alternative has a similar coefficient of variation, and pooling gives (trials − 1)·(alternatives) df.
    if trials > 1 and rel_var:
        cv = math.sqrt(float(np.mean(rel_var)))
        for alt in alts:
            alt.simulated_se = alt.simulated_mean * cv / math.sqrt(trials)  # type: ignore[operator]
    alts.sort(key=lambda a: a.predicted)
    select(alts, z, rel_tol).recommended = True
    return TuneResult(
        eps, S, int(n), closed, decoder, trials, alts, time.perf_counter() - t0, reference, z, rel_tol, loss
    )
