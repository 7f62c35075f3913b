"""O-RR: k-RR on hashed values with hash cohorts, Kairouz et al. 2016 §5 (docs/math/mechanisms.md#o-rr).

A client in cohort c (uniform over 0..C-1) reports ``(c, kRR_ε(HASH_c(s) mod k))``. For a closed
alphabet (``support = S``, values are ints 0..S-1) the cohort hash is a permutation π_c of 0..S-1
(the paper's minimal perfect hash, §5.4) before the ``mod k``. Hash constructions:
:mod:`ldpstream.mechanisms.hashing`.
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
    check_int,
    draw_cohorts,
    ensure_generator,
    krr_perturb,
    population_by_cohort,
    symbol_design_matrix,
    to_value_list,
)
from ldpstream.mechanisms.base import DecoderFamily, HashedEncoding, SymbolMechanism
from ldpstream.mechanisms.krr import KRR, krr_sketch_from_true_counts
from ldpstream.mechanisms.longitudinal import Memoizing
from ldpstream.mechanisms.randomness import SECURE, Randomness
from ldpstream.mechanisms.rates import krr_channel

Candidates = Sequence[Any] | np.ndarray | None


@dataclass(frozen=True)
class ORR(Memoizing, HashedEncoding, SymbolMechanism):
    """O-RR with ``cohorts`` hash cohorts over ``k`` symbols at privacy ``epsilon``.

    The report's ε is k-RR's (the cohort is chosen independently of the value, and hashing is a
    post-processing of nothing private), so :meth:`channel` is the k×k k-RR matrix applied after
    hashing. ``support=None``: open alphabet of str/bytes values; ``support=S``: closed alphabet
    0..S-1 mapped by ``π_c(s) mod k``. ``memoize`` / ``epsilon_permanent``: how a real client (whose cohort
    is fixed) protects repeated reports (:mod:`ldpstream.mechanisms.longitudinal`); one report is this channel
    either way.
    """

    name: ClassVar[str] = "orr"
    decoder_family: ClassVar[DecoderFamily] = "candidates_symbol"
    joint_member: ClassVar[bool] = True
    discovery_refusal: ClassVar[str | None] = (
        "O-RR sends symbols, and the n-gram detection (screen, refit, test) and the final decode test bit reports")
    tuning_parameters: ClassVar[tuple[str, ...] | None] = ("k", "cohorts")
    staged_cohort_search: ClassVar[bool] = True
    #: Whether its decoders add the hash family's variance (OLH's many cohorts; here the misfit covers collisions).
    finite_family: ClassVar[bool] = False

    k: int
    epsilon: float
    cohorts: int
    support: int | None = None
    memoize: bool = True
    epsilon_permanent: float | None = None

    @classmethod
    def examples(cls) -> tuple[ORR, ...]:
        return (cls(k=4, epsilon=1.5, cohorts=3), cls(k=4, epsilon=1.5, cohorts=3, support=6))

    @classmethod
    def tuning_grid(cls, support: int, closed: bool, n: int | None = None) -> list[dict[str, int]]:
        """:func:`~ldpstream.mechanisms.tuning.symbol_grid`."""
        return tuning.symbol_grid(support, closed, n)

    def channel_input(self, value: Any, cohort: int) -> int:
        """The value's symbol in ``cohort``: ``π_c(s) mod k`` (closed) or ``HASH_c(s) mod k`` (open), the
        entry of :meth:`symbol_table`."""
        check_int("cohort", cohort, 0, self.cohorts - 1)
        if self.closed:
            assert self.support is not None
            index = int(as_index_array("value", np.asarray([value]), self.support)[0])
            return int(hashing.closed_permutation(self.support, cohort, 0)[index]) % self.k
        return hashing.orr_hash(value, cohort, self.k)

    def unit_epsilon(self, epsilon: float) -> float:
        """k-RR on the hashed symbol is the unit channel."""
        return epsilon

    @property
    def closed(self) -> bool:
        """Whether the alphabet is closed (``support`` given)."""
        return self.support is not None

    @property
    def krr(self) -> KRR:
        """The k-RR mechanism applied after hashing."""
        return KRR(self.k, self.epsilon)

    def channel(self) -> np.ndarray:
        """The k×k k-RR channel Q(y|x) applied to the hashed symbol x (row x)."""
        return krr_channel(self.k, self.epsilon)

    # -- hashing -------------------------------------------------------------------------------------

    def _closed_candidates(self, candidates: Candidates) -> np.ndarray:
        assert self.support is not None
        if candidates is None:
            return np.arange(self.support, dtype=np.int64)
        return as_index_array("candidates", candidates, self.support)

    def symbol_table(self, candidates: Candidates = None) -> np.ndarray:
        """``(C, S)`` int64: the pre-noise symbol of candidate s in cohort c.

        Open alphabet: ``HASH_c(s) mod k`` (:func:`hashing.orr_table`), ``candidates`` required.
        Closed: ``π_c(s) mod k`` (:func:`hashing.closed_permutation`); ``candidates`` defaults to
        ``range(S)`` (or give a subset of symbols).
        """
        if self.closed:
            assert self.support is not None
            cand = self._closed_candidates(candidates)
            perms = hashing.permutation_table(self.support, self.cohorts, 1)[:, :, 0]
            return perms[:, cand] % self.k
        if candidates is None:
            raise ParameterError("an open-alphabet O-RR needs a candidate list")
        return hashing.orr_table(to_value_list(candidates), self.cohorts, self.k)

    def value_table(self, candidates: Sequence[Any] | None) -> np.ndarray:
        """:meth:`symbol_table` of ``candidates`` (open alphabet) or of the whole closed alphabet."""
        return self.symbol_table(None if self.closed else candidates)

    def _table(self, candidates_or_table: Any) -> np.ndarray:
        if isinstance(candidates_or_table, np.ndarray) and candidates_or_table.ndim == 2:
            table = candidates_or_table.astype(np.int64, copy=False)
            if table.shape[0] != self.cohorts:
                raise ParameterError(f"table has {table.shape[0]} cohorts, expected {self.cohorts}")
            return table
        return self.symbol_table(candidates_or_table)

    def design_matrix(self, candidates_or_table: Any = None) -> sp.csr_matrix:
        """``(C*k, S)`` 0/1 csr: row ``c*k + y`` (cohort-major), 1 when candidate s maps to y in c.

        This is the matrix H of docs/math/mechanisms.md#o-rr, with exactly C ones per column.
        """
        return symbol_design_matrix(self._table(candidates_or_table), self.k)

    # -- encoding ------------------------------------------------------------------------------------

    def encode(self, value: Any, cohort: int | None = None) -> tuple[int, int]:
        """Privatize one value with :data:`SECURE` randomness; returns ``(cohort, symbol)``.

        The cohort is drawn uniformly (securely) unless given.
        """
        cohorts, symbols = self.encode_values([value], SECURE, cohorts=None if cohort is None else [cohort])
        return int(cohorts[0]), int(symbols[0])

    def encode_values(
        self, values: Sequence[Any], rng: Randomness, cohorts: Any = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Privatize arbitrary values (each DISTINCT value's :meth:`symbol_table` column once), then
        :meth:`encode_batch`."""
        index, distinct = hashing.value_index(to_value_list(values), self.support)
        table = None if distinct is None else self.symbol_table(distinct)
        return self.encode_batch(index, rng, cohorts=cohorts, table=table)

    def encode_batch(
        self, candidate_index: Any, rng: Randomness, cohorts: Any = None, table: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Privatize clients holding candidates ``candidate_index`` (columns of ``table``).

        ``table`` is :meth:`symbol_table` of the candidate list (default for closed alphabets: all
        symbols). Cohorts are drawn uniformly from ``rng`` unless given. Returns ``(cohorts, symbols)``
        int64 arrays: the one vectorized code path behind every encode.
        """
        if table is None:
            if not self.closed:
                raise ParameterError("an open-alphabet O-RR needs a symbol table (see symbol_table)")
            table = self.symbol_table()
        table = self._table(np.asarray(table))
        index = as_index_array("candidate_index", candidate_index, table.shape[1])
        chosen = draw_cohorts(cohorts, index.shape[0], self.cohorts, rng)
        true_symbols = table[chosen, index]
        return chosen, krr_perturb(true_symbols, self.k, self.epsilon, rng)

    def simulate_sketch(self, counts: Any, rng: np.random.Generator, table: np.ndarray | None = None) -> np.ndarray:
        """``(C, k)`` sketch of a population without materializing reports; exact in distribution.

        ``counts``: ``(S,)`` clients per candidate (cohorts drawn uniformly: a multinomial split) or
        ``(C, S)`` clients per cohort and candidate. The true-symbol counts per cohort are summed
        through ``table`` and k-RR is applied in aggregate (:func:`krr_sketch_from_true_counts`), so
        the result has the law of ``sketch(*encode_batch(...))``.
        """
        rng = ensure_generator(rng)
        if table is None:
            if not self.closed:
                raise ParameterError("an open-alphabet O-RR needs a symbol table (see symbol_table)")
            table = self.symbol_table()
        table = self._table(np.asarray(table))
        per_cohort = population_by_cohort(counts, self.cohorts, table.shape[1], rng)
        flat = (np.arange(self.cohorts, dtype=np.int64)[:, None] * self.k + table).ravel()
        true_counts = np.bincount(flat, weights=per_cohort.ravel(), minlength=self.cohorts * self.k)
        true_counts = np.rint(true_counts).astype(np.int64).reshape(self.cohorts, self.k)
        return krr_sketch_from_true_counts(true_counts, self.k, self.epsilon, rng)
