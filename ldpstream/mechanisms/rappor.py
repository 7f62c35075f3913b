"""RAPPOR (Erlingsson, Pihur, Korolova 2014), compatible with Google's reference client
(docs/math/mechanisms.md#rappor).

A client in cohort c encodes a value v as:

1. Bloom filter B of k bits with h hashes: ``d = MD5(be32(c) ‖ v)``, hash i sets bit ``d[i] mod k``
   (:func:`ldpstream.mechanisms.hashing.bloom_bits`; documented extension when k > 256 or h > 16).
2. Permanent randomized response (PRR), memoized per client and value: B'_i = 1 w.p. f/2, 0 w.p. f/2,
   B_i w.p. 1 − f.
3. Instantaneous randomized response (IRR), every report: S_i = 1 w.p. q if B'_i = 1, p if B'_i = 0.

Per-report rates q* = (1 − f/2) q + (f/2) p and p* = (1 − f/2) p + (f/2) q; one report is ε_1-LDP with
ε_1 = h ln(q*(1 − p*)/(p*(1 − q*))), all reports of one value by one client ε_∞-LDP with
ε_∞ = 2h ln((1 − f/2)/(f/2)). Bit i of a report is the integer bit ``2**i``; :func:`bit_string` prints the
most significant bit first, like Google's ``bit_string``.

Deterministic PRR (:class:`RapporClient`; docs/math/mechanisms.md#deterministic-prr-and-reports-longer-than-32-bits),
as Google's Python client (``client/python/rappor.py``: ``Encoder._internal_encode_bits``, ``get_prr_masks``):

- ``message = be32(bloom)`` (the Bloom filter as an integer, bit i = 2**i, 4 bytes big-endian);
- ``digest = HMAC-SHA256(key=secret, msg=message)``; for bit i < k, ``byte = digest[i]``,
  ``uniform_i = byte & 0x01``, ``f_mask_i = (byte >> 1) < f * 128``;
- ``PRR = (bloom & ~f_mask) | (uniform & f_mask)``.

``128 f`` must be an integer (then P(f_mask_i) = f). **Extension** for k > 32 (ours, stable):
``message = bloom.to_bytes(ceil(k/8), "big")`` and digest bytes beyond the first 32 come from
``HMAC-SHA256(secret, message ‖ be32(j))`` for j = 1, 2, ..., concatenated; for k <= 32 it is Google's.
Pinned vectors: ``tests/unit/mechanisms/test_rappor.py``.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import struct
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import scipy.sparse as sp

from ldpstream.errors import ParameterError
from ldpstream.mechanisms import hashing
from ldpstream.mechanisms._common import (
    MAX_COHORTS,
    MEMO_CAPACITY,
    as_index_array,
    bit_sketch_from_true_counts,
    bits_from_table,
    bloom_design_matrix,
    check_epsilon,
    check_int,
    check_probability,
    draw_cohorts,
    ensure_generator,
    perturb_bits,
    population_by_cohort,
    to_value_list,
)
from ldpstream.mechanisms.base import AlphabetKind, BitMechanism, DecoderFamily, HashedEncoding
from ldpstream.mechanisms.orappor import check_bloom_table, true_bit_counts
from ldpstream.mechanisms.randomness import SECURE, Randomness
from ldpstream.mechanisms.rates import rappor_rates

#: Google's PRR reads one HMAC-SHA256 byte per bit from one 4-byte message: k <= 32.
GOOGLE_MAX_PRR_BITS = 32


def bits_to_int(bits: Any) -> int:
    """``(k,)`` 0/1 vector → integer with bit i = 2**i."""
    arr = np.asarray(bits, dtype=bool).ravel()
    return int(sum(1 << int(i) for i in np.flatnonzero(arr)))


def int_to_bits(value: int, k: int) -> np.ndarray:
    """Integer (bit i = 2**i) → ``(k,)`` bool vector."""
    if value < 0 or value >> k:
        raise ParameterError(f"{value} does not fit in {k} bits")
    return np.array([(value >> i) & 1 for i in range(k)], dtype=bool)


def bit_string(value: int | np.ndarray, k: int) -> str:
    """Bits as a string, most significant (bit k−1) first, like Google's ``bit_string``."""
    if isinstance(value, np.ndarray):
        value = bits_to_int(value)
    return format(int(value), f"0{k}b") if k else ""


