"""Which cells of a joint table the reports identify, so that a published interval never promises what it
cannot keep (docs/math/joint.md#cells-the-reports-do-not-identify).

A cell is *not identified* when its estimate carries a bias that does not shrink with the number of report
pairs and that no interval computed from the reports can bound, because it depends on what "Other" hides.
Every cell of the table is flagged when either rule applies:

1. **A hashed member whose candidate frequencies are least squares on the candidates alone** (``frequencies``
   source ``"least-squares"`` of O-RR, O-RAPPOR or RAPPOR, or ``"self-consistent"``): the even "other"
   regressor assumes the hidden mass spreads uniformly over the cells. Identified: ``"given"``,
   ``"dictionary"``, and ``"least-squares"`` of a direct mechanism (the unbiased direct estimator).
2. **Two members, each with an Other that holds two values or more, decoded by the EM**: the Other × Other
   report-pair law is taken as the product of the two Other laws, which an association among the hidden values
   breaks, and the EM's misfit reaches every cell. Two direct members (k-RR, k-RAPPOR) and hashed members
   with a well-determined dictionary are inverted instead (:mod:`ldpstream.estimators.joint.direct`) and do
   not reach this rule; an Other of one value has an exact law and is identified.
3. **A hashed member whose candidate list misses mass**: the Pearson misfit of that member's own reports against
   its list (the dictionary when given; :mod:`ldpstream.estimators.misfit`) rejects at ``MISFIT_LEVEL``. The
   unlisted values' reports sit on their own cells and move every category's estimate by an amount that does not
   shrink with n (docs/math/misfit.md#joint-tables).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..misfit import Misfit

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


def identified_cells(shape: tuple[int, int], x: VariableIdentification | None, y: VariableIdentification | None,
                     names: tuple[str, str] = ("X", "Y"),
                     misfits: tuple[Misfit | None, Misfit | None] = (None, None)) -> IdentifiedCells:
    """The cells of an ``shape`` table (Other last when a variable has one) that the reports identify, by the
    rules of the module docstring (``None`` members: rules 1 and 2 do not apply, an inversion's)."""
    mask = np.ones(shape, dtype=bool)
    reasons: list[str] = []
    for fit, name in zip(misfits, names, strict=True):
        if fit is not None and fit.rejected:
            mask[:] = False
            reasons.append(f"{name}: its candidate list misses mass (Pearson X² {fit.statistic:.0f} on {fit.df} df, "
                           f"p = {fit.p_value:.2g}; about {fit.excess_reports:.0f} reports unexplained): the unlisted "
                           "values' reports bias every cell by an amount that does not shrink with n")
    if x is None or y is None:
        return IdentifiedCells(mask, tuple(reasons))
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
