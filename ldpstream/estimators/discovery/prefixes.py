"""Heavy hitters without a dictionary by prefix extension, the users split into groups (PEM: Wang, Li and Jha
2017; docs/math/dictionary.md#prefix-extension).

Strings are padded to ``length`` characters. Group ``t`` of ``G`` (a client's group uniform, its one report at the
full ε) reports the prefix of length ``l_t`` (``first, first + step, …, length``) through OLH
(:class:`~ldpstream.mechanisms.olh.OLH`, ``cohorts`` hash functions). The decoder estimates every candidate of
step 1 (all prefixes of length ``first``), keeps those Benjamini–Hochberg selects at ``alpha`` (eq. D1), extends
each by every ``step`` characters, and so on; the last step's selection is the dictionary, its frequencies the
least squares of the last group's sketch against it (with the "other" column and the family's variance).
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import stats

from ldpstream.errors import ParameterError
from ldpstream.mechanisms import hashing
from ldpstream.mechanisms._common import symbol_design_matrix
from ldpstream.mechanisms.prefix_olh import PREFIX_HASHES, PrefixOLH

from ..candidates import decode_orr, family_variance
from ..estimate import Estimate
from ..numerics.support import support_counts
from .decode import DiscoveredString
from .strings import DEFAULT_ALPHABET, DEFAULT_PAD, StringShape

__all__ = ["PrefixResult", "PrefixScheme", "PrefixStep", "dictionary_estimate", "discover_prefixes", "prefix_estimates"]

#: Prefixes kept at most after a step (the largest z first): bounds the next step's candidates.
MAX_KEEP = 256


@dataclass(frozen=True)
class PrefixScheme:
    """The groups' prefix lengths ``first, first + step, …, length``, ``cohorts`` hash functions a group, and the
    :class:`~ldpstream.mechanisms.prefix_olh.PrefixOLH` every client reports through."""

    epsilon: float
    length: int = 16
    step: int = 2
    first: int = 2
    cohorts: int = PREFIX_HASHES
    alphabet: str = DEFAULT_ALPHABET
    pad: str = DEFAULT_PAD

    def __post_init__(self) -> None:
        self.mechanism  # noqa: B018 (its checks)

    @classmethod
    def of(cls, mechanism: PrefixOLH) -> PrefixScheme:
        """The scheme of a metric's mechanism."""
        return cls(epsilon=mechanism.epsilon, length=mechanism.length, step=mechanism.step, first=mechanism.first,
                   cohorts=mechanism.hashes, alphabet=mechanism.characters, pad=mechanism.pad)

    @property
    def mechanism(self) -> PrefixOLH:
        """``PrefixOLH.for_strings(epsilon, cohorts, …)``: every client's."""
        return PrefixOLH.for_strings(self.epsilon, hashes=self.cohorts, length=self.length, step=self.step,
                                     first=self.first, characters=self.alphabet, pad=self.pad)

    @property
    def shape(self) -> StringShape:
        """Padding and the alphabet (with the pad)."""
        return StringShape(length=self.length, ngram=1, alphabet=self.alphabet, pad=self.pad)

    @property
    def lengths(self) -> tuple[int, ...]:
        return self.mechanism.lengths

    @property
    def groups(self) -> int:
        return self.mechanism.groups

    def parameters(self) -> dict[str, Any]:
        return {"method": "prefix", "epsilon": self.epsilon, "length": self.length, "step": self.step,
                "first": self.first, "groups": self.groups, "cohorts": self.cohorts, "k": self.mechanism.k,
                "alphabet": self.shape.alphabet}

    def extensions(self, width: int) -> list[str]:
        """Every ``width``-character string over the alphabet in which no pad is followed by a character."""
        pad, chars = self.pad, self.shape.alphabet
        if len(chars) ** width > 2**21:
            raise ParameterError(f"{len(chars)}^{width} extensions per prefix: use a shorter step or first prefix")
        return ["".join(t) for t in itertools.product(chars, repeat=width)
                if pad not in "".join(t).rstrip(pad)]

    def first_candidates(self) -> list[str]:
        """Step 1's candidates: the prefixes of length ``first`` (no leading pad)."""
        return [e for e in self.extensions(self.first) if not e.startswith(self.pad)]

    def extend(self, prefixes: Sequence[str]) -> list[str]:
        """Each prefix followed by every extension of ``step`` characters (a padded prefix by pads only)."""
        tails = self.extensions(self.step)
        ended = self.pad * self.step
        return [p + t for p in prefixes for t in ((ended,) if p.endswith(self.pad) else tails)]


#: Candidates whose collisions are removed from every other's estimate (eq. D2): at most this many of the largest
#: first-pass z, each above :data:`HEAVY_Z`.
DEFLATE = 64
HEAVY_Z = 4.0
#: Jacobi sweeps of the heavy candidates' estimates among themselves before they deflate the others.
SWEEPS = 6


