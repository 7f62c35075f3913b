"""Hadamard response (HR), Acharya, Sun, Zhang AISTATS 2019 §3, and Apple's Hadamard count-mean sketch (HCMS),
Apple Differential Privacy Team 2017 (docs/math/mechanisms.md#hadamard-response, #hcms).

Both use the Sylvester–Hadamard matrix ``H[a, y] = (−1)^{popcount(a & y)}`` of order K, a power of two.

**HR.** Value x in ``0..k-1`` owns row a = x + 1 (row 0, all ones, is skipped), so K = 2^⌈log₂(k + 1)⌉, and the
half ``C_a = {y : H[a, y] = +1}`` of the K outputs. The client reports y uniform in C_a with probability
e^ε/(e^ε + 1), uniform in its complement otherwise: P(y | x) = 2e^ε/(K(e^ε + 1)) or 2/(K(e^ε + 1)), a ratio of
at most e^ε between any two inputs (ε-LDP, tight). A report is one symbol of log₂ K bits. Since two rows
agree on half of the columns, a report of any other value falls in C_a with probability exactly 1/2, so the
number N_x of reports in C_{x+1} is Binomial(n, 1/2 + (q − 1/2) p_x), q = e^ε/(e^ε + 1): the unary form with
margin rates (q*, p*) = (q, 1/2), and N = (n + Hc)/2 for the sketch c of output counts: one fast
Walsh–Hadamard transform, O(K log K) (:func:`fwht`, :meth:`HadamardResponse.margin_sketch`). This is their
high-privacy HR: its n·ℓ2² + Σp² is k·coth²(ε/2) at every ε, about cosh²(ε/2) times subset selection's, so
the tuner never picks it; the general (blocked) HR for larger ε is not implemented (docs/math/tuning.md,
"Hadamard response and the tuner").

**HCMS.** Apple's sketch with ``cohorts`` hash functions into ``k`` = m buckets (m a power of two): a client
in cohort j hashes its value to bucket u (O-RAPPOR's one-hash Bloom bit, :mod:`ldpstream.mechanisms.hashing`),
draws a column l uniform in ``0..m-1``, and reports the sign H[u, l] flipped with probability 1/(e^ε + 1) —
one symbol 2l + b (b = 1 for +1) of 1 + log₂ m bits. Two inputs change only the sign's law: ε-LDP, tight. A
report "agrees" with bucket u when b is H[u, l]'s sign; it agrees with its own bucket with probability
e^ε/(e^ε + 1) and with any other with probability 1/2, and these agreement indicators are pairwise
independent given the bucket (products of two distinct Hadamard rows are a third one). So the agreement
counts per cohort and bucket, again one transform away, are a bit sketch with margin rates (e^ε/(e^ε + 1), 1/2)
over the one-hash Bloom design, decoded like O-RAPPOR (:meth:`HadamardCountMeanSketch.margin_sketch`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import scipy.sparse as sp

from ldpstream.errors import ParameterError
from ldpstream.mechanisms import tuning
from ldpstream.mechanisms._common import (
    as_index_array,
    bernoulli,
    check_mechanism_fields,
    draw_cohorts,
    ensure_generator,
    population_by_cohort,
    symbol_design_matrix,
)
from ldpstream.mechanisms.base import DecoderFamily, DirectEncoding, HashedEncoding, SymbolMechanism
from ldpstream.mechanisms.longitudinal import PermanentOnly
from ldpstream.mechanisms.orappor import ORappor
from ldpstream.mechanisms.randomness import SECURE, Randomness
from ldpstream.mechanisms.rates import hadamard_rates

#: Rows of a multinomial drawn at a time by the aggregate simulations (bounds memory to ~8 MB a chunk).
_ROWS_CELLS = 1 << 20


def fwht(values: Any) -> np.ndarray:
    """The Walsh–Hadamard transform ``H v`` along the last axis (length K, a power of two), natural (Sylvester)
    order ``H[a, y] = (−1)^{popcount(a & y)}``, in O(K log K): log₂ K butterfly passes, each vectorized.
    Integer input stays integer (exact)."""
    a = np.array(values)
    K = a.shape[-1]
    if K < 1 or K & (K - 1):
        raise ParameterError(f"the Walsh–Hadamard transform needs a power-of-two length, got {K}")
    lead = a.shape[:-1]
    h = 1
    while h < K:
        a = a.reshape(*lead, K // (2 * h), 2, h)
        a = np.stack((a[..., 0, :] + a[..., 1, :], a[..., 0, :] - a[..., 1, :]), axis=-2)
        h *= 2
    return a.reshape(*lead, K)


def hadamard_sign(a: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``H[a, y] == +1`` (even popcount of ``a & y``), elementwise, bool."""
    both = np.bitwise_and(np.asarray(a, dtype=np.uint64), np.asarray(y, dtype=np.uint64))
    even: np.ndarray = np.bitwise_count(both) % 2 == 0
    return even


