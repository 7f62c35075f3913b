"""O-RAPPOR: per-cohort h-hash Bloom filters randomized like k-RAPPOR, Kairouz et al. 2016 §5
(docs/math/mechanisms.md#o-rappor).

Bloom filters (see :mod:`ldpstream.mechanisms.hashing` for the exact constructions):

- open alphabet (str/bytes values): Google's RAPPOR MD5 Bloom filter, ``d = MD5(be32(c) ‖ v)``, hash
  ``i`` sets bit ``d[i] mod k`` (documented SHA-256 extension when k > 256 or h > 16);
- closed alphabet (``support = S``, values 0..S-1): hash ``i`` of cohort ``c`` sets bit
  ``π_{c,i}(s) mod k`` where ``π_{c,i}`` are independent keyed permutations of 0..S-1 (one per cohort
  and hash index; ``π_{c,0}`` is the same permutation as closed O-RR's ``π_c``). With h = 1 this is
  ``π_c(s) mod k``, the paper's minimal-perfect-hash variant.

Privacy: two Bloom filters with at most h set bits each differ in at most 2h bits. Each bit is kept
with probability e^{ε/(2h)}/(1 + e^{ε/(2h)}), so each differing bit multiplies the likelihood ratio by
at most e^{ε/(2h)} and a whole report by at most e^ε: ε-LDP, tight when two inputs set 2h distinct
bits. This equals RAPPOR's ε_1 = h ln(q*(1−p*)/(p*(1−q*))) with q* = 1 − p* (docs/math/mechanisms.md#rappor).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import scipy.sparse as sp

from ldpstream.errors import ParameterError
from ldpstream.mechanisms import hashing, tuning
from ldpstream.mechanisms._common import (
    as_index_array,
    bit_sketch_from_true_counts,
    bits_from_table,
    bloom_design_matrix,
    check_epsilon,
    check_int,
    distinct_bit_rows,
    draw_cohorts,
    ensure_generator,
    perturb_bits,
    population_by_cohort,
    to_value_list,
)
from ldpstream.mechanisms.base import BitMechanism, DecoderFamily, HashedEncoding
from ldpstream.mechanisms.longitudinal import Memoizing
from ldpstream.mechanisms.randomness import SECURE, Randomness
from ldpstream.mechanisms.rates import bit_rates


def check_bloom_table(table: Any, cohorts: int, hashes: int, k: int) -> np.ndarray:
    """Validate a ``(C, S, h)`` table of bit indices."""
    arr = np.asarray(table)
    if arr.ndim != 3 or arr.shape[0] != cohorts or arr.shape[2] != hashes:
        raise ParameterError(f"bloom table must have shape ({cohorts}, S, {hashes}), got {arr.shape}")
    arr = arr.astype(np.int64, copy=False)
    if arr.size and (arr.min() < 0 or arr.max() >= k):
        raise ParameterError(f"bloom table bit indices must lie in 0..{k - 1}")
    return arr


def true_bit_counts(bloom_table: np.ndarray, per_cohort: np.ndarray, k: int) -> np.ndarray:
    """``(C, k)``: per cohort, the number of clients whose Bloom filter has bit j set."""
    C = bloom_table.shape[0]
    c_idx, s_idx, bits = distinct_bit_rows(bloom_table, k)
    weights = per_cohort[c_idx, s_idx].astype(np.float64)
    counts = np.bincount(c_idx * k + bits, weights=weights, minlength=C * k)
    return np.rint(counts).astype(np.int64).reshape(C, k)


def encode_bloom_batch(
    table: np.ndarray,
    candidate_index: Any,
    cohorts: Any,
    num_cohorts: int,
    k: int,
    q_star: float,
    p_star: float,
    rng: Randomness,
) -> tuple[np.ndarray, np.ndarray]:
    """Shared vectorized path: draw cohorts, build true Bloom filters, flip bits with (q*, p*)."""
    index = as_index_array("candidate_index", candidate_index, table.shape[1])
    chosen = draw_cohorts(cohorts, index.shape[0], num_cohorts, rng)
    true_bits = bits_from_table(table[chosen, index], k)
    return chosen, perturb_bits(true_bits, q_star, p_star, rng)


@dataclass(frozen=True)
class ORappor(Memoizing, HashedEncoding, BitMechanism):
    """O-RAPPOR with ``cohorts`` cohorts, ``hashes`` (h) Bloom hashes of ``k`` bits, ε per report.

    Per-bit rates: q* = e^{ε/(2h)}/(1 + e^{ε/(2h)}), p* = 1 − q* (module docstring). ``memoize`` /
    ``epsilon_permanent``: how a real client (whose cohort is fixed) protects repeated reports
    (:mod:`ldpstream.mechanisms.longitudinal`); one report is this channel either way.
    """

    name: ClassVar[str] = "orappor"
    decoder_family: ClassVar[DecoderFamily] = "candidates_bits"
    joint_member: ClassVar[bool] = True
    discovery_carrier: ClassVar[bool] = True
    tuning_parameters: ClassVar[tuple[str, ...] | None] = ("k", "cohorts", "hashes")

    k: int
    epsilon: float
    cohorts: int
    hashes: int = 1
    support: int | None = None
    memoize: bool = True
    epsilon_permanent: float | None = None

    @classmethod
    def examples(cls) -> tuple[ORappor, ...]:
        return (cls(k=4, epsilon=1.5, cohorts=2, hashes=2), cls(k=4, epsilon=1.5, cohorts=3, hashes=1, support=6))

    @classmethod
    def discovery_report(cls, epsilon: float, k: int, hashes: int, cohorts: int, **options: float) -> ORappor:
        """O-RAPPOR at ε = ``epsilon`` per report (q* = e^{ε/(2h)}/(1 + e^{ε/(2h)}), p* = 1 − q*), memoized."""
        if not cls.discovery_carrier:
            return super().discovery_report(epsilon, k, hashes, cohorts, **options)  # type: ignore[return-value]
        return cls(k=k, epsilon=check_epsilon(epsilon), cohorts=cohorts, hashes=hashes)

    @classmethod
    def tuning_grid(cls, support: int, closed: bool, n: int | None = None) -> list[dict[str, int]]:
        """:func:`~ldpstream.mechanisms.tuning.bloom_grid` with h ∈ {1, 2} (one hash only when
        :attr:`fixed_parameters` fixes it)."""
        fixed = dict(cls.fixed_parameters).get("hashes")
        return tuning.bloom_grid(support, closed, n, (1, 2) if fixed is None else (fixed,))

    def channel_input(self, value: Any, cohort: int) -> np.ndarray:
        """The value's ``(k,)`` bool Bloom filter in ``cohort`` (the row of :meth:`bloom_table`)."""
        check_int("cohort", cohort, 0, self.cohorts - 1)
        if self.closed:
            assert self.support is not None
            index = int(as_index_array("value", np.asarray([value]), self.support)[0])
            bits = [int(hashing.closed_permutation(self.support, cohort, j)[index]) % self.k
                    for j in range(self.hashes)]
        else:
            bits = hashing.bloom_bits(value, cohort, self.hashes, self.k)
        out = np.zeros(self.k, dtype=bool)
        out[bits] = True
        return out

    def unit_epsilon(self, epsilon: float) -> float:
        """Per-bit ε = ε/(2h) (two Bloom filters differ in at most 2h bits)."""
        return epsilon / (2.0 * self.hashes)

    @property
    def closed(self) -> bool:
        """Whether the alphabet is closed (``support`` given)."""
        return self.support is not None

    @property
    def q_star(self) -> float:
        """e^{ε/(2h)} / (1 + e^{ε/(2h)})."""
        return bit_rates(self.epsilon / (2.0 * self.hashes))[0]

    @property
    def p_star(self) -> float:
        """1 / (1 + e^{ε/(2h)})."""
        return bit_rates(self.epsilon / (2.0 * self.hashes))[1]

    # -- hashing -------------------------------------------------------------------------------------

    def bloom_table(self, candidates: Sequence[Any] | np.ndarray | None = None) -> np.ndarray:
        """``(C, S, h)`` int64 bit indices set by each candidate in each cohort (repeats possible).

        Open alphabet: :func:`hashing.bloom_table` (Google MD5), ``candidates`` required. Closed:
        ``π_{c,i}(s) mod k``; ``candidates`` defaults to ``range(S)``.
        """
        if self.closed:
            assert self.support is not None
            perms = hashing.permutation_table(self.support, self.cohorts, self.hashes)
            if candidates is not None:
                perms = perms[:, as_index_array("candidates", candidates, self.support), :]
            return perms % self.k
        if candidates is None:
            raise ParameterError("an open-alphabet O-RAPPOR needs a candidate list")
        return hashing.bloom_table(to_value_list(candidates), self.cohorts, self.hashes, self.k)

    def value_table(self, candidates: Sequence[Any] | None) -> np.ndarray:
        """:meth:`bloom_table` of ``candidates`` (open alphabet) or of the whole closed alphabet."""
        return self.bloom_table(None if self.closed else candidates)

    def _table(self, candidates_or_table: Any) -> np.ndarray:
        if candidates_or_table is None and not self.closed:
            raise ParameterError("an open-alphabet O-RAPPOR needs a Bloom table (see bloom_table)")
        if isinstance(candidates_or_table, np.ndarray) and candidates_or_table.ndim == 3:
            return check_bloom_table(candidates_or_table, self.cohorts, self.hashes, self.k)
        return self.bloom_table(candidates_or_table)

    def design_matrix(self, candidates_or_table: Any = None) -> sp.csr_matrix:
        """``(C*k, S)`` 0/1 csr, row ``c*k + bit`` (cohort-major): 1 where candidate s sets the bit."""
        return bloom_design_matrix(self._table(candidates_or_table), self.k)

    # -- encoding ------------------------------------------------------------------------------------

    def encode(self, value: Any, cohort: int | None = None) -> tuple[int, np.ndarray]:
        """Privatize one value with :data:`SECURE` randomness; returns ``(cohort, (k,) bool bits)``."""
        cohorts, bits = self.encode_values([value], SECURE, cohorts=None if cohort is None else [cohort])
        return int(cohorts[0]), bits[0]

    def encode_values(
        self, values: Sequence[Any], rng: Randomness, cohorts: Any = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Privatize arbitrary values (hashing each DISTINCT value once), then :meth:`encode_batch`."""
        index, distinct = hashing.value_index(to_value_list(values), self.support)
        table = None if distinct is None else self.bloom_table(distinct)
        return self.encode_batch(index, rng, cohorts=cohorts, table=table)

    def encode_batch(
        self, candidate_index: Any, rng: Randomness, cohorts: Any = None, table: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Privatize clients holding candidates ``candidate_index`` (columns of ``table``, a
        :meth:`bloom_table`; default for closed alphabets: all symbols). Returns ``(cohorts, (n, k)
        bool)``; cohorts drawn uniformly from ``rng`` unless given."""
        bloom = self._table(table)
        return encode_bloom_batch(bloom, candidate_index, cohorts, self.cohorts, self.k, self.q_star, self.p_star, rng)

    def simulate_sketch(self, counts: Any, rng: np.random.Generator, table: np.ndarray | None = None) -> np.ndarray:
        """``(C, k+1)`` sketch of a population without materializing reports; exact in distribution.

        ``counts``: ``(S,)`` clients per candidate (cohorts drawn uniformly) or ``(C, S)``. Given the
        true Bloom filters the report bits are independent, so per cohort bit j is set in
        Binomial(T_j, q*) + Binomial(N − T_j, p*) reports, T_j the clients whose filter has bit j.
        """
        rng = ensure_generator(rng)
        bloom = self._table(table)
        per_cohort = population_by_cohort(counts, self.cohorts, bloom.shape[1], rng)
        true_counts = true_bit_counts(bloom, per_cohort, self.k)
        return bit_sketch_from_true_counts(true_counts, per_cohort.sum(axis=1), self.q_star, self.p_star, rng)
