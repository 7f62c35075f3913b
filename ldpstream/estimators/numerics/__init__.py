"""The numerical methods the decoders share (docs/math/estimators.md): sparse and dense linear algebra
(:mod:`~ldpstream.estimators.numerics.linalg`), weighted Gram matrices of hashed designs
(:mod:`~ldpstream.estimators.numerics.gram`), weighted and constrained least squares
(:mod:`~ldpstream.estimators.numerics.least_squares`), the exact sandwich meat of its score
(:mod:`~ldpstream.estimators.numerics.sandwich`), projected Newton maximum likelihood
(:mod:`~ldpstream.estimators.numerics.newton_mle`), projections onto the simplex
(:mod:`~ldpstream.estimators.numerics.simplex`) and the estimators' variances
(:mod:`~ldpstream.estimators.numerics.variance`).
"""