def _multinomial_rows(counts: np.ndarray, pvals: Any, width: int, rng: np.random.Generator) -> np.ndarray:
    """Column sums of ``Multinomial(counts[i], pvals(rows))`` over the rows ``i`` with a count, in chunks;
    ``pvals(rows)`` gives the ``(len(rows), width)`` probabilities of those rows."""
    out = np.zeros(width, dtype=np.int64)
    rows = np.flatnonzero(counts)
    step = max(1, _ROWS_CELLS // width)
    for start in range(0, rows.size, step):
        chunk = rows[start:start + step]
        out += rng.multinomial(counts[chunk], pvals(chunk)).sum(axis=0)
    return out


@dataclass(frozen=True)
class HadamardResponse(PermanentOnly, DirectEncoding, SymbolMechanism):
    """HR over ``0..k-1`` at ``epsilon`` (module docstring): reports are symbols ``0..K-1``, K = 2^⌈log₂(k+1)⌉;
    the sketch is the ``(1, K)`` vector of their counts. ``memoize``: as
    :class:`~ldpstream.mechanisms.longitudinal.PermanentOnly`."""

    name: ClassVar[str] = "hr"
    cohorts: ClassVar[int] = 1  # type: ignore[misc]
    decoder_family: ClassVar[DecoderFamily] = "direct_hadamard"

    k: int
    epsilon: float
    memoize: bool = True
    epsilon_permanent: float | None = None

    def __post_init__(self) -> None:
        check_mechanism_fields(self, k_max=2**31 - 1)
        self.check_longitudinal()

    @classmethod
    def examples(cls) -> tuple[HadamardResponse, ...]:
        return (cls(k=5, epsilon=1.5),)

    def report_channel(self, table: np.ndarray | None = None) -> np.ndarray:
        """:meth:`channel` (one cohort; ``table`` ignored)."""
        return self.channel()

    @property
    def order(self) -> int:
        """K, the Hadamard order: the smallest power of two above k."""
        return 1 << int(self.k).bit_length()

    @property
    def sketch_width(self) -> int:
        """K output symbols."""
        return self.order

    @property
    def response_rates(self) -> tuple[float, float]:
        """The margins' ``(q*, p*) = (e^ε/(e^ε + 1), 1/2)`` (:func:`~ldpstream.mechanisms.rates.hadamard_rates`)."""
        return hadamard_rates(self.epsilon)

    def sketch(self, cohorts: np.ndarray, reports: np.ndarray) -> np.ndarray:
        """``(1, K)`` counts of the reported symbols."""
        reports = np.asarray(reports, dtype=np.int64)
        if reports.size and (reports.min() < 0 or reports.max() >= self.order):
            raise ParameterError(f"HR symbols must lie in 0..{self.order - 1}")
        return np.bincount(reports, minlength=self.order).reshape(1, self.order).astype(np.int64, copy=False)

    def margin_sketch(self, sketch: Any) -> np.ndarray:
        """The unary sketch ``[n, N_0, …, N_{k−1}]`` of an HR sketch: ``(K,)`` → ``(k + 1,)``, ``(..., C, K)`` →
        ``(..., C, k + 1)`` (a stack of sketches). N_x = (n + (H c)_{x+1})/2 reports fell in C_{x+1} (module
        docstring), by :func:`fwht`."""
        counts = np.asarray(sketch, dtype=np.int64)
        if counts.shape[-1] != self.order:
            raise ParameterError(f"an HR sketch has {self.order} columns, got {counts.shape[-1]}")
        n = counts.sum(axis=-1)
        out = np.empty((*counts.shape[:-1], self.k + 1), dtype=np.int64)
        out[..., 0] = n
        out[..., 1:] = (n[..., None] + fwht(counts)[..., 1:self.k + 1]) // 2
        return out

    def channel_input(self, value: Any, cohort: int) -> int:
        """The symbol itself."""
        return int(as_index_array("value", np.asarray([value]), self.k)[0])

    def privatize(self, inputs: np.ndarray, rng: Randomness) -> np.ndarray:
        """HR reports of ``(n,)`` symbols: y₀ uniform in ``0..K-1``, then, if its side of row a = x + 1 is not
        the one drawn (C_a w.p. e^ε/(e^ε + 1)), y₀ XOR (lowest set bit of a), a bijection between the halves."""
        x = np.asarray(inputs, dtype=np.int64).reshape(-1)
        n = x.shape[0]
        a = x + 1
        y0 = np.asarray(rng.integers(0, self.order, size=n), dtype=np.int64).reshape(n)
        want_in = bernoulli(self.response_rates[0], n, rng)
        low = a & -a
        return np.where(hadamard_sign(a, y0) == want_in, y0, y0 ^ low).astype(np.int64, copy=False)

    def encode(self, x: int) -> int:
        """Privatize one symbol with :data:`SECURE` randomness."""
        return int(self.encode_batch(np.asarray([x]), SECURE)[0])

    def encode_batch(self, x: Any, rng: Randomness) -> np.ndarray:
        """Privatize a batch of symbols; returns int64 symbols in ``0..K-1``."""
        return self.privatize(as_index_array("x", x, self.k), rng)

    def channel(self) -> np.ndarray:
        """The exact ``(k, K)`` channel P(y | x) (small k: tests)."""
        K, q = self.order, self.response_rates[0]
        inside = hadamard_sign(np.arange(1, self.k + 1)[:, None], np.arange(K)[None, :])
        return np.where(inside, 2 * q / K, 2 * (1 - q) / K)

    def simulate_sketch(self, counts: Any, rng: np.random.Generator, table: np.ndarray | None = None) -> np.ndarray:
        """``(1, K)`` sketch, exact in distribution: the reports of value x are ``Multinomial(counts[x], P(· | x))``,
        drawn row by row for the values present (O(k·K)); ``table`` is ignored."""
        rng = ensure_generator(rng)
        true_counts = population_by_cohort(counts, 1, self.k, rng)[0]
        K, q = self.order, self.response_rates[0]
        cols = np.arange(K)

        def pvals(rows: np.ndarray) -> np.ndarray:
            inside = hadamard_sign((rows + 1)[:, None], cols[None, :])
            return np.where(inside, 2 * q / K, 2 * (1 - q) / K)

        return _multinomial_rows(true_counts, pvals, K, rng).reshape(1, K)


@dataclass(frozen=True)
class HadamardCountMeanSketch(PermanentOnly, HashedEncoding, SymbolMechanism):
    """HCMS with ``cohorts`` hash functions into ``k`` buckets (a power of two) at ``epsilon`` (module
    docstring); ``support=S`` for a closed alphabet 0..S-1 (hashes are O-RAPPOR's one-hash permutations), else
    str/bytes values. Reports are symbols ``2l + b`` in ``0..2k-1``; the sketch is ``(C, 2k)``."""

    name: ClassVar[str] = "hcms"
    decoder_family: ClassVar[DecoderFamily] = "candidates_hadamard"
    tuning_parameters: ClassVar[tuple[str, ...] | None] = ("k", "cohorts")
    fixed_parameters: ClassVar[tuple[tuple[str, int], ...]] = (("hashes", 1),)

    k: int
    epsilon: float
    cohorts: int
    support: int | None = None
    memoize: bool = True
    epsilon_permanent: float | None = None

    @classmethod
    def examples(cls) -> tuple[HadamardCountMeanSketch, ...]:
        return (cls(k=4, epsilon=1.5, cohorts=2), cls(k=4, epsilon=1.5, cohorts=3, support=6))

    @classmethod
    def tuning_grid(cls, support: int, closed: bool, n: int | None = None) -> list[dict[str, int]]:
        """:func:`~ldpstream.mechanisms.tuning.bloom_grid` with one hash (the cohorts are the hash functions)."""
        return tuning.bloom_grid(support, closed, n, (1,))

    def hashing_twin(self) -> ORappor:
        """:attr:`hashing`: its buckets are that O-RAPPOR's one-hash Bloom bits."""
        return self.hashing

    def table_of_twin(self, table: np.ndarray) -> np.ndarray:
        """The ``(C, S)`` buckets: the one bit of each ``(C, S, 1)`` Bloom filter."""
        return np.ascontiguousarray(table[:, :, 0])

    def report_channel(self, table: np.ndarray | None = None) -> np.ndarray:
        """P((c, 2l + b) | s) = (1/C)(1/k)(e^ε/(e^ε + 1) when b is the sign of H[u, l] for s's bucket u in c, else
        1/(e^ε + 1))."""
        buckets = self._table(table)
        q = self.response_rates[0]
        S = buckets.shape[1]
        plus = hadamard_sign(buckets[:, :, None], np.arange(self.k)[None, None, :])  # (C, S, k)
        out = np.empty((self.cohorts, S, self.k, 2))
        out[..., 1] = np.where(plus, q, 1 - q)
        out[..., 0] = np.where(plus, 1 - q, q)
        return (out / (self.cohorts * self.k)).transpose(1, 0, 2, 3).reshape(S, self.cohorts * 2 * self.k)

    def __post_init__(self) -> None:
        check_mechanism_fields(self, k_max=2**30)
        if self.k & (self.k - 1):
            raise ParameterError(f"hcms: k (buckets) must be a power of two, got {self.k}")
        self.check_longitudinal()

    @property
    def closed(self) -> bool:
        return self.support is not None

    @property
    def hashing(self) -> ORappor:
        """The one-hash Bloom construction whose bit is the bucket (same hashes as O-RAPPOR with h = 1)."""
        return ORappor(k=self.k, epsilon=self.epsilon, cohorts=self.cohorts, hashes=1, support=self.support)

    @property
    def sketch_width(self) -> int:
        """2k: a column l and a sign b."""
        return 2 * self.k

    @property
    def response_rates(self) -> tuple[float, float]:
        """The agreement margins' ``(e^ε/(e^ε + 1), 1/2)``."""
        return hadamard_rates(self.epsilon)

    @property
    def q_star(self) -> float:
        return self.response_rates[0]

    @property
    def p_star(self) -> float:
        return self.response_rates[1]

    def sketch(self, cohorts: np.ndarray, reports: np.ndarray) -> np.ndarray:
        cohorts = np.asarray(cohorts, dtype=np.int64)
        reports = np.asarray(reports, dtype=np.int64)
        w = self.sketch_width
        flat = np.bincount(cohorts * w + reports, minlength=self.cohorts * w)
        return flat.reshape(self.cohorts, w).astype(np.int64, copy=False)

    def margin_sketch(self, sketch: Any) -> np.ndarray:
        """The ``(..., C, k + 1)`` bit sketch of agreement counts of a ``(..., C, 2k)`` HCMS sketch: column 0 the
        cohort's reports, column 1 + u the reports that agree with bucket u, ``(n_c + H(c⁺ − c⁻))/2`` by
        :func:`fwht` (module docstring)."""
        arr = np.asarray(sketch, dtype=np.int64)
        if arr.shape[-1] != 2 * self.k:
            raise ParameterError(f"an HCMS sketch has {2 * self.k} columns, got {arr.shape[-1]}")
        pairs = arr.reshape(*arr.shape[:-1], self.k, 2)
        n = arr.sum(axis=-1)
        out = np.empty((*arr.shape[:-1], self.k + 1), dtype=np.int64)
        out[..., 0] = n
        out[..., 1:] = (n[..., None] + fwht(pairs[..., 1] - pairs[..., 0])) // 2
        return out

    def channel_input(self, value: Any, cohort: int) -> int:
        """The value's bucket in ``cohort``."""
        return int(np.argmax(self.hashing.channel_input(value, cohort)))

    def bucket_table(self, candidates: Sequence[Any] | None = None) -> np.ndarray:
        """``(C, S)`` buckets of the candidates (closed: of ``0..S-1`` by default)."""
        return self.hashing.bloom_table(candidates)[:, :, 0]

    def value_table(self, candidates: Sequence[Any] | None) -> np.ndarray:
        return self.bucket_table(None if self.closed else candidates)

    def _table(self, candidates_or_table: Any) -> np.ndarray:
        if isinstance(candidates_or_table, np.ndarray) and candidates_or_table.ndim == 2:
            table = candidates_or_table.astype(np.int64, copy=False)
            if table.shape[0] != self.cohorts or (table.size and (table.min() < 0 or table.max() >= self.k)):
                raise ParameterError(f"bucket table must be ({self.cohorts}, S) with buckets in 0..{self.k - 1}")
            return table
        if candidates_or_table is None and not self.closed:
            raise ParameterError("an open-alphabet HCMS needs a candidate list or bucket table")
        return self.bucket_table(candidates_or_table)

    def design_matrix(self, candidates_or_table: Any = None) -> sp.csr_matrix:
        """``(C·k, S)`` 0/1 csr, row ``c·k + u``: 1 where the candidate hashes to bucket u in cohort c (the
        design of the agreement sketch, :meth:`margin_sketch`)."""
        return symbol_design_matrix(self._table(candidates_or_table), self.k)

    def privatize(self, inputs: np.ndarray, rng: Randomness) -> np.ndarray:
        """Reports ``2l + b`` of ``(n,)`` buckets: l uniform, b the sign H[u, l] kept w.p. e^ε/(e^ε + 1)."""
        u = np.asarray(inputs, dtype=np.int64).reshape(-1)
        n = u.shape[0]
        col = np.asarray(rng.integers(0, self.k, size=n), dtype=np.int64).reshape(n)
        keep = bernoulli(self.q_star, n, rng)
        sign = (hadamard_sign(u, col) == keep).astype(np.int64)
        symbols: np.ndarray = 2 * col + sign
        return symbols

    def encode(self, value: Any, cohort: int | None = None) -> tuple[int, int]:
        """``(cohort, symbol)`` of one value with :data:`SECURE` randomness (a uniform cohort unless given)."""
        chosen = draw_cohorts(None if cohort is None else [cohort], 1, self.cohorts, SECURE)
        return int(chosen[0]), int(self.privatize(np.asarray([self.channel_input(value, int(chosen[0]))]), SECURE)[0])

    def encode_batch(
        self, candidate_index: Any, rng: Randomness, cohorts: Any = None, table: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(cohorts, symbols)`` of clients holding the candidates ``candidate_index`` of ``table`` (a
        :meth:`bucket_table`; default for closed alphabets: all symbols)."""
        buckets = self._table(None if table is None else np.asarray(table))
        index = as_index_array("candidate_index", candidate_index, buckets.shape[1])
        chosen = draw_cohorts(cohorts, index.shape[0], self.cohorts, rng)
        return chosen, self.privatize(buckets[chosen, index], rng)

    def simulate_sketch(self, counts: Any, rng: np.random.Generator, table: np.ndarray | None = None) -> np.ndarray:
        """``(C, 2k)`` sketch, exact in distribution. A report's law given its bucket u is a mixture: with
        probability 2q − 1 it is (l uniform, the sign H[u, l]); otherwise uniform over all 2k symbols (then
        P(sign = H[u, l]) = 2q − 1 + (2 − 2q)/2 = q, as the channel says). So per cohort and bucket
        Binomial(T_cu, 2q − 1) clients are informative; the others are one Multinomial over the 2k symbols per
        cohort; the informative ones draw their columns one by one (vectorized, O(n)) when there are fewer of
        them than (bucket, column) cells, else as one Multinomial over the k columns per bucket (O(C·k²))."""
        rng = ensure_generator(rng)
        buckets = self._table(None if table is None else np.asarray(table))
        per_cohort = population_by_cohort(counts, self.cohorts, buckets.shape[1], rng)
        q, m, C = self.q_star, self.k, self.cohorts
        true = np.stack([np.rint(np.bincount(buckets[c], weights=per_cohort[c], minlength=m)).astype(np.int64)
                         for c in range(C)])
        informative = rng.binomial(true, 2.0 * q - 1.0)
        out = rng.multinomial(true.sum(axis=1) - informative.sum(axis=1), np.full(2 * m, 1.0 / (2 * m)))
        out = np.asarray(out, dtype=np.int64).reshape(C, 2 * m)
        rows, us = np.nonzero(informative)
        if informative.sum() <= rows.size * m:
            per = informative[rows, us]
            step = max(1, _ROWS_CELLS // 4)
            cohort_of, bucket_of = np.repeat(rows, per), np.repeat(us, per)
            for start in range(0, cohort_of.size, step):
                c, u = cohort_of[start:start + step], bucket_of[start:start + step]
                col = np.asarray(rng.integers(0, m, size=c.size), dtype=np.int64)
                symbol = 2 * col + hadamard_sign(u, col)
                out += np.bincount(c * 2 * m + symbol, minlength=C * 2 * m).reshape(C, 2 * m)
            return out
        cols = np.arange(m)
        step = max(1, _ROWS_CELLS // m)
        for start in range(0, rows.size, step):
            r, u = rows[start:start + step], us[start:start + step]
            drawn = rng.multinomial(informative[r, u], np.full(m, 1.0 / m))  # (rows, m) columns per bucket
            plus = hadamard_sign(u[:, None], cols[None, :])
            np.add.at(out[:, 1::2], r, np.where(plus, drawn, 0))
            np.add.at(out[:, 0::2], r, np.where(plus, 0, drawn))
        return out
