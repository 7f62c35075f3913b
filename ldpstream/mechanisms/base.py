"""What every privatization mechanism offers to producers and to the decoder.

Two families, by the shape of a report:

- :class:`SymbolMechanism` (k-RR, O-RR): a report is one symbol ``y`` in ``0..k-1`` (plus a cohort).
  The count sketch of cohort ``c`` is the vector of symbol counts, ``sketch[c, y]``.
- :class:`BitMechanism` (k-RAPPOR, O-RAPPOR, RAPPOR): a report is ``k`` bits (plus a cohort), bit ``j``
  being set with probability ``q_star`` when the true (Bloom) bit is set and ``p_star`` otherwise.
  The count sketch of cohort ``c`` has ``k + 1`` columns laid out as Google's RAPPOR ``counts.csv``:
  ``sketch[c, 0]`` is the number of reports of the cohort and ``sketch[c, 1 + j]`` the number with bit
  ``j`` set.

Sketches are additive: the sketch of a union of report sets is the sum of their sketches. That is what
lets consumers fold reports incrementally and the decoder sum per-partition sketches.

Whatever else depends on the mechanism asks it, not its type: :attr:`Mechanism.decoder_family` picks the
decoder (:mod:`ldpstream.estimators.dispatch`); :meth:`Mechanism.value_table`, :meth:`Mechanism.encode_clients`,
:attr:`Mechanism.closed`, :attr:`Mechanism.stateful_client`, :meth:`Mechanism.client_encoder` and
:meth:`Mechanism.encode_report` are what devices and simulations need (:mod:`ldpstream.device`);
:meth:`Mechanism.design_matrix`, :meth:`Mechanism.simulate_sketch` and :attr:`Mechanism.response_rates` are what
the simulations and their error model need (:mod:`ldpstream.simulation`).

Packed bits use little-endian bit order within each byte (bit ``j`` is ``(byte[j // 8] >> (j % 8)) & 1``),
so the packed bytes read as a little-endian integer are ``sum(bit_j << j)``: the integer whose binary
string, most significant bit first, is how Google's RAPPOR prints a report.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Literal, Protocol, Self, cast

import numpy as np
import scipy.sparse as sp
from numpy.typing import ArrayLike

from ldpstream.errors import ParameterError
from ldpstream.mechanisms.randomness import Randomness
from ldpstream.mechanisms.rates import krr_rates

ReportKind = Literal["symbol", "bits"]

#: The values a mechanism encodes: "closed" = the symbols ``0..k-1`` themselves (k = S, no hashing, one cohort:
#: k-RR, k-RAPPOR, OUE, SS, HR); "either" = hashed into cohorts, an open alphabet of str/bytes or a closed one
#: (``support = S``: O-RR, O-RAPPOR, O-OUE, CMS, HCMS); "open" = str/bytes hashed by Google's Bloom filter only
#: (RAPPOR).
AlphabetKind = Literal["closed", "either", "open"]

#: How a sketch is decoded: "direct" = the channel is inverted over the closed alphabet ``0..k-1`` (k-RR,
#: k-RAPPOR); "candidates" = regression against the design matrix of a candidate list or of a closed alphabet
#: (O-RR, O-RAPPOR, RAPPOR); "_symbol" / "_bits" = the report kind.
#: "direct_hadamard" / "candidates_hadamard" (HR, HCMS): symbol sketches that one Walsh–Hadamard transform turns into
#: the unary bit sketch of the direct / candidate bit decoders (``mechanism.margin_sketch``).
DecoderFamily = Literal[
    "direct_symbol", "direct_bits", "candidates_symbol", "candidates_bits", "direct_hadamard", "candidates_hadamard"
]

#: The estimation methods of the direct decoders and of the candidate decoders (a metric's ``estimator``).
DIRECT_METHODS = ("unbiased", "truncate", "project", "mle")
CANDIDATE_METHODS = ("ls", "nnls", "project", "mle")
#: Bit sketches (O-RAPPOR, RAPPOR) also offer ``"detect"`` (:func:`ldpstream.estimators.detection.detect`:
#: screen, refit and test, Benjamini–Hochberg at q = 0.10). O-RR does not: detect's weights and tests model
#: each (cohort, bit) cell as an independent binomial, while an O-RR cohort is one multinomial over k symbols.
BIT_CANDIDATE_METHODS = (*CANDIDATE_METHODS, "detect")
#: The methods each decoder family offers.
DECODER_METHODS: dict[str, tuple[str, ...]] = {
    "direct_symbol": DIRECT_METHODS,
    "direct_bits": DIRECT_METHODS,
    "candidates_symbol": CANDIDATE_METHODS,
    "candidates_bits": BIT_CANDIDATE_METHODS,
    "direct_hadamard": DIRECT_METHODS,
    "candidates_hadamard": BIT_CANDIDATE_METHODS,
}


class ReportEncoder(Protocol):
    """What a device privatizes one value with: a mechanism itself, or a per-client stateful encoder."""

    def encode_report(self, value: Any) -> tuple[int, Any]:
        """``(cohort, report)`` of one value with secure randomness."""
        ...


class Mechanism(ABC):
    """An ε-locally differentially private randomizer with a known channel."""

    #: Short name, the ``mechanism`` entry of :meth:`parameters` (see :data:`~ldpstream.mechanisms.MECHANISMS`).
    name: ClassVar[str]
    report_kind: ClassVar[ReportKind]
    #: Which decoder family reads this mechanism's sketches (see :data:`DecoderFamily`).
    decoder_family: ClassVar[DecoderFamily]
    #: Whether simulating or encoding a population needs a per-cohort table of the value list
    #: (:meth:`value_table`): hashed mechanisms do, k-RR and k-RAPPOR do not.
    needs_value_table: ClassVar[bool] = True
    #: Which values it encodes (see :data:`AlphabetKind`): how simulations build its alphabet.
    alphabet: ClassVar[AlphabetKind]
    #: Whether the joint decoder models its channel, so that it may be a member of an association
    #: (:data:`ldpstream.registry.JOINT_MECHANISMS`; docs/math/joint.md).
    joint_member: ClassVar[bool] = False
    #: Whether it can carry a discovery metric's n-gram and full-string reports
    #: (:data:`ldpstream.registry.DISCOVERY_MECHANISMS`; docs/math/dictionary.md, "Which mechanisms").
    discovery_carrier: ClassVar[bool] = False
    #: Why it cannot carry them, when there is more to say than that it is not a carrier.
    discovery_refusal: ClassVar[str | None] = None
    #: The options of :meth:`discovery_report` beyond (ε, k, h, C) (RAPPOR's permanent-response ``f``).
    discovery_options: ClassVar[tuple[str, ...]] = ()
    #: The parameters the tuner chooses on :meth:`tuning_grid` (``()``: none, k = S; ``None``: not tuned).
    tuning_parameters: ClassVar[tuple[str, ...] | None] = None
    #: Parameters the mechanism fixes (name, value) that a simulation's options may not set otherwise.
    fixed_parameters: ClassVar[tuple[tuple[str, int], ...]] = ()
    #: Whether the tuner searches its grid in two phases (every k at moderate C, then C doubling for the best k:
    #: O-RR, whose grid reaches thousands of cohorts) instead of point by point.
    staged_cohort_search: ClassVar[bool] = False

    #: Output width: number of symbols (symbol mechanisms) or of bits (bit mechanisms).
    k: int
    #: Number of cohorts C (1 for the un-hashed k-RR and k-RAPPOR).
    cohorts: int

    #: ε of one report (ε_1 in the RAPPOR paper's notation). Mechanisms parametrized by ε (k-RR,
    #: k-RAPPOR, O-RR, O-RAPPOR) declare it as a dataclass field; RAPPOR derives it from (h, f, p, q)
    #: with a property. (An abstract property here would shadow the dataclass field.)
    epsilon: float

    @classmethod
    @abstractmethod
    def examples(cls) -> tuple[Self, ...]:
        """Small instances, the first the canonical one, that together cover the mechanism's alphabets (open and
        closed where it has both): what :mod:`ldpstream.mechanisms.checks` runs on. Small enough that the whole
        report space can be enumerated (at most a few thousand outputs per value)."""

    @classmethod
    def example(cls) -> Self:
        """The first of :meth:`examples`."""
        return cls.examples()[0]

    @classmethod
    def for_alphabet(cls, support: int, epsilon: float) -> Self:
        """The instance over the symbols ``0..support-1`` at ε of a direct mechanism (``decoder_family`` direct):
        ``k = support`` by default; a mechanism whose fields differ says how. Others are a ParameterError."""
        if not cls.decoder_family.startswith("direct"):
            raise ParameterError(f"{cls.name} hashes its values: it has no instance for an alphabet alone")
        return cast("Callable[..., Self]", cls)(k=support, epsilon=epsilon)

    @classmethod
    def discovery_report(cls, epsilon: float, k: int, hashes: int, cohorts: int, **options: float) -> BitMechanism:
        """One report of a discovery metric: ``k`` Bloom bits, ``hashes`` hashes, ``cohorts`` cohorts and exactly
        ε = ``epsilon`` per report, with :attr:`discovery_options` (docs/math/dictionary.md, "The budget").
        Only a :attr:`discovery_carrier` has one."""
        raise ParameterError(f"{cls.name} cannot carry discovery reports"
                             + (f": {cls.discovery_refusal}" if cls.discovery_refusal else ""))

    @classmethod
    def tuning_grid(cls, support: int, closed: bool, n: int | None = None) -> list[dict[str, int]]:
        """The grid of :attr:`tuning_parameters` that the tuner searches for an alphabet of ``support`` values
        (closed or open) and ``n`` reports (:mod:`ldpstream.mechanisms.tuning`). The base has none."""
        raise ParameterError(f"no grid for {cls.name}")

    def probe_value(self, i: int) -> str:
        """The ``i``-th of distinct open-alphabet values the conformance checks encode (``value-i``)."""
        return f"value-{i}"

    def hashing_twin(self) -> Mechanism:
        """A mechanism whose value table and design matrix are this one's (through :meth:`table_of_twin`), so that
        simulations cache one table for both: the mechanism itself unless it hashes exactly as another one."""
        return self

    def table_of_twin(self, table: np.ndarray) -> np.ndarray:
        """This mechanism's value table given the :meth:`value_table` of its :meth:`hashing_twin`."""
        return table

    @abstractmethod
    def report_channel(self, table: np.ndarray | None = None) -> np.ndarray:
        """The exact channel ``(S, C·W)``: row s is the law of one report (cohort c, output o; column ``c·W + o``)
        of a fresh client holding value s of ``table`` (a :meth:`value_table`; ``None`` for a direct mechanism).
        W is :attr:`sketch_width` for symbol reports and ``2**k`` for bit reports (output o has bit j
        ``(o >> j) & 1``). Enumerates every output: for small mechanisms (:meth:`examples`)."""

    @property
    def epsilon_inf(self) -> float:
        """ε_∞: ε of any number of reports of one value by one client (its devices encode through
        :meth:`client_encoder`). Finite only when the client memoizes a permanent response: RAPPOR's
        2h ln((1 − f/2)/(f/2)); for k-RR, k-RAPPOR, O-RR and O-RAPPOR ``epsilon`` (``memoize``, no
        instantaneous layer), ``epsilon_permanent`` (with one) or ∞ (``memoize=False``: r reports cost rε).
        See docs/math/privacy-accounting.md#longitudinal-privacy-memoized-permanent-response.

        The base (a mechanism with fresh noise on every report) returns ∞."""
        return math.inf

    @property
    def stateful_client(self) -> bool:
        """Whether a real client keeps state across reports derived from a persistent secret (a memoized
        permanent response): then the device secret must persist (:class:`~ldpstream.device.ClientPrivatizer`)."""
        return False

    @property
    def closed(self) -> bool:
        """Whether values are the indices ``0..S-1`` of a closed alphabet (else str/bytes of an open one)."""
        return False

    def value_table(self, candidates: Sequence[Any] | None) -> np.ndarray | None:
        """The per-cohort table (symbols or Bloom bits) of the value list that :meth:`encode_clients` takes:
        of ``candidates``, or of the closed alphabet; None when :attr:`needs_value_table` is false."""
        return None

    @abstractmethod
    def encode_clients(
        self, value_index: np.ndarray, rng: Randomness, table: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """One report from each client holding value ``value_index[i]`` (an index into the value list of
        ``table``, see :meth:`value_table`), randomness from ``rng``: ``(cohorts, reports)``, vectorized."""

    @abstractmethod
    def encode_report(self, value: Any) -> tuple[int, Any]:
        """``(cohort, report)`` of one value (an index for closed alphabets) with :data:`SECURE` randomness,
        as a fresh client."""

    def client_encoder(self, secret: bytes, cohort: int) -> ReportEncoder:
        """The encoder of one real client, whose per-metric ``secret`` and ``cohort`` (derived from the device
        secret) it keeps; every mechanism of the package overrides this (RAPPOR's :class:`RapporClient`, the
        others' :class:`~ldpstream.mechanisms.longitudinal.MemoizedEncoder`). The base encodes as a fresh
        client each time."""
        del secret, cohort
        return self

    @abstractmethod
    def design_matrix(self, candidates_or_table: Any = None) -> sp.csr_matrix:
        """``(C·k, S)`` 0/1 csr (cohort-major rows): 1 where a value's true report would set the cell, for a
        candidate list or its :meth:`value_table` (``None``: a closed alphabet's own; ignored by direct
        mechanisms, whose design is the identity)."""

    @abstractmethod
    def simulate_sketch(self, counts: Any, rng: np.random.Generator, table: np.ndarray | None = None) -> np.ndarray:
        """The count sketch of a population with ``counts[s]`` clients holding value ``s`` of ``table`` (a
        :meth:`value_table`; ``None`` where :attr:`needs_value_table` is false or the alphabet is closed), drawn
        in aggregate: exact in distribution, no per-report work."""

    @property
    @abstractmethod
    def response_rates(self) -> tuple[float, float]:
        """``(hi, lo)``: the probability that a sketch cell (a symbol, or a bit) counts a report when it is the
        client's true cell, and when it is not."""

    @property
    @abstractmethod
    def sketch_width(self) -> int:
        """Columns of the per-cohort count sketch."""

    @abstractmethod
    def parameters(self) -> dict[str, int | float | str | bool]:
        """The parameters that define the channel; a metric's fingerprint is a hash of these."""

    @abstractmethod
    def sketch(self, cohorts: np.ndarray, reports: np.ndarray) -> np.ndarray:
        """Fold a batch of reports into a ``(C, sketch_width)`` int64 count sketch (vectorized)."""

    @abstractmethod
    def reports_per_cohort(self, sketch: np.ndarray) -> np.ndarray:
        """Number of reports of each cohort that a ``(C, sketch_width)`` sketch counts."""


class SymbolMechanism(Mechanism):
    """A mechanism whose reports are single symbols ``0..k-1``."""

    report_kind: ClassVar[ReportKind] = "symbol"

    @property
    def response_rates(self) -> tuple[float, float]:
        """k-RR's ``(Q(x|x), Q(y|x))`` (:func:`~ldpstream.mechanisms.rates.krr_rates`), applied to the
        (hashed) symbol."""
        return krr_rates(self.k, self.epsilon)

    @property
    def sketch_width(self) -> int:
        return self.k

    def reports_per_cohort(self, sketch: np.ndarray) -> np.ndarray:
        totals: np.ndarray = np.asarray(sketch).sum(axis=1)
        return totals

    def report_channel(self, table: np.ndarray | None = None) -> np.ndarray:
        """k-RR on the value's cell of each cohort (its :meth:`design_matrix` row), the cohort uniform: P((c, y) | s)
        = hi/C when y is s's cell in c, lo/C otherwise (:attr:`response_rates`)."""
        hi, lo = self.response_rates
        cells = self.design_matrix(table).toarray().T.astype(bool)  # (S, C·k)
        return np.where(cells, hi, lo) / self.cohorts

    def sketch(self, cohorts: np.ndarray, reports: np.ndarray) -> np.ndarray:
        cohorts = np.asarray(cohorts, dtype=np.int64)
        reports = np.asarray(reports, dtype=np.int64)
        flat = np.bincount(cohorts * self.k + reports, minlength=self.cohorts * self.k)
        return flat.reshape(self.cohorts, self.k).astype(np.int64, copy=False)


class BitMechanism(Mechanism):
    """A mechanism whose reports are ``k`` bits; ``reports`` arrays are ``(n, k)`` bool or 0/1."""

    report_kind: ClassVar[ReportKind] = "bits"

    @property
    @abstractmethod
    def q_star(self) -> float:
        """P(reported bit = 1 | true bit = 1)."""

    @property
    @abstractmethod
    def p_star(self) -> float:
        """P(reported bit = 1 | true bit = 0)."""

    @property
    def response_rates(self) -> tuple[float, float]:
        """``(q*, p*)``."""
        return self.q_star, self.p_star

    @property
    def sketch_width(self) -> int:
        return self.k + 1

    def reports_per_cohort(self, sketch: np.ndarray) -> np.ndarray:
        return np.asarray(sketch)[:, 0]

    def report_channel(self, table: np.ndarray | None = None) -> np.ndarray:
        """Independent bit flips of the value's true bits in each cohort (its :meth:`design_matrix` rows), the
        cohort uniform: P((c, o) | s) = Π_j (q* or 1 − q* where bit j is true, p* or 1 − p* where not) / C."""
        truth = self.design_matrix(table).toarray().T.astype(bool)  # (S, C·k)
        S, k = truth.shape[0], self.k
        outputs = (np.arange(2**k)[:, None] >> np.arange(k)[None, :]) & 1 == 1  # (2^k, k)
        blocks = []
        for c in range(self.cohorts):
            true_bits = truth[:, c * k:(c + 1) * k][:, None, :]
            one = np.where(true_bits, self.q_star, self.p_star)
            blocks.append(np.where(outputs[None, :, :], one, 1.0 - one).prod(axis=2) / self.cohorts)
        return np.concatenate(blocks, axis=1).reshape(S, self.cohorts * 2**k)

    def sketch(self, cohorts: np.ndarray, reports: np.ndarray) -> np.ndarray:
        return sum_bits(cohorts, reports, self.cohorts)


class DirectEncoding(ABC):
    """The device hooks of a closed-alphabet, single-cohort mechanism (k-RR, k-RAPPOR): values are the symbols
    ``0..k-1`` themselves, so no value table; every report is in cohort 0. Listed before the family base."""

    needs_value_table: ClassVar[bool] = False
    alphabet: ClassVar[AlphabetKind] = "closed"
    tuning_parameters: ClassVar[tuple[str, ...] | None] = ()
    k: int

    def design_matrix(self, candidates_or_table: Any = None) -> sp.csr_matrix:
        """``(k, k)`` identity: symbol x is its own (only) candidate, in the one cohort; no table."""
        return sp.identity(self.k, dtype=np.float64, format="csr")

    @abstractmethod
    def encode(self, x: int) -> Any:
        """One report of symbol ``x`` with :data:`SECURE` randomness."""

    @abstractmethod
    def encode_batch(self, x: Any, rng: Randomness) -> np.ndarray:
        """Reports of a batch of symbols with ``rng``."""

    @property
    def closed(self) -> bool:
        """The alphabet ``0..k-1`` is closed."""
        return True

    def encode_clients(
        self, value_index: np.ndarray, rng: Randomness, table: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """One cohort: ``(zeros, encode_batch(value_index, rng))``; no table."""
        return np.zeros(len(value_index), dtype=np.int64), self.encode_batch(value_index, rng)

    def encode_report(self, value: Any) -> tuple[int, Any]:
        """``(0, encode(value))``."""
        return 0, self.encode(value)


class HashedEncoding(ABC):
    """The device hooks of a hashed mechanism with cohorts (O-RR, O-RAPPOR, RAPPOR): values are indices into a
    per-cohort value table, cohorts are drawn with the randomness. Listed before the family base."""

    alphabet: ClassVar[AlphabetKind] = "either"

    @abstractmethod
    def encode(self, value: Any, cohort: int | None = None) -> tuple[int, Any]:
        """``(cohort, report)`` of one value with :data:`SECURE` randomness."""

    @abstractmethod
    def encode_batch(
        self, candidate_index: Any, rng: Randomness, cohorts: Any = None, table: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(cohorts, reports)`` of clients holding the values ``candidate_index`` of ``table``."""

    def encode_clients(
        self, value_index: np.ndarray, rng: Randomness, table: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`encode_batch` with cohorts drawn from ``rng``."""
        return self.encode_batch(value_index, rng, table=table)

    def encode_report(self, value: Any) -> tuple[int, Any]:
        """:meth:`encode` (a uniformly drawn cohort; for RAPPOR a fresh client)."""
        return self.encode(value)


def sum_bits(cohorts: ArrayLike, reports: ArrayLike, num_cohorts: int) -> np.ndarray:
    """The ``(C, k + 1)`` count sketch of ``(n, k)`` 0/1 bit ``reports`` in ``cohorts`` (module docstring's
    layout; Google's ``sum_bits.py``): row c is ``[#reports of cohort c, #of them with bit 0 set, …, bit k−1]``.

    One pass: the sparse cohort indicator (C × n) times the reports (n × k), no sort, no copy per cohort.
    """
    cohorts = np.asarray(cohorts, dtype=np.int64)
    bits = np.asarray(reports)
    n, k = bits.shape
    if cohorts.shape != (n,):
        raise ParameterError(f"{cohorts.shape[0] if cohorts.ndim else 1} cohorts for {n} reports")
    if n and (cohorts.min() < 0 or cohorts.max() >= num_cohorts):
        raise ParameterError(f"cohorts must lie in 0..{num_cohorts - 1}")
    out = np.zeros((num_cohorts, k + 1), dtype=np.int64)
    out[:, 0] = np.bincount(cohorts, minlength=num_cohorts)
    if not n:
        return out
    dtype: type[np.signedinteger[Any]] = np.int32 if n < 2**31 else np.int64
    if num_cohorts == 1 and bits.dtype == bool:
        out[0, 1:] = _column_sums_of_bools(bits)
        return out
    if num_cohorts == 1:  # column sums
        out[0, 1:] = np.add.reduce(bits, axis=0, dtype=dtype)
        return out
    indicator = sp.csr_matrix((np.ones(n, dtype=dtype), (cohorts, np.arange(n))), shape=(num_cohorts, n))
    out[:, 1:] = np.asarray(indicator @ bits.astype(dtype, copy=False))
    return out


#: Rows of 0/1 bytes whose column sums fit in a byte.
_BYTE_ROWS = 255


def _column_sums_of_bools(bits: np.ndarray) -> np.ndarray:
    """Column sums of an ``(n, k)`` bool array: blocks of 255 rows summed as bytes (a sum of at most 255 zeros
    and ones fits in a uint8, and byte-wise adds vectorize 4–6 times better than widening each to int32), the
    block sums accumulated in int64."""
    as_bytes = bits.view(np.uint8)
    total = np.zeros(bits.shape[1], dtype=np.int64)
    for start in range(0, bits.shape[0], _BYTE_ROWS):
        total += np.add.reduce(as_bytes[start:start + _BYTE_ROWS], axis=0, dtype=np.uint8)
    return total


def pack_bits(bits: np.ndarray) -> np.ndarray:
    """``(n, k)`` 0/1 → ``(n, ceil(k/8))`` uint8, little-endian bit order (see module docstring)."""
    return np.packbits(np.asarray(bits, dtype=np.uint8), axis=-1, bitorder="little")


def unpack_bits(packed: np.ndarray, k: int) -> np.ndarray:
    """Inverse of :func:`pack_bits`: ``(n, ceil(k/8))`` uint8 → ``(n, k)`` uint8."""
    # Unpacking whole bytes then cutting is several times faster than numpy's ``count=k`` (which takes a slow
    # path even when k is a multiple of 8).
    packed = np.asarray(packed, dtype=np.uint8)
    if packed.shape[-1] * 8 < k:  # fewer bytes than k bits: numpy pads with zeros
        return np.unpackbits(packed, axis=-1, count=k, bitorder="little")
    bits = np.unpackbits(packed, axis=-1, bitorder="little")
    return bits if bits.shape[-1] == k else np.ascontiguousarray(bits[..., :k])
