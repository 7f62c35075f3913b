"""Shared validation and vectorized sampling helpers for the mechanisms (internal).

Everything here draws through a :class:`~ldpstream.mechanisms.randomness.Randomness` source (``random``
and ``integers`` only), so the same code path runs with :data:`~ldpstream.mechanisms.randomness.SECURE`
on a real client and with a seeded :class:`numpy.random.Generator` in simulations.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import numbers
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np
import scipy.sparse as sp

from ldpstream.errors import ParameterError
from ldpstream.mechanisms.randomness import KeyedRandomness, Randomness, uniform_bytes
from ldpstream.mechanisms.rates import krr_keep_probability

#: Permanent responses one client keeps in memory per metric. They are derived from its secret, so the least
#: recently used one is evicted past this bound and recomputed identically when its input returns.
MEMO_CAPACITY = 4096

#: Largest cohort count: cohorts are hashed as big-endian uint32 (Google's RAPPOR convention).
MAX_COHORTS = 2**32


def check_int(name: str, value: Any, minimum: int, maximum: int | None = None) -> int:
    """Return ``value`` as a Python int after checking it is an integer in ``[minimum, maximum]``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ParameterError(f"{name} must be an integer, got {value!r} ({type(value).__name__})")
    checked = int(value)
    if checked < minimum or (maximum is not None and checked > maximum):
        bound = f"[{minimum}, {maximum}]" if maximum is not None else f">= {minimum}"
        raise ParameterError(f"{name} must be {bound}, got {checked}")
    return checked


def check_epsilon(value: Any, name: str = "epsilon") -> float:
    """Return ε as a float after checking it is a finite positive real number."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ParameterError(f"{name} must be a real number, got {value!r} ({type(value).__name__})")
    checked = float(value)
    if not math.isfinite(checked) or checked <= 0.0:
        raise ParameterError(f"{name} must be finite and > 0, got {checked}")
    return checked


def check_probability(name: str, value: Any, *, allow_one: bool = True) -> float:
    """Return a probability as a float after checking it lies in [0, 1] (or [0, 1))."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ParameterError(f"{name} must be a real number, got {value!r} ({type(value).__name__})")
    checked = float(value)
    upper_ok = checked <= 1.0 if allow_one else checked < 1.0
    if not (checked >= 0.0 and upper_ok):
        raise ParameterError(f"{name} must be in [0, 1{']' if allow_one else ')'}, got {checked}")
    return checked


def check_mechanism_fields(mechanism: Any, k_max: int | None = None) -> None:
    """Check and normalize, in place, the fields that the ε-parametrized mechanisms share, those the dataclass
    declares, in this order: ``k`` (an integer in [2, k_max]), ``epsilon`` (finite, > 0), ``cohorts``
    (1..:data:`MAX_COHORTS`), ``hashes`` (1..k) and ``support`` (>= 1, unless None).

    The mechanisms are frozen dataclasses, so the checked values are set with ``object.__setattr__``. Their own
    fields, and ``memoize`` / ``epsilon_permanent``
    (:meth:`~ldpstream.mechanisms.longitudinal.Memoizing.check_longitudinal`), the caller checks.
    """
    declared = {f.name for f in dataclasses.fields(mechanism)}
    object.__setattr__(mechanism, "k", check_int("k", mechanism.k, 2, k_max))
    object.__setattr__(mechanism, "epsilon", check_epsilon(mechanism.epsilon))
    if "cohorts" in declared:
        object.__setattr__(mechanism, "cohorts", check_int("cohorts", mechanism.cohorts, 1, MAX_COHORTS))
    if "hashes" in declared:
        object.__setattr__(mechanism, "hashes", check_int("hashes", mechanism.hashes, 1, mechanism.k))
    if "support" in declared and mechanism.support is not None:
        object.__setattr__(mechanism, "support", check_int("support", mechanism.support, 1))


