"""Decoders for locally private count sketches (pure numpy/scipy).

Equations: ``docs/math/estimators.md``. Entry point: :func:`estimate`; the caches it can be given
(:class:`DesignCache`, :class:`FactorCache`) belong to the caller.
"""

from .candidates import CandidateMethod, decode_bits, decode_orappor, decode_orr, decode_rappor
from .channels import AffineChannel, MatrixChannel
from .detection import Correction, detect
from .direct import (
    DirectMethod,
    estimate_krappor,
    estimate_krr,
    krappor_expected_l1,
    krappor_expected_l2sq,
    krappor_unbiased,
    krr_channel,
    krr_expected_l1,
    krr_expected_l2sq,
    krr_unbiased,
)
from .dispatch import DesignCache, design_matrix, estimate
from .em import EMResult, em_multinomial, log_likelihood
from .estimate import ConfidenceInterval, Estimate, bonferroni_z, detection_floor
from .factor_cache import FactorCache
from .numerics.gram import WeightedGram
from .numerics.least_squares import fista_constrained_ls
from .numerics.linalg import weighted_gram
from .numerics.simplex import project_capped_simplex, project_simplex, truncate_normalize
from .numerics.variance import (
    affine_constrained_variances,
    bit_variance,
    constrained_variances,
    krappor_variance,
    krr_variance,
)

__all__ = [
    "AffineChannel",
    "CandidateMethod",
    "ConfidenceInterval",
    "Correction",
    "DesignCache",
    "DirectMethod",
    "EMResult",
    "Estimate",
    "FactorCache",
    "MatrixChannel",
    "WeightedGram",
    "affine_constrained_variances",
    "bit_variance",
    "bonferroni_z",
    "constrained_variances",
    "decode_bits",
    "decode_orappor",
    "decode_orr",
    "decode_rappor",
    "design_matrix",
    "detect",
    "detection_floor",
    "em_multinomial",
    "estimate",
    "estimate_krappor",
    "estimate_krr",
    "fista_constrained_ls",
    "krappor_expected_l1",
    "krappor_expected_l2sq",
    "krappor_unbiased",
    "krappor_variance",
    "krr_channel",
    "krr_expected_l1",
    "krr_expected_l2sq",
    "krr_unbiased",
    "krr_variance",
    "log_likelihood",
    "project_capped_simplex",
    "project_simplex",
    "truncate_normalize",
    "weighted_gram",
]
