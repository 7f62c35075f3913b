"""OLH: optimal local hashing with a finite family of ``cohorts`` hash functions, Wang et al. 2017 §4.4
(docs/math/mechanisms.md#olh).

A client in cohort c (uniform over 0..C-1) reports ``(c, kRR_ε(h_c(s)))`` with ``h_c`` the cohort's hash into
``k = g`` symbols, ``g = round(e^ε) + 1`` by default (the variance-minimizing range, :func:`optimal_range`): O-RR's
channel, in the regime of many cohorts and few symbols where every candidate's estimate is nearly unbiased
whatever else is held. The hash is :func:`~ldpstream.mechanisms.hashing.olh_table` (one digest per value, the
cohorts by integer mixing), so thousands of cohorts cost no more to hash than one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ldpstream.errors import ParameterError
from ldpstream.mechanisms import hashing, tuning
from ldpstream.mechanisms._common import as_index_array, check_int, to_value_list
from ldpstream.mechanisms.orr import ORR

#: The hash family's size :meth:`OLH.optimal` uses: an unlisted string holding 1% of the reports biases a
#: candidate by under 0.08 of a standard error at 10^6 clients and ε ≈ 4.4 (docs/math/mechanisms.md#olh).
DEFAULT_HASHES = 4096


def optimal_range(epsilon: float) -> int:
    """``g = round(e^ε) + 1``, at least 2: the hash range minimizing the variance ``(e^ε − 1 + g)² /
    ((e^ε − 1)²(g − 1))`` per report (Wang et al. 2017, eq. 12: its minimum is at ``g = e^ε + 1``)."""
    return max(2, round(math.exp(epsilon)) + 1)


@dataclass(frozen=True)
class OLH(ORR):
    """OLH over ``k`` hashed symbols with ``cohorts`` hash functions at privacy ``epsilon`` (fields as
    :class:`~ldpstream.mechanisms.orr.ORR`'s; :meth:`optimal` gives Wang et al.'s ``k = g``)."""

    name: ClassVar[str] = "olh"
    discovery_refusal: ClassVar[str | None] = (
        "OLH sends symbols, and the n-gram detection (screen, refit, test) and the final decode test bit reports")
    tuning_parameters: ClassVar[tuple[str, ...] | None] = ("k", "cohorts")
    staged_cohort_search: ClassVar[bool] = False
    #: Its decoders add the hash family's variance (:func:`~ldpstream.estimators.candidates.family_variance`).
    finite_family: ClassVar[bool] = True

    @classmethod
    def optimal(cls, epsilon: float, cohorts: int = DEFAULT_HASHES, support: int | None = None, **options: Any
                ) -> OLH:
        """The instance at ``epsilon`` with ``k = optimal_range(epsilon)``."""
        return cls(k=optimal_range(epsilon), epsilon=epsilon, cohorts=cohorts, support=support, **options)

    @classmethod
    def examples(cls) -> tuple[OLH, ...]:
        return (cls(k=3, epsilon=1.0, cohorts=4), cls(k=3, epsilon=1.0, cohorts=4, support=5))

    @classmethod
    def tuning_grid(cls, support: int, closed: bool, n: int | None = None) -> list[dict[str, int]]:
        """O-RR's grid (ε, which sets the best ``k``, is the tuner's) restricted to the largest cohort counts: from
        256 (or the largest ``n`` allows) up; many hash functions are what OLH is."""
        grid = tuning.symbol_grid(support, closed, n)
        floor = min(256, max((point["cohorts"] for point in grid), default=0))
        return [point for point in grid if point["cohorts"] >= floor]

    def channel_input(self, value: Any, cohort: int) -> int:
        """The value's symbol in ``cohort``: ``h_c(s)`` (:func:`~ldpstream.mechanisms.hashing.olh_table`)."""
        check_int("cohort", cohort, 0, self.cohorts - 1)
        if self.closed:
            assert self.support is not None
            index = as_index_array("value", np.asarray([value]), self.support)
            keys = hashing.olh_keys(index, closed=True)
        else:
            keys = hashing.olh_keys([value])
        return int(hashing.olh_table_from_keys(keys, np.asarray([cohort]), self.k)[0, 0])

    def symbol_table(self, candidates: Any = None) -> np.ndarray:
        """``(C, S)`` int64: ``h_c(s)`` of each candidate (closed: of the symbols ``candidates``, default all)."""
        if self.closed:
            return hashing.olh_table(self._closed_candidates(candidates), self.cohorts, self.k, closed=True)
        if candidates is None:
            raise ParameterError("an open-alphabet OLH needs a candidate list")
        return hashing.olh_table(to_value_list(candidates), self.cohorts, self.k)