def as_index_array(name: str, values: Any, upper: int) -> np.ndarray:
    """``values`` as a 1-D int64 array with every entry in ``0..upper-1`` (vectorized check)."""
    arr = np.asarray(values)
    if arr.ndim == 0:
        arr = arr.reshape(1)
    if arr.ndim != 1:
        raise ParameterError(f"{name} must be one-dimensional, got shape {arr.shape}")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise ParameterError(f"{name} must hold integers, got dtype {arr.dtype}")
    arr = arr.astype(np.int64, copy=False)
    if arr.size and (arr.min() < 0 or arr.max() >= upper):
        # The values are what clients privatize: never quote them (error texts end up in logs).
        outside = int(np.count_nonzero((arr < 0) | (arr >= upper)))
        raise ParameterError(f"{name} must lie in 0..{upper - 1}; {outside} of {arr.size} value(s) do not")
    return arr


def one_hot_input(value: Any, k: int) -> np.ndarray:
    """The one-hot ``(k,)`` bool vector of a symbol ``value`` in ``0..k-1`` (checked): the channel input of the
    unary mechanisms (k-RAPPOR, OUE, subset selection)."""
    bits = np.zeros(k, dtype=bool)
    bits[as_index_array("value", np.asarray([value]), k)[0]] = True
    return bits


def draw_cohorts(cohorts: Any, n: int, num_cohorts: int, rng: Randomness) -> np.ndarray:
    """The given cohorts (validated, broadcast to ``n``) or ``n`` uniform draws from ``0..C-1``."""
    if cohorts is None:
        if num_cohorts == 1:
            return np.zeros(n, dtype=np.int64)
        return np.asarray(rng.integers(0, num_cohorts, size=n), dtype=np.int64).reshape(n)
    arr = as_index_array("cohorts", cohorts, num_cohorts)
    if arr.size == 1 and n != 1:
        arr = np.full(n, arr[0], dtype=np.int64)
    if arr.size != n:
        raise ParameterError(f"cohorts has {arr.size} entries for {n} values")
    return arr


def krr_perturb(symbols: np.ndarray, k: int, epsilon: float, rng: Randomness) -> np.ndarray:
    """Apply k-RR to a vector of true symbols: keep w.p. e^ε/(e^ε+k−1), else a uniform *other* symbol.

    The other symbol is ``(x + U) mod k`` with ``U`` uniform on ``1..k-1``, so each y ≠ x has
    probability (1 − keep)/(k − 1) = 1/(e^ε + k − 1), exactly the channel of docs/math/mechanisms.md#k-rr.
    """
    n = symbols.shape[0]
    keep = np.asarray(rng.random(n)).reshape(n) < krr_keep_probability(k, epsilon)
    shift = np.asarray(rng.integers(1, k, size=n), dtype=np.int64).reshape(n)
    return np.where(keep, symbols, (symbols + shift) % k).astype(np.int64, copy=False)


#: Bits per chunk of :func:`perturb_bits`: bounds memory for large batches.
_PERTURB_CHUNK = 1 << 24

#: Draws per slice of :func:`bernoulli` (256 KiB of random bytes: fits the L2 cache).
_BERNOULLI_SLICE = 1 << 18


@functools.lru_cache(maxsize=256)
def base256_digits(probability: float) -> tuple[int, ...]:
    """The exact base-256 expansion of a float in [0, 1] (it terminates: a float is a dyadic rational).

    1.0 expands to the single digit 256, which every byte is below: the draw is then always True.
    """
    remainder = Fraction(probability)
    digits = []
    while remainder > 0:
        remainder *= 256
        digit = int(remainder)
        digits.append(digit)
        remainder -= digit
    return tuple(digits)


