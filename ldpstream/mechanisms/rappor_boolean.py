"""A boolean reported as one RAPPOR bit, as Google's association tools encode it
(docs/math/mechanisms.md#a-boolean-as-one-rappor-bit).

Google's ``rappor_sim.py --assoc-testdata`` encodes the boolean variable of an association with a RAPPOR
encoder of ``num_bloombits = 1`` and the collection's p, q, f, calling ``encode_bits(v)`` with v in {0, 1}:
the value *is* the one-bit Bloom filter (no hashing), then the permanent randomized response (f) and the
instantaneous one (p, q) as for any RAPPOR report. The reports file holds the resulting bit, ``0`` or ``1``.
Google's decoder (``decode_assoc.R --create-bool-map``) reads it as a string variable of k = 1 whose map
has ``TRUE`` set bit 0 in every cohort and ``FALSE`` set nothing.

So a report is one bit S with P(S = 1 | TRUE) = q* = (1 − f/2) q + (f/2) p and P(S = 1 | FALSE) = p* =
(1 − f/2) p + (f/2) q: a binary randomized response, ε_1 = ln(q*(1 − p*)/(p*(1 − q*))) for one report and
ε_∞ = 2 ln((1 − f/2)/(f/2)) for any number of reports of one value (the PRR is memoized). The alphabet is
closed: value 0 is FALSE, 1 is TRUE. The cohort carries no information (there is no hash), but Google's
files give every report one, so it is kept.

This mechanism is the decoder's view of such a variable (its :meth:`design_matrix` is Google's boolean map)
and a simulator of fresh clients; a real client memoizes its PRR with
:class:`~ldpstream.mechanisms.rappor.RapporClient` over ``Rappor(k=1, hashes=1, ...)``
(:meth:`client_encoder`), exactly Google's ``encode_bits``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import scipy.sparse as sp

from ldpstream.mechanisms._common import (
    MAX_COHORTS,
    as_index_array,
    bit_sketch_from_true_counts,
    check_int,
    check_probability,
    draw_cohorts,
    ensure_generator,
    population_by_cohort,
)
from ldpstream.mechanisms.base import BitMechanism, DecoderFamily
from ldpstream.mechanisms.randomness import SECURE, Randomness
from ldpstream.mechanisms.rappor import Rappor, RapporClient

#: The values of a boolean, in index order (Google's boolean map names them so).
BOOLEAN_LABELS: tuple[str, str] = ("FALSE", "TRUE")


@dataclass(frozen=True)
class RapporBoolean(BitMechanism):
    """One RAPPOR bit holding a boolean: ``cohorts`` (m of ``params.csv``) and the probabilities p, q, f.

    Not a registry mechanism (no streaming metric uses it): the joint decoder and the Google file tools
    read booleans with it.
    """

    name: ClassVar[str] = "rappor_boolean"
    decoder_family: ClassVar[DecoderFamily] = "candidates_bits"
    k: ClassVar[int] = 1  # type: ignore[misc]

    cohorts: int
    p: float
    q: float
    f: float

    def __post_init__(self) -> None:
        # The one-bit Rappor checks p, q, f exactly as a string variable's (q > p, f < 1).
        self.bit()
        object.__setattr__(self, "cohorts", check_int("cohorts", self.cohorts, 1, MAX_COHORTS))
        for name in ("p", "q", "f"):
            object.__setattr__(self, name, check_probability(name, getattr(self, name)))

    @classmethod
    def examples(cls) -> tuple[RapporBoolean, ...]:
        return (cls(cohorts=2, p=0.25, q=0.75, f=0.5),)

    def bit(self) -> Rappor:
        """The same channel as a one-bit, one-hash :class:`~ldpstream.mechanisms.rappor.Rappor`."""
        return Rappor(k=1, hashes=1, cohorts=self.cohorts, p=self.p, q=self.q, f=self.f)

    def parameters(self) -> dict[str, int | float | str | bool]:
        return {"mechanism": self.name, "cohorts": self.cohorts, "p": self.p, "q": self.q, "f": self.f}

    @property
    def q_star(self) -> float:
        """P(S = 1 | TRUE) = (1 − f/2) q + (f/2) p."""
        return self.bit().q_star

    @property
    def p_star(self) -> float:
        """P(S = 1 | FALSE) = (1 − f/2) p + (f/2) q."""
        return self.bit().p_star

    @property
    def epsilon(self) -> float:  # type: ignore[override]
        """ε_1 = ln(q*(1 − p*)/(p*(1 − q*))): one bit, so RAPPOR's ε_1 with h = 1."""
        return self.bit().epsilon

    @property
    def epsilon_inf(self) -> float:
        """ε_∞ = 2 ln((1 − f/2)/(f/2)) (memoized PRR)."""
        return self.bit().epsilon_inf

    @property
    def stateful_client(self) -> bool:
        return True

    @property
    def closed(self) -> bool:
        """Values are 0 (FALSE) and 1 (TRUE)."""
        return True

    def design_matrix(self, candidates_or_table: Any = None) -> sp.csr_matrix:
        """``(C, 2)``: column 0 (FALSE) sets no bit, column 1 (TRUE) sets bit 0 in every cohort (Google's
        ``CreateAssocBoolMap``)."""
        rows = np.arange(self.cohorts)
        return sp.csr_matrix((np.ones(self.cohorts), (rows, np.ones(self.cohorts, dtype=np.int64))),
                             shape=(self.cohorts, 2), dtype=np.float64)

    def encode_batch(self, values: Any, rng: Randomness, cohorts: Any = None) -> tuple[np.ndarray, np.ndarray]:
        """``(cohorts, (n, 1) bool)`` of fresh clients holding ``values`` (0/1); cohorts drawn unless given."""
        index = as_index_array("value", values, 2)
        chosen = draw_cohorts(cohorts, index.shape[0], self.cohorts, rng)
        bit = self.bit()
        reports = bit.irr_batch(bit.prr_batch(index[:, None].astype(bool), rng), rng)
        return chosen, reports

    def encode_clients(
        self, value_index: np.ndarray, rng: Randomness, table: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        return self.encode_batch(value_index, rng)

    def encode_report(self, value: Any) -> tuple[int, Any]:
        """One report of a fresh client (:data:`SECURE`); a real client uses :meth:`client_encoder`."""
        chosen, bits = self.encode_batch(np.asarray([int(value)]), SECURE)
        return int(chosen[0]), bits[0]

    def client_encoder(self, secret: bytes, cohort: int) -> RapporClient:
        """Google's ``Encoder(num_bloombits=1)``: ``encode_bits(v)`` memoizes the PRR of the bit."""
        return RapporClient(self.bit(), secret, cohort)

    def simulate_sketch(self, counts: Any, rng: np.random.Generator, table: np.ndarray | None = None) -> np.ndarray:
        """``(C, 2)`` sketch of ``counts = (n_FALSE, n_TRUE)`` fresh clients (or ``(C, 2)`` per cohort):
        the bit is set in Binomial(n_TRUE, q*) + Binomial(n_FALSE, p*) reports of a cohort, exactly."""
        rng = ensure_generator(rng)
        per_cohort = population_by_cohort(counts, self.cohorts, 2, rng)
        true_counts = per_cohort[:, 1:2]
        return bit_sketch_from_true_counts(true_counts, per_cohort.sum(axis=1), self.q_star, self.p_star, rng)