def prr_message(bloom: int, k: int) -> bytes:
    """The HMAC message for a Bloom filter: ``be32(bloom)`` for k <= 32 (Google), else
    ``bloom.to_bytes(ceil(k/8), "big")`` (extension)."""
    if k <= GOOGLE_MAX_PRR_BITS:
        return struct.pack(">I", bloom)
    return bloom.to_bytes(-(-k // 8), "big")


def prr_digest_bytes(secret: bytes, message: bytes, num_bytes: int) -> bytes:
    """``num_bytes`` pseudo-random bytes: ``HMAC-SHA256(secret, message)`` (Google) followed, when more
    than 32 are needed, by ``HMAC-SHA256(secret, message ‖ be32(j))`` for j = 1, 2, ... (extension)."""
    out = hmac.new(secret, message, hashlib.sha256).digest()
    j = 1
    while len(out) < num_bytes:
        out += hmac.new(secret, message + struct.pack(">I", j), hashlib.sha256).digest()
        j += 1
    return out[:num_bytes]


def get_prr_masks(secret: bytes, message: bytes, prob_f: float, num_bits: int) -> tuple[int, int]:
    """Google's ``get_prr_masks``: ``(uniform, f_mask)`` integers from the HMAC digest bytes.

    For bit i: ``byte = digest[i]``, ``uniform`` bit = ``byte & 1``, ``f_mask`` bit =
    ``(byte >> 1) < prob_f * 128``.
    """
    digest = np.frombuffer(prr_digest_bytes(secret, message, num_bits), dtype=np.uint8)
    uniform = bits_to_int(digest & 1)
    f_mask = bits_to_int((digest >> 1) < prob_f * 128)
    return uniform, f_mask


@dataclass(frozen=True)
class Rappor(HashedEncoding, BitMechanism):
    """RAPPOR parameters and its one-report channel (Google's ``params.csv``: k, h, m, p, q, f).

    ``k`` Bloom bits, ``hashes`` (h), ``cohorts`` (m in Google's files), IRR probabilities ``p``, ``q``
    and PRR probability ``f``. The mechanism-level :meth:`encode` / :meth:`encode_batch` simulate
    *fresh* clients (PRR drawn anew each time: exact in law for one report per client); a real client
    that reports repeatedly must use :class:`RapporClient`, whose memoized PRR bounds ε_∞.
    """

    name: ClassVar[str] = "rappor"
    decoder_family: ClassVar[DecoderFamily] = "candidates_bits"
    alphabet: ClassVar[AlphabetKind] = "open"
    joint_member: ClassVar[bool] = True
    discovery_carrier: ClassVar[bool] = True
    discovery_options: ClassVar[tuple[str, ...]] = ("f",)

    k: int
    hashes: int
    cohorts: int
    p: float
    q: float
    f: float

    @classmethod
    def discovery_report(cls, epsilon: float, k: int, hashes: int, cohorts: int, **options: float) -> Rappor:
        """RAPPOR with ε_1 = 2h·ln(q/p) = ``epsilon`` at f = 0: q = e^{ε/(2h)}/(1 + e^{ε/(2h)}), p = 1 − q; a
        permanent layer ``f`` > 0 (default 0) only adds noise and bounds repeated reports by ε∞."""
        q = 1.0 / (1.0 + math.exp(-check_epsilon(epsilon) / (2.0 * hashes)))
        return cls(k=k, hashes=hashes, cohorts=cohorts, p=1.0 - q, q=q, f=float(options.get("f", 0.0)))

    @classmethod
    def examples(cls) -> tuple[Rappor, ...]:
        return (cls(k=6, hashes=2, cohorts=2, p=0.25, q=0.75, f=0.5),)

    def __post_init__(self) -> None:
        object.__setattr__(self, "k", check_int("k", self.k, 1))
        object.__setattr__(self, "hashes", check_int("hashes", self.hashes, 1))
        object.__setattr__(self, "cohorts", check_int("cohorts", self.cohorts, 1, MAX_COHORTS))
        object.__setattr__(self, "p", check_probability("p", self.p))
        object.__setattr__(self, "q", check_probability("q", self.q))
        object.__setattr__(self, "f", check_probability("f", self.f, allow_one=False))
        if not self.q > self.p:
            raise ParameterError(f"q must exceed p (else reports carry no signal), got p={self.p}, q={self.q}")

    def parameters(self) -> dict[str, int | float | str | bool]:
        return {
            "mechanism": self.name,
            "k": self.k,
            "hashes": self.hashes,
            "cohorts": self.cohorts,
            "p": self.p,
            "q": self.q,
            "f": self.f,
        }

    @property
    def persistence_rates(self) -> tuple[float, float, float, float]:
        """``(1 − f/2, f/2, q, p)``: the rates of a bit's permanent response and of the instantaneous layer on it
        (:func:`ldpstream.estimators.windows.persistence_rates`)."""
        half = float(self.f) / 2.0
        return 1.0 - half, half, float(self.q), float(self.p)

    @property
    def q_star(self) -> float:
        """q* = (1 − f/2) q + (f/2) p."""
        return rappor_rates(self.p, self.q, self.f)[0]

    @property
    def p_star(self) -> float:
        """p* = (1 − f/2) p + (f/2) q."""
        return rappor_rates(self.p, self.q, self.f)[1]

    @property
    def epsilon(self) -> float:  # type: ignore[override]
        """ε_1 = h ln(q*(1 − p*)/(p*(1 − q*))); infinite when p* = 0 or q* = 1."""
        qs, ps = self.q_star, self.p_star
        if ps <= 0.0 or qs >= 1.0:
            return math.inf
        return self.hashes * math.log(qs * (1.0 - ps) / (ps * (1.0 - qs)))

    @property
    def epsilon_inf(self) -> float:
        """ε_∞ = 2h ln((1 − f/2)/(f/2)); infinite when f = 0."""
        if self.f == 0.0:
            return math.inf
        return 2.0 * self.hashes * math.log((1.0 - self.f / 2.0) / (self.f / 2.0))

    @property
    def stateful_client(self) -> bool:
        """A RAPPOR client memoizes its PRR (:class:`RapporClient`)."""
        return True

    # -- hashing -------------------------------------------------------------------------------------

    def bloom_bits(self, value: Any, cohort: int) -> list[int]:
        """The h bit indices (with repeats) of ``value`` in ``cohort`` (Google's ``get_bloom_bits``)."""
        check_int("cohort", cohort, 0, self.cohorts - 1)
        return hashing.bloom_bits(value, cohort, self.hashes, self.k)

    def bloom_table(self, candidates: Sequence[Any]) -> np.ndarray:
        """``(C, S, h)`` int64 bit indices of each candidate in each cohort (cohort 0..C-1)."""
        return hashing.bloom_table(to_value_list(candidates), self.cohorts, self.hashes, self.k)

    def value_table(self, candidates: Sequence[Any] | None) -> np.ndarray:
        """:meth:`bloom_table` of ``candidates`` (RAPPOR's alphabet is open: a candidate list is required)."""
        if candidates is None:
            raise ParameterError("RAPPOR needs a candidate list")
        return self.bloom_table(candidates)

    def _table(self, candidates_or_table: Any) -> np.ndarray:
        if candidates_or_table is None:
            raise ParameterError("RAPPOR needs a candidate list or a Bloom table (see bloom_table)")
        if isinstance(candidates_or_table, np.ndarray) and candidates_or_table.ndim == 3:
            return check_bloom_table(candidates_or_table, self.cohorts, self.hashes, self.k)
        return self.bloom_table(candidates_or_table)

    def design_matrix(self, candidates_or_table: Any = None) -> sp.csr_matrix:
        """``(C*k, S)`` 0/1 csr, row ``c*k + bit`` (cohort-major): 1 where candidate s sets the bit.
        Google's ``map.csv`` lists the same entries as 1-based ``c*k + bit + 1``."""
        return bloom_design_matrix(self._table(candidates_or_table), self.k)

    # -- simulation (fresh clients) and one-report encoding ------------------------------------------

    def prr_batch(self, true_bits: np.ndarray, rng: Randomness) -> np.ndarray:
        """Draw a fresh PRR for each row of ``(n, k)`` Bloom filters: B'_i = uniform bit w.p. f, else
        B_i (so 1 w.p. f/2, 0 w.p. f/2, B_i w.p. 1 − f)."""
        shape = true_bits.shape
        replace = np.asarray(rng.random(shape)).reshape(shape) < self.f
        coin = np.asarray(rng.random(shape)).reshape(shape) < 0.5
        return np.where(replace, coin, true_bits)

    def irr_batch(self, prr_bits: np.ndarray, rng: Randomness) -> np.ndarray:
        """IRR of ``(n, k)`` PRR bits: S_i = 1 w.p. q if B'_i = 1, w.p. p if B'_i = 0."""
        return perturb_bits(prr_bits, self.q, self.p, rng)

    def simulate_reports(self, candidate_index: Any, cohorts: Any, rng: Randomness, table: np.ndarray) -> np.ndarray:
        """``(n, k)`` bool reports of n fresh clients holding candidates ``candidate_index`` (columns
        of ``table``) in the given ``cohorts``; the PRR of each client is drawn with ``rng``. Exact in
        distribution for one report per client (per-bit rates q*, p*)."""
        bloom = self._table(table)
        index = as_index_array("candidate_index", candidate_index, bloom.shape[1])
        chosen = draw_cohorts(cohorts, index.shape[0], self.cohorts, rng)
        true_bits = bits_from_table(bloom[chosen, index], self.k)
        return self.irr_batch(self.prr_batch(true_bits, rng), rng)

    def encode_batch(
        self, candidate_index: Any, rng: Randomness, cohorts: Any = None, table: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Like :meth:`simulate_reports` but draws the cohorts (uniformly from ``rng``) unless given;
        returns ``(cohorts, (n, k) bool)``."""
        bloom = self._table(table)
        index = as_index_array("candidate_index", candidate_index, bloom.shape[1])
        chosen = draw_cohorts(cohorts, index.shape[0], self.cohorts, rng)
        return chosen, self.simulate_reports(index, chosen, rng, bloom)

    def encode(self, value: Any, cohort: int | None = None) -> tuple[int, np.ndarray]:
        """One report of a fresh client with :data:`SECURE` randomness (no PRR memo: use
        :class:`RapporClient` for a client that reports more than once)."""
        cohorts = None if cohort is None else [cohort]
        chosen, bits = self.encode_batch(np.zeros(1, dtype=np.int64), SECURE, cohorts, self._table([value]))
        return int(chosen[0]), bits[0]

    def client_encoder(self, secret: bytes, cohort: int) -> RapporClient:
        """A :class:`RapporClient` with this ``secret`` and ``cohort``: its PRR memo bounds ε_∞."""
        return RapporClient(self, secret, cohort)

    def simulate_sketch(self, counts: Any, rng: np.random.Generator, table: np.ndarray | None = None) -> np.ndarray:
        """``(C, k+1)`` sketch of one report from each of ``sum(counts)`` fresh clients, drawn directly.

        ``counts``: ``(S,)`` clients per candidate (cohorts drawn uniformly) or ``(C, S)``. Given the
        Bloom filters the report bits are independent with rates q*, p*, so bit j is set in
        Binomial(T_j, q*) + Binomial(N − T_j, p*) reports: exact in distribution (for one report per
        client; repeated reports of one client share a PRR and are not independent).
        """
        rng = ensure_generator(rng)
        bloom = self._table(table)
        per_cohort = population_by_cohort(counts, self.cohorts, bloom.shape[1], rng)
        true_counts = true_bit_counts(bloom, per_cohort, self.k)
        return bit_sketch_from_true_counts(true_counts, per_cohort.sum(axis=1), self.q_star, self.p_star, rng)


#: Alias: the parameters *are* the mechanism.
RapporParams = Rappor


class RapporClient:
    """One RAPPOR client: its parameters, secret, cohort and PRR memo (Google-compatible PRR).

    The PRR is a deterministic function of (secret, Bloom filter), derived exactly as the module
    docstring describes (Google's ``get_prr_masks`` over ``to_big_endian(bloom)``), and memoized; the
    IRR uses :data:`SECURE` randomness on every report. Requires ``128·f`` to be an integer so the
    7-bit threshold ``rand128 < 128·f`` realizes f exactly.
    """

    __slots__ = ("_memo", "cohort", "params", "secret")

    def __init__(self, params: Rappor, secret: bytes, cohort: int) -> None:
        if not isinstance(params, Rappor):
            raise ParameterError(f"params must be a Rappor, got {type(params).__name__}")
        if not isinstance(secret, bytes | bytearray) or len(secret) == 0:
            raise ParameterError("secret must be non-empty bytes")
        if abs(params.f * 128 - round(params.f * 128)) > 1e-9:
            raise ParameterError(
                f"f={params.f}: the Google-compatible PRR draws f with 7 bits, so 128*f must be an integer"
            )
        self.params = params
        self.secret = bytes(secret)
        self.cohort = check_int("cohort", cohort, 0, params.cohorts - 1)
        self._memo: OrderedDict[int, int] = OrderedDict()  # bounded by MEMO_CAPACITY, least recently used out

    def bloom(self, value: Any) -> int:
        """The Bloom filter of ``value`` in this client's cohort, as an integer (bit i = 2**i)."""
        out = 0
        for bit in hashing.bloom_bits(value, self.cohort, self.params.hashes, self.params.k):
            out |= 1 << bit
        return out

    def prr(self, bloom: int) -> int:
        """The memoized permanent randomized response of a Bloom filter (integer)."""
        memo = self._memo.get(bloom)
        if memo is not None:
            self._memo.move_to_end(bloom)
            return memo
        k = self.params.k
        uniform, f_mask = get_prr_masks(self.secret, prr_message(bloom, k), self.params.f, k)
        memo = (bloom & ~f_mask) | (uniform & f_mask)
        self._memo[bloom] = memo
        if len(self._memo) > MEMO_CAPACITY:
            self._memo.popitem(last=False)
        return memo

    def encode_bits(self, bloom: int) -> int:
        """IRR (integer) of a Bloom filter given as an integer, like Google's ``Encoder.encode_bits``."""
        k = self.params.k
        prr_bits = int_to_bits(self.prr(bloom), k)[None, :]
        return bits_to_int(self.params.irr_batch(prr_bits, SECURE)[0])

    def encode(self, value: Any) -> np.ndarray:
        """One report of ``value``: ``(k,)`` bool IRR bits (SECURE randomness, memoized PRR)."""
        return int_to_bits(self.encode_bits(self.bloom(value)), self.params.k)

    def encode_report(self, value: Any) -> tuple[int, np.ndarray]:
        """``(cohort, encode(value))``: the :class:`~ldpstream.mechanisms.base.ReportEncoder` of a device."""
        return self.cohort, self.encode(value)
