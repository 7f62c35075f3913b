"""Set-ups: a mechanism ready to simulate and decode populations over the symbols 0..S−1.

A :class:`Setup` holds the mechanism (from :mod:`ldpstream.mechanisms`), the candidate list and hash table
of hashed mechanisms, and the design matrix the decoders need. Symbols are the candidate indices 0..S−1.
On an *open* alphabet the candidates are the strings ``"s0" .. "s{S-1}"`` hashed per cohort (O-RR: SHA-256
hash mod k; O-RAPPOR/RAPPOR: Google's MD5 Bloom bits); on a *closed* alphabet the candidates are the
integers with per-cohort permutations (``support=S``). k-RR and k-RAPPOR are closed by nature (k = S).
Channels and hash constructions: docs/math/mechanisms.md.

:meth:`Setup.simulate_sketch` draws the count sketch of a whole population at once through the mechanisms'
``simulate_sketch`` (exact in distribution, O(C·k) per trial, no per-report work; docs/math/mechanisms.md,
"Count sketches"). :meth:`Setup.decode` runs a decoder of :mod:`ldpstream.estimators` (see
:data:`DECODERS`; docs/math/estimators.md).

:func:`hashed_setup` builds the set-up of an O-RR / O-RAPPOR with all parameters given, its hash table
from the cache of :mod:`ldpstream.simulation.hash_tables`. :func:`ldpstream.simulation.scenarios.build_setup`
builds any set-up, choosing free parameters by the error model.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

from ldpstream.distributions import candidate_strings
from ldpstream.errors import ParameterError
from ldpstream.estimators.candidates import decode_bits, decode_orr
from ldpstream.estimators.detection import detect
from ldpstream.estimators.dispatch import estimate
from ldpstream.estimators.estimate import Estimate
from ldpstream.estimators.numerics.simplex import truncate_normalize
from ldpstream.mechanisms import check_epsilon
from ldpstream.mechanisms.base import Mechanism
from ldpstream.mechanisms.factory import MECHANISMS, make_mechanism
from ldpstream.simulation.hash_tables import cached_table

#: Mechanism names accepted by :func:`ldpstream.simulation.scenarios.build_setup`: every one of the factory.
MECHANISM_NAMES: tuple[str, ...] = tuple(MECHANISMS)


def is_direct(mechanism: Mechanism | type[Mechanism]) -> bool:
    """Whether ``mechanism`` (or its class) encodes the symbols 0..S−1 directly (k = S, no hashing, no cohorts):
    its :attr:`~ldpstream.mechanisms.base.Mechanism.decoder_family` inverts the channel over ``0..k-1``."""
    return mechanism.decoder_family.startswith("direct")


#: Mechanisms that encode the symbols 0..S−1 directly (k = S, no hashing, no cohorts).
DIRECT_MECHANISMS: tuple[str, ...] = tuple(name for name in MECHANISM_NAMES if is_direct(MECHANISMS[name]))
#: Decoder names accepted by :meth:`Setup.decode`.
DECODERS: tuple[str, ...] = ("unbiased", "truncate", "project", "ls", "nnls", "mle")
#: Decoders ``simulate`` measures: :data:`DECODERS` plus ``detect`` (bit mechanisms with hashing: screen,
#: refit, test; no analytic error model, so ``tune`` does not offer it).
SIMULATED_DECODERS: tuple[str, ...] = (*DECODERS, "detect")


def require_epsilon(epsilon: float | None) -> float:
    """``epsilon`` as a float, checked to be given, then by :func:`~ldpstream.mechanisms.check_epsilon`."""
    if epsilon is None:
        raise ParameterError("--epsilon is required for this mechanism")
    return check_epsilon(epsilon)


def rappor_rates_for_epsilon(epsilon: float, hashes: int) -> tuple[float, float, float]:
    """``(p, q, f)`` of a one-time RAPPOR with per-report privacy exactly ε: ``f = 0``,
    ``q = e^{ε/(2h)}/(1 + e^{ε/(2h)})``, ``p = 1 − q``.

    With f = 0, q* = q and p* = p, so ε_1 = h ln(q(1 − p)/(p(1 − q))) = 2h ln(q/(1 − q)) = ε
    (docs/math/mechanisms.md, "RAPPOR"); these are O-RAPPOR's per-bit rates. Without a PRR, repeated
    reports of one client compose (ε_∞ is unbounded): this choice is for one-report simulations.
    """
    q = 1.0 / (1.0 + math.exp(-check_epsilon(epsilon) / (2.0 * hashes)))
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
    #: The symbols the decoder is given as candidates (None: all S, without "other"); with a list, the decoders
    #: decode those columns with an "other" term, as the live decoder does.
    listed: np.ndarray | None = None
    _listed_design: sp.csr_matrix | None = field(default=None, repr=False)

    @property
    def design(self) -> sp.csr_matrix:
        """The ``(C·k, S)`` 0/1 design matrix (cohort-major rows) of the mechanism's hashing."""
        if self._design is None:
            self._design = self.mechanism.design_matrix(self.table)
        return self._design

    @property
    def candidate_design(self) -> sp.csr_matrix:
        """The columns of :attr:`design` of the :attr:`listed` symbols (all of them without a list)."""
        if self.listed is None:
            return self.design
        if self._listed_design is None:
            self._listed_design = sp.csr_matrix(self.design.tocsc()[:, self.listed])
        return self._listed_design

    def parameters(self) -> dict[str, Any]:
        """The mechanism's parameters plus the alphabet (JSON-friendly)."""
        out: dict[str, Any] = dict(self.mechanism.parameters())
        out["support"] = self.support
        out["closed"] = self.closed
        out["epsilon"] = float(self.mechanism.epsilon)
        return out

    def simulate_sketch(self, counts: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """The count sketch of a population with ``counts[s]`` clients holding symbol s (one draw)."""
        return self.mechanism.simulate_sketch(counts, rng, table=self.table)

    def decode(self, sketch: np.ndarray, decoder: str) -> np.ndarray:
        """Decoded frequencies of the S symbols (see :meth:`decode_estimate`)."""
        return self.decode_estimate(sketch, decoder).frequencies

    def decode_estimate(self, sketch: np.ndarray, decoder: str) -> Estimate:
        """The estimate of the S symbols, with the intervals the live decoder would publish.

        Direct mechanisms (k-RR, k-RAPPOR): ``unbiased``, ``truncate``, ``project``, ``mle``; ``ls`` is
        ``unbiased`` (least squares on an invertible channel is the inversion estimator) and ``nnls`` is
        ``project`` (the simplex-constrained least squares with identity design is the projection).
        Hashed mechanisms: ``ls`` (weighted least squares), ``project`` (LS then simplex projection, the
        paper's decoder), ``nnls``, ``mle``; ``unbiased`` is ``ls`` and ``truncate`` is ``ls`` followed by
        truncation and renormalization. ``detect`` (hashed bit mechanisms): the lasso screen, refit and
        tests of :func:`~ldpstream.estimators.detection.detect`. The candidates are the :attr:`listed` symbols
        (with an "other" term) when a list is set, else all S (complete: no "other" term); frequencies are
        those of the candidates, in the list's order.
        """
        if decoder not in SIMULATED_DECODERS:
            raise ParameterError(f"unknown decoder {decoder!r}; expected one of {SIMULATED_DECODERS}")
        mech = self.mechanism
        if decoder == "detect":  # the live decoder's detection, with the intervals it publishes
            if is_direct(mech) or mech.report_kind != "bits":
                raise ParameterError(f"decoder 'detect' decodes hashed bit sketches (O-RAPPOR, RAPPOR, CMS), not "
                                     f"{mech.name}")
            margins = getattr(mech, "margin_sketch", None)  # HCMS: its agreement counts are a bit sketch
            bits = sketch if margins is None else margins(sketch)
            return detect(bits, self.candidate_design, *mech.response_rates, other=self.listed is not None)
        if is_direct(mech):
            if self.listed is not None:
                raise ParameterError(f"{mech.name} decodes its whole alphabet: it takes no candidate list")
            method = {"ls": "unbiased", "nnls": "project"}.get(decoder, decoder)
            return estimate(sketch, mech, method)
        method = {"unbiased": "ls", "truncate": "ls"}.get(decoder, decoder)
        margins = getattr(mech, "margin_sketch", None)  # HCMS: its agreement counts are a bit sketch
        design, other = self.candidate_design, self.listed is not None
        if margins is not None:
            est = decode_bits(margins(sketch), design, *mech.response_rates, method, other=other)  # type: ignore[arg-type]
        elif mech.report_kind == "bits":
            est = decode_bits(sketch, design, *mech.response_rates, method, other=other)  # type: ignore[arg-type]
        else:
            est = decode_orr(sketch, design, float(mech.epsilon), method, other=other,  # type: ignore[arg-type]
                             finite_family=bool(getattr(mech, "finite_family", False)))
        if decoder == "truncate":  # not a live decoder of hashed mechanisms: ls's interval, truncated point
            return dataclasses.replace(est, frequencies=truncate_normalize(est.frequencies),
                                       method=f"{est.method}+truncate")
        return est


def with_candidate_list(setup: Setup, p: np.ndarray, unlisted: int, decoys: int) -> Setup:
    """``setup`` (over S symbols, the last ``decoys`` of which no client holds) decoded against a wrong list: every
    symbol but the ``unlisted`` most frequent of ``p`` and the decoys (docs/math/misfit.md)."""
    if is_direct(setup.mechanism) or setup.closed:
        raise ParameterError("--unlisted and --decoys need a hashed mechanism on an open alphabet (strings)")
    present = setup.support - decoys
    if not 0 <= unlisted < present:
        raise ParameterError(f"--unlisted must be in 0..{present - 1}, got {unlisted}")
    dropped = np.argsort(-np.asarray(p[:present]), kind="stable")[:unlisted]
    listed = np.setdiff1d(np.arange(setup.support), dropped)
    return dataclasses.replace(setup, listed=listed, _listed_design=None)


def hashed_setup(
    name: str, epsilon: float, support: int, closed: bool, k: int, cohorts: int, hashes: int | None
) -> Setup:
    """The :class:`Setup` of a hashed mechanism (O-RR, O-RAPPOR, O-OUE, CMS, HCMS) with every parameter given
    (``hashes`` only for those that tune it, default 1); the hash table comes from
    :func:`ldpstream.simulation.hash_tables.cached_table`, through the mechanism's
    :meth:`~ldpstream.mechanisms.base.Mechanism.hashing_twin` (O-OUE, CMS and HCMS hash as an O-RAPPOR, whose table
    and design the cache then holds once for all four: the tuner searches the same grid points for them)."""
    spec: dict[str, Any] = {"mechanism": name, "k": k, "epsilon": epsilon, "cohorts": cohorts}
    if "hashes" in (MECHANISMS[name].tuning_parameters or ()):
        spec["hashes"] = 1 if hashes is None else int(hashes)
    if closed:
        spec["support"] = support
    mech = make_mechanism(spec)
    cands = None if closed else candidate_strings(support)
    twin = mech.hashing_twin()
    table, design = cached_table(twin, hashes=_hashes(twin), support=support, candidates=cands)
    return Setup(name, mech, support, closed, mech.table_of_twin(table), cands, design)


def _hashes(mechanism: Mechanism) -> int | None:
    """The mechanism's h, if it has one."""
    hashes = mechanism.parameters().get("hashes")
    return None if hashes is None else int(hashes)