def bernoulli(probability: float, count: int, rng: Randomness, out: np.ndarray | None = None) -> np.ndarray:
    """``count`` independent draws that are True with probability exactly ``probability``.

    Compares u = 0.b₁b₂b₃… (base 256, one uniform random byte per digit) with p's exact base-256 digits
    d₁d₂…: the draw is True iff u < p. A byte settles the comparison unless it ties its digit, so one byte
    per draw suffices but for a 1/256 fraction that draws a second, and so on; when p's expansion ends
    while u still ties, u ≥ p. P(u < p) = p exactly, and it costs about one random byte per draw (8 times
    less randomness than a float64 uniform). ``out``: a contiguous ``(count,)`` bool array to write into.

    Large counts are drawn in slices of :data:`_BERNOULLI_SLICE` draws that stay in the CPU cache (about four
    times faster than one pass over megabytes); the law is the same, the draws being independent. A
    :class:`~ldpstream.mechanisms.randomness.KeyedRandomness` stream is consumed in one pass, so a memoized
    permanent response does not depend on the slice size.
    """
    digits = base256_digits(probability)
    if out is None:
        out = np.empty(count, dtype=bool)
    if not digits:
        out[...] = False
        return out
    step = count if isinstance(rng, KeyedRandomness) else _BERNOULLI_SLICE
    for start in range(0, count, max(step, 1)):
        _bernoulli_into(digits, out[start:start + step], rng)
    return out


def _bernoulli_into(digits: tuple[int, ...], out: np.ndarray, rng: Randomness) -> None:
    """:func:`bernoulli`'s comparison of uniform bytes with ``digits``, written into all of ``out``."""
    first = uniform_bytes(rng, out.size)
    np.less(first, digits[0], out=out)
    pending = np.flatnonzero(first == digits[0])
    for digit in digits[1:]:
        if pending.size == 0:
            break
        drawn = uniform_bytes(rng, pending.size)
        out[pending[drawn < digit]] = True
        pending = pending[drawn == digit]


