"""Channel helpers the privacy tests share: the worst-case log likelihood ratio of a channel matrix, and the
2×2 symmetric bit flip."""

from __future__ import annotations

import numpy as np

from ldpstream.mechanisms.rates import bit_rates


def max_log_ratio(channel: np.ndarray) -> float:
    """``max over outputs y and inputs x, x' of ln Q(y|x) − ln Q(y|x')`` (rows are inputs)."""
    logq = np.log(channel)
    return float((logq.max(axis=0) - logq.min(axis=0)).max())


def flip_matrix(epsilon_bit: float) -> np.ndarray:
    """2×2 symmetric bit flip, row = input bit, column = output bit."""
    keep, other = bit_rates(epsilon_bit)
    return np.array([[keep, other], [other, keep]])
