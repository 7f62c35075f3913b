"""Apple's count-mean estimate of a hashed one-bucket sketch (CMS, HCMS after its transform), Apple Differential
Privacy Team 2017 (docs/math/estimators.md#apples-count-mean-estimate).

For a bit sketch ``[n_c, T_{c,0}, …, T_{c,m−1}]`` per cohort (hash function) c, with margin rates (q*, p*):
``x̃_{c,u} = (T_{c,u} − n_c p*)/(q* − p*)`` is an unbiased count of cohort c's clients hashed to bucket u, and

    f̂(d) = (m/(m − 1)) · (Σ_c x̃_{c, h_c(d)} / n − 1/m),

which is unbiased over the random choice of the hash functions (another value shares d's bucket with
probability 1/m). With the hash functions fixed it keeps the bias of d's actual collisions; the candidate
decoders (least squares against the same design) remove it, which is why ldpstream publishes those.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp
from numpy.typing import ArrayLike

from ldpstream.errors import ParameterError

__all__ = ["count_mean"]


def count_mean(sketch: ArrayLike, design: Any, q_star: float, p_star: float) -> np.ndarray:
    """Apple's count-mean frequencies of the candidates of ``design`` (``(C·m, S)``, one 1 per cohort and column:
    the bucket of each candidate) from a ``(C, m + 1)`` bit sketch (module docstring)."""
    arr = np.asarray(sketch, dtype=np.float64)
    if arr.ndim != 2:
        raise ParameterError("a count-mean sketch is (C, m + 1)")
    C, m = arr.shape[0], arr.shape[1] - 1
    X = sp.csr_matrix(design)
    if X.shape[0] != C * m:
        raise ParameterError(f"design has {X.shape[0]} rows, the sketch {C * m} cells")
    n = float(arr[:, 0].sum())
    if n <= 0:
        raise ParameterError("no reports to decode")
    debiased = (arr[:, 1:] - arr[:, :1] * p_star) / (q_star - p_star)
    f: np.ndarray = (m / (m - 1)) * (np.asarray(X.T @ debiased.ravel()) / n - 1.0 / m)
    return f