def perturb_bits(true_bits: np.ndarray, q_star: float, p_star: float, rng: Randomness) -> np.ndarray:
    """Independent per-bit randomized response: P(1 | true 1) = q*, P(1 | true 0) = p*.

    Every bit is first drawn as Bernoulli(p*); the true ones are then redrawn as Bernoulli(q*) (exact
    draws, :func:`bernoulli`), chunk by chunk.
    """
    true_bits = np.asarray(true_bits, dtype=bool)
    out = np.empty(true_bits.shape, dtype=bool)
    width = max(1, int(np.prod(true_bits.shape[1:])))
    rows = max(1, _PERTURB_CHUNK // width)
    for start in range(0, true_bits.shape[0], rows):
        truth = true_bits[start:start + rows]
        chunk = out[start:start + rows]
        chunk[...] = bernoulli(p_star, truth.size, rng).reshape(truth.shape)
        ones = np.flatnonzero(truth)
        chunk.reshape(-1)[ones] = bernoulli(q_star, ones.size, rng)
    return out


def ensure_generator(rng: Any) -> np.random.Generator:
    """Aggregate simulation needs binomial/multinomial draws: only a numpy Generator has them."""
    if not isinstance(rng, np.random.Generator):
        raise ParameterError(
            f"simulate_sketch needs a numpy.random.Generator (np.random.default_rng(seed)); got {type(rng).__name__}"
        )
    return rng


def population_by_cohort(counts: Any, num_cohorts: int, width: int, rng: np.random.Generator) -> np.ndarray:
    """Per-cohort counts ``(C, width)`` from ``counts``.

    ``counts`` is either ``(width,)`` (clients per candidate; each client's cohort is drawn uniformly,
    i.e. a multinomial split of every candidate's count over the C cohorts) or ``(C, width)`` (cohort
    assignment given).
    """
    arr = np.asarray(counts)
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise ParameterError(f"counts must hold integers, got dtype {arr.dtype}")
    arr = arr.astype(np.int64, copy=False)
    if arr.size and arr.min() < 0:
        raise ParameterError("counts must be non-negative")
    if arr.ndim == 1:
        if arr.shape[0] != width:
            raise ParameterError(f"counts has {arr.shape[0]} entries, expected {width}")
        if num_cohorts == 1:
            return arr.reshape(1, width).copy()
        split = rng.multinomial(arr, np.full(num_cohorts, 1.0 / num_cohorts))  # (width, C)
        return np.ascontiguousarray(split.T).astype(np.int64, copy=False)
    if arr.ndim == 2 and arr.shape == (num_cohorts, width):
        return arr.copy()
    raise ParameterError(f"counts must have shape ({width},) or ({num_cohorts}, {width}), got {arr.shape}")


def distinct_bit_rows(bloom_table: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Flatten a ``(C, S, h)`` table of bit indices into (cohort, candidate, bit) triples with the
    duplicates inside one Bloom filter (two hashes landing on the same bit) removed."""
    C, S, _ = bloom_table.shape
    bits = np.sort(bloom_table, axis=2)
    keep = np.ones_like(bits, dtype=bool)
    keep[:, :, 1:] = bits[:, :, 1:] != bits[:, :, :-1]
    c_idx = np.broadcast_to(np.arange(C)[:, None, None], bits.shape)
    s_idx = np.broadcast_to(np.arange(S)[None, :, None], bits.shape)
    return c_idx[keep], s_idx[keep], bits[keep]


def bloom_design_matrix(bloom_table: np.ndarray, k: int) -> sp.csr_matrix:
    """``(C*k, S)`` 0/1 csr: row ``c*k + bit``, column ``s``; 1 when candidate s sets the bit in cohort c."""
    C, S, _ = bloom_table.shape
    c_idx, s_idx, bits = distinct_bit_rows(bloom_table, k)
    data = np.ones(bits.shape[0], dtype=np.float64)
    return sp.csr_matrix((data, (c_idx * k + bits, s_idx)), shape=(C * k, S))


def symbol_design_matrix(table: np.ndarray, k: int) -> sp.csr_matrix:
    """``(C*k, S)`` 0/1 csr: row ``c*k + y``, column ``s``; 1 when candidate s hashes to y in cohort c."""
    C, S = table.shape
    rows = (np.arange(C, dtype=np.int64)[:, None] * k + table).ravel()
    cols = np.broadcast_to(np.arange(S, dtype=np.int64)[None, :], (C, S)).ravel()
    return sp.csr_matrix((np.ones(rows.shape[0]), (rows, cols)), shape=(C * k, S))


def bits_from_table(table_rows: np.ndarray, k: int) -> np.ndarray:
    """``(n, h)`` bit indices → ``(n, k)`` bool Bloom filters."""
    n = table_rows.shape[0]
    out = np.zeros((n, k), dtype=bool)
    out[np.arange(n)[:, None], table_rows] = True
    return out


def bit_sketch_from_true_counts(
    true_counts: np.ndarray, totals: np.ndarray, q_star: float, p_star: float, rng: np.random.Generator
) -> np.ndarray:
    """``(C, k+1)`` sketch given, per cohort, the number of clients whose true bit j is set.

    Given the true bits, report bits are independent Bernoulli(q*) or Bernoulli(p*), so the count of
    reports with bit j set is Binomial(T_j, q*) + Binomial(N − T_j, p*): exact in distribution.
    """
    C, k = true_counts.shape
    out = np.empty((C, k + 1), dtype=np.int64)
    out[:, 0] = totals
    ones = rng.binomial(true_counts, q_star)
    zeros = rng.binomial(totals[:, None] - true_counts, p_star)
    out[:, 1:] = ones + zeros
    return out


def to_value_list(values: Sequence[Any] | Any) -> list[Any]:
    """A list of values (a single str/bytes is one value, not a sequence of characters)."""
    if isinstance(values, str | bytes):
        return [values]
    return list(values)
