"""Simulation scenarios: the :class:`~ldpstream.simulation.setups.Setup` of a mechanism name with some of
its parameters given, the free ones chosen by the error model.

This is what ``ldpstream simulate`` builds from its options: k-RR / k-RAPPOR need only ε and S; O-RR /
O-RAPPOR take the grid point :func:`ldpstream.simulation.grid_search.ranked_predictions` ranks first for the
parameters left unset; RAPPOR takes ε (then ``f = 0`` and
:func:`~ldpstream.simulation.setups.rappor_rates_for_epsilon`) or explicit ``p``, ``q``, ``f``
(docs/math/mechanisms.md, "RAPPOR").
"""

from __future__ import annotations

import numpy as np

from ldpstream.distributions import candidate_strings
from ldpstream.errors import ParameterError
from ldpstream.mechanisms.factory import MECHANISMS, make_mechanism
from ldpstream.simulation.grid_search import ranked_predictions
from ldpstream.simulation.setups import (
    DIRECT_MECHANISMS,
    MECHANISM_NAMES,
    Setup,
    hashed_setup,
    rappor_rates_for_epsilon,
    require_epsilon,
)


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
    """A :class:`~ldpstream.simulation.setups.Setup` for mechanism ``name`` over symbols 0..``support``−1.

    Unset ``k``, ``cohorts``, ``hashes`` of O-RR / O-RAPPOR are chosen by the analytic prediction
    (:func:`~ldpstream.simulation.grid_search.ranked_predictions` first for ``decoder``, needs ``n`` and ``dist``;
    defaults n = 10^6 and uniform). RAPPOR takes either ``epsilon`` (then f = 0 and p, q from
    :func:`~ldpstream.simulation.setups.rappor_rates_for_epsilon`) or explicit ``p``, ``q``, ``f``;
    its defaults are k = the smallest power of two >= S (at least 8), h = 2 and C = 32 cohorts.
    """
    name = name.lower()
    if name not in MECHANISM_NAMES:
        raise ParameterError(f"unknown mechanism {name!r}; expected one of {MECHANISM_NAMES}")
    kind = MECHANISMS[name]
    S = int(support)
    if S < 2:
        raise ParameterError(f"support must be >= 2, got {support}")
    if name in DIRECT_MECHANISMS:
        if k is not None and k != S:
            raise ParameterError(f"{name} encodes the symbols 0..S-1 directly: k must equal the support ({S})")
        if cohorts not in (None, 1) or hashes not in (None, 1):
            raise ParameterError(f"{name} has no cohorts or hashes")
        mech = kind.for_alphabet(S, require_epsilon(epsilon))
        return Setup(name, mech, S, True)
    if kind.alphabet == "open":  # RAPPOR
        if closed:
            raise ParameterError(f"{name} hashes strings with Google's Bloom filter: it has no closed alphabet")
        h = 2 if hashes is None else hashes
        kk = k if k is not None else max(8, 1 << (S - 1).bit_length())
        C = 32 if cohorts is None else cohorts
        if p is None and q is None and f is None:
            pp, qq, ff = rappor_rates_for_epsilon(require_epsilon(epsilon), h)
        elif p is None or q is None:
            raise ParameterError(f"{name}: give --epsilon, or --p and --q (and optionally --f)")
        else:
            pp, qq, ff = float(p), float(q), float(f or 0.0)
        mech = make_mechanism({"mechanism": name, "k": kk, "hashes": h, "cohorts": C, "p": pp, "q": qq, "f": ff})
        cands = candidate_strings(S)
        return Setup(name, mech, S, False, mech.value_table(cands), cands)
    eps = require_epsilon(epsilon)
    given = {"hashes": hashes}
    for key, value in kind.fixed_parameters:
        if given.get(key) not in (None, value):
            raise ParameterError(f"{name} fixes {key} = {value}")
    if k is None or cohorts is None or ("hashes" in (kind.tuning_parameters or ()) and hashes is None):
        dist_p = np.full(S, 1.0 / S) if dist is None else dist
        n_pred = 10**6 if n is None else n
        best = ranked_predictions(
            name, eps, S, n_pred, dist_p, closed, k=k, cohorts=cohorts, hashes=hashes, decoder=decoder
        )[0]
        k, cohorts, hashes = best["k"], best["cohorts"], best.get("hashes")
    return hashed_setup(name, eps, S, closed, int(k), int(cohorts), hashes)