def prefix_estimates(sketch: np.ndarray, mechanism: PrefixOLH, group: int, candidates: Sequence[str], *,
                     deflate: int = DEFLATE) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Estimates of ``candidates`` (prefixes of the group's length) from ``group``'s rows of the sketch, their
    standard error under ``f_s = 0`` and their plug-in standard error. The support estimate
    ``(S_s/n − 1/g)/(p − 1/g)`` (eq. OLH1's), less its collisions with the heavy candidates (eq. D2: up to
    ``deflate`` of z above :data:`HEAVY_Z`, their estimates first freed of each other's collisions), with the hash
    family's term of the rest in both errors (eq. D1)."""
    counts = np.asarray(sketch, dtype=np.float64)
    n = float(counts.sum())
    if n <= 0:
        raise ParameterError("no reports in the group")
    g, numbers = mechanism.k, mechanism.group_cohorts(group)
    cohorts = numbers.size
    if counts.shape != (cohorts, g):
        raise ParameterError(f"group {group}'s sketch must be ({cohorts}, {g}), got {counts.shape}")
    e = math.exp(mechanism.epsilon)
    p = e / (e + g - 1)
    keys = hashing.olh_keys(list(candidates))
    seeds = hashing.olh_seeds(numbers)
    rate = support_counts(counts, keys, seeds) / n
    first = (rate - 1 / g) / (p - 1 / g)
    scale = (p - 1 / g) ** 2 * n
    sampling = (1 / g) * (1 - 1 / g) / scale
    z = first / math.sqrt(sampling + family_variance(counts, mechanism.epsilon, np.zeros(0), np.zeros(0)))
    heavy = np.argsort(-z, kind="stable")[: min(deflate, z.size)]
    heavy = heavy[z[heavy] > HEAVY_Z]
    f = first
    if heavy.size:
        table = hashing.olh_table_from_keys(keys[heavy], numbers, g)
        fh = first[heavy]
        for _ in range(SWEEPS):
            fh = first[heavy] - _collisions(table, fh, keys[heavy], seeds, np.arange(heavy.size), g)
        f = first - _collisions(table, fh, keys, seeds, heavy, g)
        f[heavy] = fh
    listed = f[heavy] if heavy.size else np.zeros(0)
    family = family_variance(counts, mechanism.epsilon, listed, np.full(listed.size, sampling))
    null_se = math.sqrt(sampling + family)
    gamma = np.clip(rate, 0.0, 1.0)
    return f, np.full(len(keys), null_se), np.sqrt(gamma * (1 - gamma) / scale + family)


def _collisions(table: np.ndarray, fh: np.ndarray, keys: np.ndarray, seeds: np.ndarray, heavy: np.ndarray,
                g: int) -> np.ndarray:
    """Eq. D2's ``g/(g − 1) Σ_{v ≠ s} f_v (κ_sv − 1/g)`` over the heavy values (``table`` their ``(C, V)`` hashes,
    ``fh`` their estimates) for each key; ``heavy``: the keys' positions that are the heavy values themselves."""
    cohorts = table.shape[0]
    own = np.zeros((cohorts, g))
    np.add.at(own, (np.repeat(np.arange(cohorts), fh.size), table.ravel()), np.tile(fh, cohorts))
    shared = support_counts(own, keys, seeds) / cohorts
    others = np.full(keys.size, fh.sum())
    shared[heavy] -= fh  # a value's collision with itself is not a collision
    others[heavy] -= fh
    out: np.ndarray = g / (g - 1) * (shared - others / g)
    return out


def empirical_null_scale(z: np.ndarray) -> float:
    """The null z-statistics' scale read off their lower tail, where no present candidate is (a present
    string's z is large and positive): ``max(1, q_z(ℓ) / Φ⁻¹(ℓ))`` at the quantile ``ℓ = max(0.001, 20/m)`` of the
    m candidates; 1 for fewer than 100 candidates. It is the tail the selection threshold lies in that decides the
    false discoveries, and a mixture of variances (a candidate's collisions vary) is heavier there than its
    centre shows."""
    if z.size < 100:
        return 1.0
    level = max(0.001, 20 / z.size)
    return max(1.0, float(np.quantile(z, level)) / float(stats.norm.ppf(level)))


def harmonic(m: int) -> float:
    """``Σ_{i ≤ m} 1/i``: Benjamini and Yekutieli's (2001) factor for a false discovery rate under any dependence."""
    return float(np.sum(1.0 / np.arange(1, m + 1))) if m > 0 else 1.0


def benjamini_hochberg(p_values: np.ndarray, alpha: float) -> np.ndarray:
    """Indices rejected by Benjamini–Hochberg at ``alpha``."""
    m = p_values.size
    if m == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.argsort(p_values, kind="stable")
    passed = np.nonzero(p_values[order] <= alpha * np.arange(1, m + 1) / m)[0]
    return order[: passed[-1] + 1] if passed.size else np.zeros(0, dtype=np.int64)


@dataclass(frozen=True)
class PrefixStep:
    """One step: its prefix length, candidates, the selected prefixes (largest z first) and its cost."""

    length: int
    candidates: int
    selected: list[str]
    seconds: float
    cpu_seconds: float
    #: :func:`empirical_null_scale` of the step's z-statistics (1: the model's variance).
    null_scale: float = 1.0

    def to_dict(self) -> dict[str, Any]:
        return {"length": self.length, "candidates": self.candidates, "selected": len(self.selected),
                "seconds": self.seconds, "cpu_seconds": self.cpu_seconds, "null_scale": self.null_scale}


@dataclass(frozen=True)
class PrefixResult:
    """The discovered strings (padding removed) with their estimates, and each step."""

    discovered: list[DiscoveredString]
    steps: list[PrefixStep]
    alpha: float
    info: dict[str, Any] = field(default_factory=dict)


def discover_prefixes(mechanism: PrefixOLH, sketch: np.ndarray, *, alpha: float = 0.10,
                      alpha_step: float | None = None, max_keep: int = MAX_KEEP) -> PrefixResult:
    """The prefix-extension decode of a ``(G·H, k)`` sketch of ``mechanism``'s reports (module docstring)."""
    counts = np.asarray(sketch, dtype=np.float64)
    if counts.shape != (mechanism.cohorts, mechanism.k):
        raise ParameterError(f"the sketch must be ({mechanism.cohorts}, {mechanism.k}), got {counts.shape}")
    scheme = PrefixScheme.of(mechanism)
    parts = counts.reshape(mechanism.groups, mechanism.hashes, mechanism.k)
    steps: list[PrefixStep] = []
    kept: list[str] = []
    for t, length in enumerate(mechanism.lengths):
        wall, cpu = time.perf_counter(), time.process_time()
        candidates = scheme.first_candidates() if t == 0 else scheme.extend(kept)
        if not candidates or parts[t].sum() <= 0:
            kept = []
            steps.append(PrefixStep(length, len(candidates), [], 0.0, 0.0))
            continue
        f, null_se, _ = prefix_estimates(parts[t], mechanism, t, candidates)
        z = f / null_se
        # the empirical null's scale (after Efron 2004) from the lower tail, where only absent candidates lie
        spread = empirical_null_scale(z)
        z = z / spread
        if t == mechanism.groups - 1:  # the dictionary: Benjamini–Yekutieli, valid under any dependence (eq. D3)
            chosen = benjamini_hochberg(stats.norm.sf(z), alpha / harmonic(z.size))
        else:
            chosen = benjamini_hochberg(stats.norm.sf(z), alpha if alpha_step is None else alpha_step)
        chosen = chosen[np.argsort(-z[chosen], kind="stable")][:max_keep]
        kept = [candidates[i] for i in chosen]
        steps.append(PrefixStep(length, len(candidates), kept, time.perf_counter() - wall,
                                time.process_time() - cpu, spread))
    return PrefixResult(final_estimates(mechanism, counts, kept), steps, alpha,
                        info={"reports": [float(part.sum()) for part in parts]})


def dictionary_estimate(mechanism: PrefixOLH, sketch: np.ndarray, strings: Sequence[str]) -> Estimate:
    """The frequencies of ``strings`` (padded) from the last group's reports (whole strings): least squares with the
    "other" column and the family's variance (the unlisted strings' prefixes would bias the other groups'),
    labelled with the strings unpadded."""
    last = mechanism.groups - 1
    rows = np.asarray(sketch, dtype=np.float64).reshape(mechanism.groups, mechanism.hashes, mechanism.k)[last]
    table = hashing.olh_table_from_keys(hashing.olh_keys(list(strings)), mechanism.group_cohorts(last), mechanism.k)
    return decode_orr(rows, symbol_design_matrix(table, mechanism.k), mechanism.epsilon, "ls", other=True,
                      finite_family=True, labels=[s.rstrip(mechanism.pad) for s in strings])


def final_estimates(mechanism: PrefixOLH, sketch: np.ndarray, strings: Sequence[str]) -> list[DiscoveredString]:
    """:func:`dictionary_estimate` of ``strings`` as discovered strings, largest first."""
    if not strings:
        return []
    est = dictionary_estimate(mechanism, sketch, strings)
    out = [DiscoveredString(s.rstrip(mechanism.pad), float(f), float(se))
           for s, f, se in zip(strings, est.frequencies, np.asarray(est.std_errors), strict=True)]
    out.sort(key=lambda d: -d.estimate)
    return out
