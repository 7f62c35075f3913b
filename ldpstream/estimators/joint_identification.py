"""Which cells of a joint table the reports identify, so that a published interval never promises what it
cannot keep (docs/math/joint.md#cells-the-reports-do-not-identify).

A cell is *not identified* when its estimate carries a bias that does not shrink with the number of report
pairs and that no interval computed from the reports can bound, because it depends on what "Other" hides (how
the hidden values spread over the mechanism's cells, or how X's and Y's hidden values associate), which the
reports do not reveal:

1. **Candidate frequencies by least squares on the candidates alone, for a hashed mechanism with an Other
   category** (``frequencies`` source ``"least-squares"`` or ``"self-consistent"``). The even "other"
   regressor assumes the hidden mass spreads uniformly over the cells; the bias of ``f`` moves the Other law
   and, through the EM, every cell of the table (measured: 16-bit RAPPOR, h = 2, largest bias 0.0053 in a
   candidate cell; 8 bits, h = 1, 0.019). Every cell is flagged. Frequencies given by the caller, the exact
   ones of a direct mechanism and the least squares against a well-determined candidate list (``"given"``,
   ``"dictionary"``, or ``"least-squares"`` of a direct mechanism, which is the unbiased direct estimator)
   are identified.
2. **Two members, each with an Other that holds two values or more, decoded by the EM.** (Two direct
   members, k-RR or k-RAPPOR, do not reach the EM: their Others hold known values and
   :mod:`ldpstream.estimators.joint_direct` inverts their full alphabets, every cell identified; nor do hashed
   members with a well-determined dictionary, inverted against it; the rule stays for a hashed member's Other
   without such a dictionary, whose values are unknown, and for ``estimate_joint(inversion=False)``.)
   The Other × Other cell's report-pair law is taken as the product of the two Other laws, which an association
   among the hidden values breaks: both reports then depend on the same hidden value (through the same hash,
   distinct hashes for a fixed hash realization, or, for k-RR, the value's own symbol). The EM answers the
   misfit by moving mass into Other × Other and the diagonal and out of the Other row and column, so it reaches
   every cell. Measured (ρ = 0.5): O-RR k = 32, 8 cohorts, dictionary frequencies: all cells cover 0.938 at
   10^5 pairs and 0.877 at 4·10^5 (same hash), 0.960 and 0.920 (distinct hashes), the 35 cells other than
   Other × Other 0.886 and 0.924 at 4·10^5; k-RR k = 100, ε = 4 (exact frequencies), the EM: 0.947, 0.933 and
   0.879 at 10^5, 4·10^5 and 10^6 (the inversion: 0.948, 0.956 and 0.950); 32-bit RAPPOR, h = 2, 8 cohorts,
   dictionary frequencies: 0.949, 0.944 and 0.875 at 10^5, 4·10^5 and 10^6. Every cell is flagged. An Other of
   one value (a closed alphabet with all but one value among the candidates) has an exact law, so the product is
   exact too.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["IdentifiedCells", "VariableIdentification", "identified_cells"]

#: Frequency sources (``JointEstimate.info["frequencies_x"]``) whose bias does not vanish for a hashed mechanism.
UNIDENTIFIED_SOURCES = frozenset({"least-squares", "self-consistent"})


@dataclass(frozen=True)
class VariableIdentification:
    """What decides whether one variable's part of the table is identified."""

    #: The variable has an "Other" category.
    other: bool
    #: Its mechanism hashes values (O-RR, O-RAPPOR, RAPPOR), as opposed to a direct one (k-RR, k-RAPPOR).
    hashed: bool
    #: Its reports are bit vectors (else symbols).
    bits: bool
    #: Where the Other rule's candidate frequencies came from (``info["frequencies_x"]``).
    frequency_source: str
    #: How many values Other holds (a closed alphabet's size minus the candidates); ``None``: open, unknown.
    hidden_values: int | None = None


@dataclass(frozen=True)
class IdentifiedCells:
    """``mask[i, j]``: whether cell ``(i, j)``'s interval is a promise; ``reasons``: why cells are not."""

    mask: np.ndarray
    reasons: tuple[str, ...]

    @property
    def all(self) -> bool:
        return bool(self.mask.all())


def identified_cells(shape: tuple[int, int], x: VariableIdentification, y: VariableIdentification,
                     names: tuple[str, str] = ("X", "Y")) -> IdentifiedCells:
    """The cells of an ``shape`` table (Other last when a variable has one) that the reports identify, by the
    two rules of the module docstring."""
    mask = np.ones(shape, dtype=bool)
    reasons: list[str] = []
    for v, name in zip((x, y), names, strict=True):
        if v.other and v.hashed and v.frequency_source in UNIDENTIFIED_SOURCES:
            mask[:] = False
            reasons.append(f"{name}: candidate frequencies by least squares on the candidates alone (no "
                           "well-determined candidate list): biased by how the hidden values spread over the "
                           "cells, which the reports do not identify; every cell is affected")
    if x.other and y.other and all(v.hidden_values is None or v.hidden_values >= 2 for v in (x, y)):
        mask[:] = False
        reasons.append("both members' Other holds several values: the Other x Other pair law is a product, which "
                       "an association among the hidden values breaks; its bias reaches every cell and does not "
                       "shrink with n")
    return IdentifiedCells(mask, tuple(reasons))
