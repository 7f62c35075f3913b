"""The joint distribution of an associated pair of metrics (docs/math/joint.md).

Entry point: :func:`estimate_joint` over the distinct report pairs (:class:`PairPatterns`). The modules: the
input (:mod:`~ldpstream.estimators.joint.pairs`), each variable's likelihoods with an "Other" category
(:mod:`~ldpstream.estimators.joint.likelihood`), the EM (:mod:`~ldpstream.estimators.joint.em`), the
inversion of two direct members or a well-determined candidate list (:mod:`~ldpstream.estimators.joint.direct`),
the identified cells (:mod:`~ldpstream.estimators.joint.identification`), the covariance with the Other law's
uncertainty (:mod:`~ldpstream.estimators.joint.sandwich`), intervals, conditionals and the independence test
(:mod:`~ldpstream.estimators.joint.inference`), and the result (:mod:`~ldpstream.estimators.joint.estimate`).
"""

from .estimate import (
    INVERSION_INTERVAL_METHOD,
    OTHER_LABEL,
    SANDWICH_INTERVAL_METHOD,
    ConditionalTable,
    IndependenceTest,
    JointEstimate,
    JointVariable,
    centred_intervals,
    estimate_joint,
    top_values,
)
from .pairs import PairPatterns

__all__ = [
    "INVERSION_INTERVAL_METHOD",
    "OTHER_LABEL",
    "SANDWICH_INTERVAL_METHOD",
    "ConditionalTable",
    "IndependenceTest",
    "JointEstimate",
    "JointVariable",
    "PairPatterns",
    "centred_intervals",
    "estimate_joint",
    "top_values",
]
