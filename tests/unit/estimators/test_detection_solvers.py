"""The solvers of :func:`ldpstream.estimators.detection.detect`: the screen's ``nn_lasso`` (its minimizer against
scipy's bounded L-BFGS-B on the same objective and against the optimality conditions, the same from a dense ``G``
and from the sparse design), ``nonnegative_quadratic`` (against NNLS on the design itself) and the full weighted
least squares (against ``numpy.linalg.inv``)."""

import numpy as np
import pytest
import scipy.sparse as sp
from scipy import optimize

from ldpstream.estimators.detection import (
    WeightedColumns,
    _full_least_squares,
    nn_lasso,
    nonnegative_quadratic,
)


def _problem(seed: int, rows: int = 400, cols: int = 120) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A sparse non-negative truth under a 0/1 design: ``G = XᵀX``, ``g = Xᵀz``, penalty ``2·sqrt(G_ss)``."""
    rng = np.random.default_rng(seed)
    X = (rng.random((rows, cols)) < 0.1).astype(np.float64)
    truth = np.zeros(cols)
    truth[rng.choice(cols, 8, replace=False)] = rng.uniform(0.5, 2.0, 8)
    z = X @ truth + rng.normal(0.0, 1.0, rows)
    G = X.T @ X
    return G, X.T @ z, 2.0 * np.sqrt(np.diag(G))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_minimizer_matches_scipy_bounded_quasi_newton(seed):
    G, g, penalty = _problem(seed)

    def objective(x: np.ndarray) -> tuple[float, np.ndarray]:
        return float(0.5 * x @ G @ x - g @ x + penalty @ x), G @ x - g + penalty

    ref = optimize.minimize(objective, np.zeros(g.size), jac=True, method="L-BFGS-B",
                            bounds=[(0.0, None)] * g.size, options={"ftol": 1e-15, "gtol": 1e-12, "maxiter": 10_000})
    x, _it = nn_lasso(G, g, penalty, tol=1e-12, max_iter=20_000)
    assert 0 < np.count_nonzero(x) < g.size / 4  # the sparse products are the ones exercised
    assert objective(x)[0] <= ref.fun + 1e-9 * abs(ref.fun)
    np.testing.assert_allclose(x, ref.x, atol=1e-5)


@pytest.mark.parametrize("seed", [3, 4])
def test_the_sparse_design_gives_the_dense_minimizer_and_meets_the_optimality_conditions(seed):
    rng = np.random.default_rng(seed)
    X = sp.random(900, 700, density=0.02, random_state=rng, data_rvs=lambda n: np.ones(n), format="csc")
    w = rng.uniform(0.5, 2.0, 900)
    truth = np.zeros(700)
    truth[rng.choice(700, 12, replace=False)] = rng.uniform(1.0, 3.0, 12)
    z = X @ truth + rng.normal(0.0, 1.0 / np.sqrt(w))
    dense, implicit = WeightedColumns(X, w, dense=True), WeightedColumns(X, w, dense=False)
    assert implicit.full is None
    np.testing.assert_allclose(implicit.diagonal, np.diag(dense.full), rtol=1e-12)
    g = X.T @ (w * z)
    penalty = 1.645 * np.sqrt(implicit.diagonal)
    x_dense, _ = nn_lasso(dense.full, g, penalty)
    x_sparse, rounds = nn_lasso(implicit, g, penalty)
    assert rounds > 1  # the working set grew
    np.testing.assert_allclose(x_sparse, x_dense, rtol=1e-8, atol=1e-10)
    gradient = (dense.full @ x_dense - g + penalty) / np.sqrt(implicit.diagonal)
    assert gradient[x_dense == 0].min() > -1e-8  # no zero coordinate wants to grow
    np.testing.assert_allclose(gradient[x_dense > 0], 0.0, atol=1e-8)  # the support is stationary


def test_nonnegative_quadratic_is_nnls_on_the_design():
    rng = np.random.default_rng(6)
    A = rng.normal(size=(300, 40))
    y = A @ np.maximum(rng.normal(size=40), 0.0) + rng.normal(size=300)
    reference, _ = optimize.nnls(A, y)
    np.testing.assert_allclose(nonnegative_quadratic(A.T @ A, A.T @ y), reference, rtol=1e-9, atol=1e-12)


def test_full_least_squares_is_the_inverse_gram_solution_and_its_diagonal():
    rng = np.random.default_rng(5)
    X = (rng.random((600, 150)) < 0.05).astype(np.float64)
    w = rng.uniform(0.5, 2.0, 600)
    G = X.T @ (X * w[:, None])
    g = rng.normal(size=150)
    result = _full_least_squares(G, g, 600, 0.5, 1e6)
    assert result is not None
    inverse = np.linalg.inv(G)
    np.testing.assert_allclose(result[0], inverse @ g, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(result[1], np.sqrt(np.diag(inverse)), rtol=1e-9)
    # refused: a repeated column (singular), a large variance inflation factor, too many columns for the rows
    repeated = np.block([[G, G[:, :1]], [G[:1, :], G[:1, :1]]])
    assert _full_least_squares(repeated, np.append(g, 0.0), 600, 0.5, 1e6) is None
    vif = np.diag(G) * np.diag(inverse)
    assert _full_least_squares(G, g, 600, 0.5, 0.5 * float(vif.max())) is None
    assert _full_least_squares(G, g, 250, 0.5, 1e6) is None
