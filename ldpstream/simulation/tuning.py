"""Simulation set-ups, predicted errors and parameter tuning for distribution estimation.

This module is the engine behind ``ldpstream simulate`` and ``ldpstream tune`` (and the benchmarks).

Set-ups
    :func:`build_setup` turns a mechanism name and its parameters into a :class:`Setup`: the mechanism
    (from :mod:`ldpstream.mechanisms`), the candidate list and hash table of hashed mechanisms, and the
    design matrix the decoders need. Symbols are the candidate indices 0..S−1. On an *open* alphabet the
    candidates are the strings ``"s0" .. "s{S-1}"`` hashed per cohort (O-RR: SHA-256 hash mod k;
    O-RAPPOR/RAPPOR: Google's MD5 Bloom bits); on a *closed* alphabet the candidates are the integers with
    per-cohort permutations (``support=S``). k-RR and k-RAPPOR are closed by nature (k = S).

Simulation
    :meth:`Setup.simulate_sketch` draws the count sketch of a whole population at once through the
    mechanisms' ``simulate_sketch`` (exact in distribution, O(C·k) per trial, no per-report work).
    :meth:`Setup.decode` runs a decoder of :mod:`ldpstream.estimators` (see :data:`DECODERS`).

Predicted error (``predict``)
    For the *unprojected* least-squares/inversion estimate (the estimate before projection), the
    per-coordinate variance, conditional on the sample (i.e. against the empirical distribution):

    * k-RR: ``Var p̂_i = ((e^ε + k − 1)/(e^ε − 1))² m_i(1 − m_i)/n − p_i(1 − p_i)/n`` with
      ``m = ((e^ε − 1)p + 1)/(e^ε + k − 1)`` (formula sheet, "k-RR"; the last term removes the sampling
      variance of the population itself).
    * k-RAPPOR: ``Var p̂_j = m_j(1 − m_j)/(n (q* − p*)²) − p_j(1 − p_j)/n`` with ``m_j = p* + (q* − p*)p_j``.
    * O-RR, O-RAPPOR, RAPPOR (hashing): the per-cohort responses ``z`` (formula sheet, "O-RR" and "RAPPOR")
      satisfy ``E z = Xp`` with the (C·k × S) design ``X`` and have independent noise of variance
      ``v_O-RR = c² m(1 − m)/N_c`` (``c = (e^ε + k − 1)/(e^ε − 1)``, ``m = (1 + (e^ε − 1)(Xp))/(e^ε + k − 1)``)
      or ``v_bits = r(1 − r)/(N_c (q* − p*)²)`` (``r = p* + (q* − p*)(Xp)``), ``N_c = n/C``. The
      weighted least-squares estimate (weights ``1/v``) has ``Cov p̂ = (Xᵀ V⁻¹ X)⁻¹`` when the cells are
      independent; for O-RR the cells of one cohort are multinomial (covariance ``c²(diag(m) − mmᵀ)/N_c``)
      and the sandwich ``A Cov Aᵀ``, ``A = (XᵀV⁻¹X)⁻¹XᵀV⁻¹``, is used instead (ignoring it under-predicted
      by ~15%). For bit mechanisms the between-bit covariance of one report (order ``(q* − p*)²p``
      relative to ``v``) is ignored. The model carries both
      error sources of hashing: **randomization noise** (the diagonal, ≈ C ones per column: a variance of
      about ``v/C`` per candidate, which does not shrink with C since ``v ∝ C``) and **hash collisions**
      (off-diagonal entries of ``XᵀV⁻¹X``, about C/k per pair, which inflate the inverse; roughly by
      ``1/(1 − S/(C·k))`` for random hashing). When ``X`` has rank < S the candidates are not identifiable:
      the pseudo-inverse is used and the squared bias ``‖(I − X⁺X)p‖²`` is added.

    From the variances: ``E ℓ2² ≈ Σ v_i + b_i²`` and ``E ℓ1 ≈ Σ sqrt(b_i² + 2 v_i/π)`` (exact for b = 0
    and Gaussian errors; the formula sheet's ℓ1 approximation) for the *unprojected* estimate. Projection
    onto the simplex removes much of that error when p is skewed (×1.5 to ×3.5 at ε ≤ 1), and not by the
    same factor for every parameter choice — ranking by the unprojected prediction took O-RR k = 2 over
    k = 4 at ε = 0.5. :func:`projected_l1` therefore also predicts the ℓ1 of the *projected* estimate
    (a mean-field model of the projection threshold, closed form in Φ and φ); checked against simulation
    of LS + projection at n = 10^6, S = 256, ε = 0.5..8 for all four families: within ±4%.
    ``reference="true"`` keeps the population's sampling variance (errors against the true p).

Tuning (``tune``)
    The model is the primary criterion (:func:`criterion`: the projected prediction for decoders whose
    output is on the simplex — ``project``, ``nnls``, ``mle``, ``truncate`` — the unprojected one for
    ``ls`` / ``unbiased``). For every mechanism family allowed by the alphabet (closed: k-RR, k-RAPPOR,
    O-RR, O-RAPPOR; open: O-RR, O-RAPPOR) the grid is ranked by the model; the ``keep`` best points of
    distinct k are simulated ``trials`` times on shared populations (common random numbers), and
    :func:`select` recommends the model's best — the cheapest point (smallest sketch k·C·h) within 1% of
    the smallest prediction, since the model cannot rank closer points — unless the simulated mean of
    another alternative is lower by more than ``z`` (2.5) pooled standard errors.

    Grids: O-RR ``k ∈ {2, 3, 4, 5, 6, 8, 16, …}`` up to S (closed) or 2S (open), ``C`` powers of two up
    to :func:`max_cohorts` (4096, and at most n/100), identifiable points only (``C(k − 1) + 1 >= S``:
    each cohort's k responses sum to 1). O-RR is searched in two phases: every k with C ≤ 256 (and up to
    8× its smallest identifiable C: small k are ill-conditioned there), then C
    doubles for the 3 best k while each doubling improves the prediction by ≥ 1% (at ε = 0.5 the best
    points are k = 3..5 with C = 2048..4096, as the paper found: more cohorts help at low ε).
    O-RAPPOR: ``k ∈ {16, …, 4096}`` (closed: up to S), ``C ∈ {1, …, 64}``, ``h ∈ {1, 2}``, ``k·C >= S``.
    On an open alphabet ``C >= 2``: with a single cohort two candidates whose hashes collide
    (birthday-likely: ~S²/(2k) pairs) can never be told apart.

    Speed (n = 10^6, S = 256, 2 shared cores): 6–10 s per call with OPENBLAS_NUM_THREADS=1. The O-RR
    hash tables (SHA-256 per cohort and candidate) dominate a cold start; they are cached per process,
    and the table of C cohorts is a prefix of the table of more cohorts. Multi-threaded OpenBLAS on a
    busy 2-core machine made the 256 × 256 factorizations ~50× slower: set OPENBLAS_NUM_THREADS=1 there.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp
from scipy.optimize import brentq
from scipy.special import ndtr

from ldpstream.distributions import candidate_strings, empirical_distribution, sample_counts
from ldpstream.errors import ParameterError
from ldpstream.mechanisms.base import BitMechanism, Mechanism
from ldpstream.simulation.losses import LOSSES

#: Mechanism names accepted by :func:`build_setup`.
MECHANISM_NAMES: tuple[str, ...] = ("krr", "krappor", "orr", "orappor", "rappor")
#: Decoder names accepted by :meth:`Setup.decode`.
DECODERS: tuple[str, ...] = ("unbiased", "truncate", "project", "ls", "nnls", "mle")

_DIRECT = ("krr", "krappor")
#: O-RR with at most this many symbols is predicted with dense products (see predicted_variances).
_DENSE_K = 8
#: Reference distributions the errors are measured against.
REFERENCES: tuple[str, ...] = ("empirical", "true")


def rappor_rates_for_epsilon(epsilon: float, hashes: int) -> tuple[float, float, float]:
    """``(p, q, f)`` of a one-time RAPPOR with per-report privacy exactly ε: ``f = 0``,
    ``q = e^{ε/(2h)}/(1 + e^{ε/(2h)})``, ``p = 1 − q``.

    With f = 0, q* = q and p* = p, so ε_1 = h ln(q(1 − p)/(p(1 − q))) = 2h ln(q/(1 − q)) = ε (formula
    sheet, "RAPPOR"); these are O-RAPPOR's per-bit rates. Without a PRR, repeated reports of one client
    compose (ε_∞ is unbounded): this choice is for one-report simulations.
    """
    if not epsilon > 0 or not math.isfinite(epsilon):
        raise ParameterError(f"epsilon must be finite and > 0, got {epsilon}")
    q = 1.0 / (1.0 + math.exp(-epsilon / (2.0 * hashes)))
    return 1.0 - q, q, 0.0


@dataclass
class Setup:
    """A mechanism ready to simulate and decode populations over the symbols 0..S−1."""

    name: str
    mechanism: Mechanism
    support: int
    closed: bool
    table: np.ndarray | None = None
    candidates: list[str] | None = None
    _design: sp.csr_matrix | None = field(default=None, repr=False)

    @property
    def design(self) -> sp.csr_matrix:
        """The ``(C·k, S)`` 0/1 design matrix (cohort-major rows) of the mechanism's hashing."""
        if self._design is None:
            m: Any = self.mechanism
            self._design = m.design_matrix() if self.name in _DIRECT else m.design_matrix(self.table)
        return self._design

    def parameters(self) -> dict[str, Any]:
        """The mechanism's parameters plus the alphabet (JSON-friendly)."""
        out: dict[str, Any] = dict(self.mechanism.parameters())
        out["support"] = self.support
        out["closed"] = self.closed
        out["epsilon"] = float(self.mechanism.epsilon)
        return out

    def simulate_sketch(self, counts: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """The count sketch of a population with ``counts[s]`` clients holding symbol s (one draw)."""
        m: Any = self.mechanism
        if self.name in _DIRECT:
            return m.simulate_sketch(counts, rng)
        return m.simulate_sketch(counts, rng, table=self.table)

    def decode(self, sketch: np.ndarray, decoder: str) -> np.ndarray:
        """Decoded frequencies of the S symbols.

        Direct mechanisms (k-RR, k-RAPPOR): ``unbiased``, ``truncate``, ``project``, ``mle``; ``ls`` is
        ``unbiased`` (least squares on an invertible channel is the inversion estimator) and ``nnls`` is
        ``project`` (the simplex-constrained least squares with identity design is the projection).
        Hashed mechanisms: ``ls`` (weighted least squares), ``project`` (LS then simplex projection, the
        paper's decoder), ``nnls``, ``mle``; ``unbiased`` is ``ls`` and ``truncate`` is ``ls`` followed by
        truncation and renormalization. The candidate list is complete here, so no "other" term.
        """
        if decoder not in DECODERS:
            raise ParameterError(f"unknown decoder {decoder!r}; expected one of {DECODERS}")
        from ldpstream.estimators.candidates import decode_bits, decode_orr
        from ldpstream.estimators.direct import estimate_krappor, estimate_krr
        from ldpstream.estimators.simplex import truncate_normalize

        eps = float(self.mechanism.epsilon)
        if self.name in _DIRECT:
            method = {"ls": "unbiased", "nnls": "project"}.get(decoder, decoder)
            fn = estimate_krr if self.name == "krr" else estimate_krappor
            return fn(sketch, eps, method).frequencies  # type: ignore[arg-type]
        method = {"unbiased": "ls", "truncate": "ls"}.get(decoder, decoder)
        if isinstance(self.mechanism, BitMechanism):
            mech = self.mechanism
            est = decode_bits(sketch, self.design, mech.q_star, mech.p_star, method, other=False)  # type: ignore[arg-type]
        else:
            est = decode_orr(sketch, self.design, eps, method, other=False)  # type: ignore[arg-type]
        freq = est.frequencies
        return truncate_normalize(freq) if decoder == "truncate" else freq


def build_setup(
    name: str,
    epsilon: float | None,
    support: int,
    *,
    closed: bool = False,
    k: int | None = None,
    cohorts: int | None = None,
    hashes: int | None = None,
    p: float | None = None,
    q: float | None = None,
    f: float | None = None,
    n: int | None = None,
    dist: np.ndarray | None = None,
    decoder: str = "project",
) -> Setup:
    """A :class:`Setup` for mechanism ``name`` over symbols 0..``support``−1.

    Unset ``k``, ``cohorts``, ``hashes`` of O-RR / O-RAPPOR are chosen by the analytic prediction
    (:func:`best_predicted` for ``decoder``, needs ``n`` and ``dist``; defaults n = 10^6 and uniform). RAPPOR takes
    either ``epsilon`` (then f = 0 and p, q from :func:`rappor_rates_for_epsilon`) or explicit ``p``, ``q``, ``f``;
    its defaults are k = the smallest power of two >= S (at least 8), h = 2 and C = 32 cohorts.
    """
    from ldpstream.mechanisms.factory import make_mechanism

    name = name.lower()
    if name not in MECHANISM_NAMES:
        raise ParameterError(f"unknown mechanism {name!r}; expected one of {MECHANISM_NAMES}")
    S = int(support)
    if S < 2:
        raise ParameterError(f"support must be >= 2, got {support}")
    if name in _DIRECT:
        if k is not None and k != S:
            raise ParameterError(f"{name} encodes the symbols 0..S-1 directly: k must equal the support ({S})")
        if cohorts not in (None, 1) or hashes not in (None, 1):
            raise ParameterError(f"{name} has no cohorts or hashes")
        mech = make_mechanism({"mechanism": name, "k": S, "epsilon": _eps(epsilon)})
        return Setup(name, mech, S, True)
    if name == "rappor":
        if closed:
            raise ParameterError("rappor hashes strings with Google's Bloom filter: it has no closed alphabet")
        h = 2 if hashes is None else hashes
        kk = k if k is not None else max(8, 1 << (S - 1).bit_length())
        C = 32 if cohorts is None else cohorts
        if p is None and q is None and f is None:
            pp, qq, ff = rappor_rates_for_epsilon(_eps(epsilon), h)
        elif p is None or q is None:
            raise ParameterError("rappor: give --epsilon, or --p and --q (and optionally --f)")
        else:
            pp, qq, ff = float(p), float(q), float(f or 0.0)
        mech = make_mechanism({"mechanism": "rappor", "k": kk, "hashes": h, "cohorts": C, "p": pp, "q": qq, "f": ff})
        cands = candidate_strings(S)
        return Setup(name, mech, S, False, mech.bloom_table(cands), cands)  # type: ignore[attr-defined]
    eps = _eps(epsilon)
    if k is None or cohorts is None or (name == "orappor" and hashes is None):
        dist_p = np.full(S, 1.0 / S) if dist is None else dist
        n_pred = 10**6 if n is None else n
        best = best_predicted(
            name, eps, S, n_pred, dist_p, closed, k=k, cohorts=cohorts, hashes=hashes, decoder=decoder
        )
        k, cohorts, hashes = best["k"], best["cohorts"], best.get("hashes")
    return _hashed_setup(name, eps, S, closed, int(k), int(cohorts), hashes)


def _eps(epsilon: float | None) -> float:
    if epsilon is None:
        raise ParameterError("--epsilon is required for this mechanism")
    e = float(epsilon)
    if not e > 0 or not math.isfinite(e):
        raise ParameterError(f"epsilon must be finite and > 0, got {epsilon}")
    return e


_TABLE_CACHE: dict[tuple[Any, ...], Any] = {}


_PERM_CACHE: dict[int, np.ndarray] = {}


def _closed_permutations(S: int, C: int) -> np.ndarray:
    """``(C, S)`` per-cohort permutations π_c of a closed O-RR: its symbol table with k = S (π_c mod S = π_c).
    Cached per S (largest C computed; fewer cohorts are its first rows)."""
    base = _PERM_CACHE.get(S)
    if base is None or base.shape[0] < C:
        from ldpstream.mechanisms.factory import make_mechanism

        mech: Any = make_mechanism({"mechanism": "orr", "k": S, "epsilon": 1.0, "cohorts": C, "support": S})
        base = _PERM_CACHE[S] = np.asarray(mech.symbol_table(), dtype=np.int64)
    return base[:C]


def _hashed_setup(name: str, eps: float, S: int, closed: bool, k: int, C: int, hashes: int | None) -> Setup:
    from ldpstream.mechanisms.factory import make_mechanism

    spec: dict[str, Any] = {"mechanism": name, "k": k, "epsilon": eps, "cohorts": C}
    if name == "orappor":
        spec["hashes"] = 1 if hashes is None else int(hashes)
    if closed:
        spec["support"] = S
    mech: Any = make_mechanism(spec)
    cands = None if closed else candidate_strings(S)
    # The hash table depends on (name, k, C, h, S, closed) only, not on ε: cache it across calls.
    key = (name, k, C, spec.get("hashes"), S, closed)
    if key not in _TABLE_CACHE:
        if len(_TABLE_CACHE) > 256:
            _TABLE_CACHE.clear()
        # Cohort c's hash (or permutation) does not depend on C: the table of C cohorts is the first C rows
        # of any cached table with more cohorts (tests/unit/test_tuning.py checks this).
        larger = [
            v[0] for kk, v in _TABLE_CACHE.items()
            if kk[0] == name and kk[1] == k and kk[3:] == key[3:] and kk[2] > C
        ]
        if larger:
            table = np.ascontiguousarray(larger[0][:C])
        elif name == "orr" and closed:
            table = _closed_permutations(S, C) % k  # the closed table is π_c(s) mod k, π_c independent of k
        else:
            table = mech.symbol_table(cands) if name == "orr" else mech.bloom_table(cands)
        _TABLE_CACHE[key] = (table, mech.design_matrix(table))
    table, design = _TABLE_CACHE[key]
    return Setup(name, mech, S, closed, table, cands, design)


# ---------------------------------------------------------------------------------------------------------
# Predicted error
# ---------------------------------------------------------------------------------------------------------


def predicted_variances(
    setup: Setup, p: np.ndarray, n: int, reference: str = "empirical"
) -> tuple[np.ndarray, np.ndarray]:
    """Per-coordinate ``(variance, bias)`` of the unprojected estimate (module docstring, "Predicted error")
    against the sample's ``empirical`` distribution (default) or the ``true`` one (the sampling variance
    ``p(1 − p)/n`` of the population is then kept)."""
    if reference not in REFERENCES:
        raise ParameterError(f"reference must be one of {REFERENCES}, got {reference!r}")
    p = np.asarray(p, dtype=np.float64)
    sampling = p * (1 - p) / n if reference == "empirical" else np.zeros_like(p)
    mech: Any = setup.mechanism
    eps = float(mech.epsilon)
    if setup.name == "krr":
        e = math.exp(eps)
        k = setup.support
        m = ((e - 1) * p + 1) / (e + k - 1)
        var = ((e + k - 1) / (e - 1)) ** 2 * m * (1 - m) / n
        return np.maximum(var - sampling, 0.0), np.zeros_like(p)
    if setup.name == "krappor":
        qs, ps = mech.q_star, mech.p_star
        m = ps + (qs - ps) * p
        return np.maximum(m * (1 - m) / (n * (qs - ps) ** 2) - sampling, 0.0), np.zeros_like(p)
    X = setup.design
    C = mech.cohorts
    Nc = n / C
    xp = np.clip(X @ p, 0.0, 1.0)
    if isinstance(mech, BitMechanism):
        qs, ps = mech.q_star, mech.p_star
        r = ps + (qs - ps) * xp
        v = r * (1 - r) / (Nc * (qs - ps) ** 2)
    else:
        e = math.exp(eps)
        k = mech.k
        c = (e + k - 1) / (e - 1)
        m = (1 + (e - 1) * xp) / (e + k - 1)
        v = c * c * m * (1 - m) / Nc
    w = 1.0 / v
    dense = not isinstance(mech, BitMechanism) and setup.table is not None and mech.k <= _DENSE_K
    if dense:
        # O-RR with few symbols: X has C·S ones in C·k rows; Xᵀ diag(w) X as k dense (S×C)(C×S) products
        # (BLAS, ~k·C·S² flops) beats the sparse product (~C·S²/k operations, ~100× slower each).
        T = np.asarray(setup.table)
        onehot = [np.equal(T, y).astype(np.float64) for y in range(mech.k)]
        wk = w.reshape(C, mech.k)
        G = sum(A.T @ (A * wk[:, y, None]) for y, A in enumerate(onehot))
    else:
        G = np.asarray((X.T @ sp.diags(w) @ X).todense())
    try:
        L = np.linalg.cholesky(G + 1e-12 * np.trace(G) / G.shape[0] * np.eye(G.shape[0]))
        full_rank = np.min(np.abs(np.diag(L))) ** 2 > 1e-9 * np.max(np.diag(G))
    except np.linalg.LinAlgError:
        full_rank = False
    Gi = np.linalg.inv(G) if full_rank else np.linalg.pinv(G, hermitian=True)
    bias = np.zeros_like(p) if full_rank else -(p - Gi @ (G @ p))
    if isinstance(mech, BitMechanism):
        var = np.diag(Gi).copy()
    else:
        # O-RR cells of one cohort are multinomial: Cov z_c = c²/N_c (diag(m_c) − m_c m_cᵀ), not diagonal.
        # Sandwich for the estimator A = G⁻¹XᵀW: diag(A Cov Aᵀ) = diag(G⁻¹ Xᵀ diag(w² c² m/N_c) X G⁻¹)
        # − (c²/N_c) Σ_c (A m_c)², with A m_c the columns of U = G⁻¹ Xᵀ (W M), M the cohort blocks of m.
        bw = w * w * c * c * m / Nc
        if dense:
            bk = bw.reshape(C, mech.k)
            B = sum(A.T @ (A * bk[:, y, None]) for y, A in enumerate(onehot))
            wm = (w * m).reshape(C, mech.k)
            XtWM = wm[np.arange(C)[:, None], T].T  # (S, C): (w m) of the cell candidate s falls in, cohort c
        else:
            B = np.asarray((X.T @ sp.diags(bw) @ X).todense())
            R = X.shape[0]
            blocks = sp.csr_matrix((w * m, (np.arange(R), np.arange(R) // mech.k)), shape=(R, C))
            XtWM = np.asarray((X.T @ blocks).todense())
        U = Gi @ XtWM
        var = np.einsum("ij,ij->i", Gi @ B, Gi) - (c * c / Nc) * np.einsum("ij,ij->i", U, U)
    return np.maximum(var - sampling, 0.0), bias


def _phi(z: np.ndarray) -> np.ndarray:
    return np.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi)


def projected_l1(p: np.ndarray, var: np.ndarray, bias: np.ndarray | None = None) -> float:
    """Predicted ℓ1 of the simplex projection of ``u = p + b + σZ`` (independent Gaussian coordinates).

    Mean-field model of the projection ``x_i = max(u_i + λ, 0)`` (formula sheet, "Putting estimates back
    on the simplex"): with S large the threshold λ is nearly deterministic, so it is taken as the root of
    ``Σ_i E max(u_i + λ, 0) = 1``, where ``E max(a + σZ, 0) = aΦ(a/σ) + σφ(a/σ)``. Then
    ``E ℓ1 = Σ_i [ p_i Φ(z0_i) + E(|μ_i + σ_i Z|; Z ≥ z0_i) ]`` with ``μ_i = λ + b_i``,
    ``z0_i = −(p_i + μ_i)/σ_i`` (the coordinate is zeroed below z0_i, costing p_i) in closed form.
    Checked against simulation of the paper's decoder (LS + projection) at n = 10^6, S = 256: within
    ±4% for k-RR, k-RAPPOR, O-RR, O-RAPPOR over ε = 0.5..8 (the unprojected formula overestimates the
    projected error by up to ×3.5 at low ε, and not uniformly across parameters, which misranked them).
    """
    p = np.asarray(p, dtype=np.float64)
    b = np.zeros_like(p) if bias is None else np.asarray(bias, dtype=np.float64)
    s = np.sqrt(np.maximum(np.asarray(var, dtype=np.float64), 1e-300))

    def excess_mass(lam: float) -> float:
        a = p + b + lam
        return float(np.sum(a * ndtr(a / s) + s * _phi(a / s))) - 1.0

    lo, hi = -1.0, 1.0
    while excess_mass(lo) > 0:
        lo *= 2.0
    while excess_mass(hi) < 0:
        hi *= 2.0
    lam = brentq(excess_mass, lo, hi, xtol=1e-14, rtol=1e-12)
    mu = lam + b
    z0 = -(p + mu) / s
    zc = -mu / s
    # E(|μ + σZ|; Z ≥ z0) with the sign change at zc ≥ z0 (p ≥ 0)
    pos = mu * (1 - ndtr(zc)) + s * _phi(zc)
    neg = mu * (ndtr(zc) - ndtr(z0)) + s * (_phi(z0) - _phi(zc))
    return float(np.sum(p * ndtr(z0) + pos - neg))


def predict(setup: Setup, p: np.ndarray, n: int, reference: str = "empirical") -> dict[str, float]:
    """Predicted errors against the ``reference`` distribution: ``l1`` and ``l2sq`` of the unprojected
    estimate, ``l1_projected`` of the estimate projected onto the simplex (:func:`projected_l1`)."""
    var, bias = predicted_variances(setup, p, n, reference)
    return {
        "l1": float(np.sum(np.sqrt(bias * bias + 2.0 * var / math.pi))),
        "l2sq": float(np.sum(var + bias * bias)),
        "l1_projected": projected_l1(p, var, bias),
    }


def criterion(decoder: str) -> str:
    """The :func:`predict` key that models ``decoder``: ``l1_projected`` for the decoders whose output is
    on the simplex (``project``, ``nnls``, ``mle``, ``truncate``; MLE measured within a few % of the
    projection in the paper's setting), ``l1`` for the unconstrained ``ls`` / ``unbiased``."""
    if decoder not in DECODERS:
        raise ParameterError(f"unknown decoder {decoder!r}; expected one of {DECODERS}")
    return "l1" if decoder in ("ls", "unbiased") else "l1_projected"


def _powers(lo: int, hi: int) -> list[int]:
    out, v = [], 1
    while v <= hi:
        if v >= lo:
            out.append(v)
        v *= 2
    return out


#: Largest cohort count searched (and never more than n/100, so that a cohort holds ~100 reports).
MAX_COHORTS = 4096
#: Phase 1 of the O-RR search covers C up to this (all k); phase 2 doubles C further for the best k.
PHASE1_COHORTS = 256


def max_cohorts(n: int | None) -> int:
    """The largest C searched for a population of ``n`` (a power of two, at most :data:`MAX_COHORTS`)."""
    cap = MAX_COHORTS if n is None else min(MAX_COHORTS, max(2, int(n) // 100))
    return 1 << (cap.bit_length() - 1)


def orr_identifiable(k: int, cohorts: int, support: int) -> bool:
    """Whether O-RR can identify S candidates: each cohort gives k − 1 independent equations (its k
    responses sum to one), plus the total, so ``C(k − 1) + 1 >= S`` is needed."""
    return cohorts * (k - 1) + 1 >= support


def grid(name: str, support: int, closed: bool, n: int | None = None) -> list[dict[str, int]]:
    """The parameter grid searched for a hashed mechanism (module docstring, "Tuning")."""
    S = support
    c_min = 1 if closed else 2  # open alphabet, one cohort: two candidates with equal hashes never separate
    c_max = max(c_min, max_cohorts(n))
    if name == "orr":
        k_max = S if closed else 2 * S
        ks = sorted({k for k in (2, 3, 4, 5, 6) if k <= k_max} | set(_powers(8, k_max)))
        return [
            {"k": k, "cohorts": C} for k in ks for C in _powers(c_min, c_max) if orr_identifiable(k, C, S)
        ]
    if name == "orappor":
        ks = _powers(16, S if closed else 4096)
        return [
            {"k": k, "cohorts": C, "hashes": h}
            for k in ks for C in _powers(c_min, min(64, c_max)) for h in (1, 2) if k * C >= S
        ]
    raise ParameterError(f"no grid for {name}")


def best_predicted(
    name: str,
    epsilon: float,
    support: int,
    n: int,
    p: np.ndarray,
    closed: bool,
    *,
    k: int | None = None,
    cohorts: int | None = None,
    hashes: int | None = None,
    decoder: str = "project",
) -> dict[str, Any]:
    """The grid point (with fixed values respected) recommended by the model for ``decoder``: the first
    of :func:`ranked_predictions`."""
    return ranked_predictions(
        name, epsilon, support, n, p, closed, k=k, cohorts=cohorts, hashes=hashes, decoder=decoder
    )[0]


def ranked_predictions(
    name: str,
    epsilon: float,
    support: int,
    n: int,
    p: np.ndarray,
    closed: bool,
    *,
    k: int | None = None,
    cohorts: int | None = None,
    hashes: int | None = None,
    decoder: str = "project",
    reference: str = "empirical",
    refine: int = 3,
    rel_tol: float = 0.01,
    stop_tol: float = 0.01,
) -> list[dict[str, Any]]:
    """Grid points of ``name`` (restricted to the given fixed values) with their predicted errors, best
    first by the model of ``decoder`` (:func:`criterion`).

    Search (module docstring, "Tuning"): with nothing fixed, O-RR is evaluated on every k for
    C ≤ :data:`PHASE1_COHORTS` (and up to 8× the smallest identifiable C), then, for the ``refine``
    best k, C keeps doubling up to :func:`max_cohorts` while each doubling improves the prediction by at
    least ``stop_tol``. Order: the predicted value (rounded to 6 decimals), then — to prefer cheaper
    decoding when the model cannot tell — the cheapest point (fewest C·k·h) within ``rel_tol`` of the
    best is moved to the front.
    """
    key = criterion(decoder)
    points = grid(name, support, closed, n)
    fixed = k is not None or cohorts is not None or hashes is not None
    if fixed:
        want = {"k": k, "cohorts": cohorts, "hashes": hashes}
        points = [pt for pt in points if all(v is None or pt.get(f, 1) == v for f, v in want.items())]
        if not points:
            pt = {"k": k or support, "cohorts": cohorts or 1}
            if name == "orappor":
                pt["hashes"] = hashes or 1
            points = [pt]

    def evaluate(pt: dict[str, int]) -> dict[str, Any]:
        setup = _hashed_setup(name, epsilon, support, closed, pt["k"], pt["cohorts"], pt.get("hashes"))
        pred = predict(setup, p, n, reference)
        return {
            **pt, "predicted_l1": pred["l1"], "predicted_l2sq": pred["l2sq"],
            "predicted_l1_projected": pred["l1_projected"], "criterion": pred[key],
        }

    if fixed or name != "orr":
        # largest C first, so that the smaller tables are slices of the larger ones (see _hashed_setup)
        out = [evaluate(pt) for pt in sorted(points, key=lambda pt: -pt["cohorts"])]
    else:
        by_k: dict[int, list[int]] = {}
        for pt in points:
            by_k.setdefault(pt["k"], []).append(pt["cohorts"])
        out = []
        for kk, cs in by_k.items():
            # near the smallest identifiable C the design is ill-conditioned: look 8× above it before
            # judging a small k (k = 3 looked poor at C = 256 and is the best k at C = 4096, ε = 0.5)
            top = max(PHASE1_COHORTS, 8 * cs[0])
            first = [C for C in cs if top >= C]
            # largest C first: the smaller tables are then slices of its table (see _hashed_setup)
            out.extend(evaluate({"k": kk, "cohorts": C}) for C in reversed(first))
        best_k: dict[int, dict[str, Any]] = {}
        for r in out:
            if r["k"] not in best_k or r["criterion"] < best_k[r["k"]]["criterion"]:
                best_k[r["k"]] = r
        for kk in sorted(best_k, key=lambda v: best_k[v]["criterion"])[:refine]:
            done = {r["cohorts"] for r in out if r["k"] == kk}
            last = max((r for r in out if r["k"] == kk), key=lambda r: r["cohorts"])
            if by_k[kk][-1] not in done:
                # hash the largest table once; the doublings below are its slices
                _hashed_setup(name, epsilon, support, closed, kk, by_k[kk][-1], None)
            for C in by_k[kk]:
                if C in done:
                    continue
                r = evaluate({"k": kk, "cohorts": C})
                out.append(r)
                if r["criterion"] > last["criterion"] * (1 - stop_tol):
                    break
                last = r
    out.sort(key=lambda d: (round(d["criterion"], 6), d["cohorts"] * d["k"] * d.get("hashes", 1)))
    near = [d for d in out if d["criterion"] <= out[0]["criterion"] * (1 + rel_tol)]
    cheapest = min(near, key=lambda d: (cost(d), d["criterion"]))
    out.remove(cheapest)
    return [cheapest, *out]


# ---------------------------------------------------------------------------------------------------------
# Simulation
# ---------------------------------------------------------------------------------------------------------


@dataclass
class TrialResults:
    """Losses of every trial: ``losses[reference][loss]`` is a ``(T,)`` array; reference is ``empirical``
    (the sample's distribution) or ``true``."""

    losses: dict[str, dict[str, np.ndarray]]
    seconds: float

    def summary(self) -> dict[str, dict[str, dict[str, float]]]:
        """``{reference: {loss: {"mean": …, "median": …}}}``."""
        return {
            ref: {name: {"mean": float(np.mean(v)), "median": float(np.median(v))} for name, v in per.items()}
            for ref, per in self.losses.items()
        }

    def median_l1(self, reference: str = "empirical") -> float:
        return float(np.median(self.losses[reference]["l1"]))


def run_trials(
    setup: Setup,
    p: np.ndarray,
    n: int,
    decoders: str | Sequence[str],
    trials: int,
    rng: np.random.Generator,
) -> dict[str, TrialResults]:
    """``trials`` independent populations of ``n`` clients from ``p``, each privatized (through the exact
    aggregate simulation) and decoded by every decoder in ``decoders`` (the same sketch for all decoders).

    Returns ``{decoder: TrialResults}``; ``seconds`` counts sampling + simulation + that decoder.
    """
    names = [decoders] if isinstance(decoders, str) else list(decoders)
    if trials < 1:
        raise ParameterError(f"trials must be >= 1, got {trials}")
    if n < 1:
        raise ParameterError(f"n must be >= 1, got {n}")
    est: dict[str, list[np.ndarray]] = {d: [] for d in names}
    secs = dict.fromkeys(names, 0.0)
    emp = []
    for _ in range(trials):
        t0 = time.perf_counter()
        counts = sample_counts(p, n, rng)
        sketch = setup.simulate_sketch(counts, rng)
        shared = time.perf_counter() - t0
        emp.append(empirical_distribution(counts))
        for d in names:
            t1 = time.perf_counter()
            est[d].append(setup.decode(sketch, d))
            secs[d] += shared + time.perf_counter() - t1
    emp_arr = np.asarray(emp)
    out = {}
    for d in names:
        e = np.asarray(est[d])
        losses = {
            "empirical": {name: fn(e, emp_arr) for name, fn in LOSSES.items()},
            "true": {name: fn(e, p) for name, fn in LOSSES.items()},
        }
        out[d] = TrialResults(losses, secs[d])
    return out


# ---------------------------------------------------------------------------------------------------------
# Tuning
# ---------------------------------------------------------------------------------------------------------


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


def cost(params: dict[str, Any]) -> int:
    """Size of one sketch, ``k·C·h`` (cohorts and hashes default to 1): the decoding cost grows with it."""
    return int(params.get("k", 1)) * int(params.get("cohorts", 1)) * int(params.get("hashes", 1))


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
            "criterion": criterion(self.decoder),
            "reference": self.reference,
            "trials": self.trials,
            "seconds": self.seconds,
            "recommended": self.recommended.to_dict(),
            "alternatives": [a.to_dict() for a in self.alternatives],
        }


def families(closed: bool) -> tuple[str, ...]:
    """Mechanism families usable on a closed / open alphabet."""
    return ("krr", "krappor", "orr", "orappor") if closed else ("orr", "orappor")


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
) -> TuneResult:
    """Recommend a mechanism and its parameters (module docstring, "Tuning").

    Every family's grid is ranked by the model (:func:`ranked_predictions`); its ``keep`` best points
    (one for k-RR / k-RAPPOR) are simulated on the same ``trials`` populations (common random numbers:
    population t is drawn from seed ``(seed, t)`` for every alternative); the recommendation is
    :func:`select` over all alternatives; ``rel_tol = 0`` ignores the sketch size (pure accuracy, as in
    the paper's Figure 3, "free parameters set to minimize the median ℓ1")."""
    t0 = time.perf_counter()
    eps = _eps(epsilon)
    S = int(support)
    p = np.asarray(p, dtype=np.float64)
    if p.shape != (S,):
        raise ParameterError(f"distribution has {p.shape[0]} entries, support is {S}")
    if trials < 0 or keep < 1:
        raise ParameterError(f"need trials >= 0 and keep >= 1, got trials={trials}, keep={keep}")
    if reference not in REFERENCES:
        raise ParameterError(f"reference must be one of {REFERENCES}, got {reference!r}")
    key = criterion(decoder)
    allowed = families(closed)
    fams = allowed if mechanisms is None else tuple(mechanisms)
    bad = [m for m in fams if m not in allowed]
    if bad:
        raise ParameterError(f"mechanism(s) {bad} not available on a {'closed' if closed else 'open'} alphabet")
    populations = [sample_counts(p, n, np.random.default_rng([seed, t])) for t in range(trials)]
    alts: list[Alternative] = []
    rel_var: list[float] = []
    for fam in fams:
        if fam in _DIRECT:
            setups = [(build_setup(fam, eps, S, closed=True), {"k": S})]
        else:
            ranked: list[dict[str, Any]] = []
            for r in ranked_predictions(
                fam, eps, S, n, p, closed, decoder=decoder, reference=reference, rel_tol=rel_tol
            ):
                # distinct k: the simulation checks the model where it matters (k, as in the ε = 0.5 case
                # where k = 2 was taken over k = 4); neighbouring C differ by less than the trial noise
                if len(ranked) < keep and all(r["k"] != q["k"] for q in ranked):
                    ranked.append(r)
            setups = [
                (_hashed_setup(fam, eps, S, closed, r["k"], r["cohorts"], r.get("hashes")),
                 {f: r[f] for f in ("k", "cohorts", "hashes") if f in r})
                for r in ranked
            ]
        for setup, params in setups:
            pred = predict(setup, p, n, reference)
            alt = Alternative(fam, params, pred["l1"], pred["l2sq"], pred["l1_projected"], pred[key])
            if trials:
                rng = np.random.default_rng([seed, len(alts), 1])
                l1s, l2s = [], []
                for counts in populations:
                    est = setup.decode(setup.simulate_sketch(counts, rng), decoder)
                    ref = empirical_distribution(counts) if reference == "empirical" else p
                    l1s.append(float(LOSSES["l1"](est, ref)))
                    l2s.append(float(LOSSES["l2sq"](est, ref)))
                arr = np.asarray(l1s)
                alt.simulated_l1 = float(np.median(arr))
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
        eps, S, int(n), closed, decoder, trials, alts, time.perf_counter() - t0, reference, z, rel_tol
    )
