"""Construction, validation, factory errors and deterministic behaviour of encoders (round trips, immutability,
shapes and sketches of every mechanism: tests/unit/mechanisms/test_conformance.py)."""


import numpy as np
import pytest
import scipy.sparse as sp

from ldpstream.errors import ParameterError
from ldpstream.mechanisms import (
    KRR,
    ORR,
    SECURE,
    KRappor,
    ORappor,
    Rappor,
    make_mechanism,
)


def test_factory_errors():
    with pytest.raises(ParameterError, match="unknown mechanism"):
        make_mechanism({"mechanism": "laplace", "epsilon": 1.0})
    with pytest.raises(ParameterError, match="'mechanism'"):
        make_mechanism({"k": 2, "epsilon": 1.0})
    with pytest.raises(ParameterError, match="unknown parameter"):
        make_mechanism({"mechanism": "krr", "k": 2, "epsilon": 1.0, "cohorts": 3})
    with pytest.raises(ParameterError, match="missing"):
        make_mechanism({"mechanism": "orr", "k": 2, "epsilon": 1.0})
    with pytest.raises(ParameterError):
        make_mechanism({"mechanism": "krr", "k": 1, "epsilon": 1.0})


@pytest.mark.parametrize(
    ("factory", "match"),
    [
        (lambda: KRR(1, 1.0), "k must be"),
        (lambda: KRR(2.5, 1.0), "k must be an integer"),
        (lambda: KRR(True, 1.0), "k must be an integer"),
        (lambda: KRR(4, 0.0), "epsilon"),
        (lambda: KRR(4, float("inf")), "epsilon"),
        (lambda: KRR(4, float("nan")), "epsilon"),
        (lambda: KRR(4, "1"), "epsilon"),
        (lambda: KRappor(1, 1.0), "k must be"),
        (lambda: ORR(4, 1.0, 0), "cohorts"),
        (lambda: ORR(4, 1.0, 2, support=0), "support"),
        (lambda: ORappor(4, 1.0, 2, hashes=0), "hashes"),
        (lambda: ORappor(4, 1.0, 2, hashes=5), "hashes"),
        (lambda: Rappor(16, 2, 8, p=-0.1, q=0.75, f=0.5), "p must be"),
        (lambda: Rappor(16, 2, 8, p=0.5, q=1.5, f=0.5), "q must be"),
        (lambda: Rappor(16, 2, 8, p=0.5, q=0.75, f=1.0), "f must be"),
        (lambda: Rappor(16, 0, 8, p=0.5, q=0.75, f=0.5), "hashes"),
    ],
)
def test_validation_errors(factory, match):
    with pytest.raises(ParameterError, match=match):
        factory()


def test_numpy_parameters_are_normalized():
    m = KRR(np.int64(5), np.float32(1.5))
    assert type(m.k) is int and type(m.epsilon) is float
    assert m == KRR(5, float(np.float32(1.5)))


def test_krr_encode_and_batch():
    m = KRR(5, 1.0)
    assert 0 <= m.encode(3) < 5
    out = m.encode_batch(np.array([0, 1, 4, 4]), np.random.default_rng(1))
    assert out.shape == (4,) and out.dtype == np.int64 and out.min() >= 0 and out.max() < 5
    again = m.encode_batch(np.array([0, 1, 4, 4]), np.random.default_rng(1))
    np.testing.assert_array_equal(out, again)
    with pytest.raises(ParameterError):
        m.encode_batch(np.array([5]), SECURE)
    with pytest.raises(ParameterError):
        m.encode_batch(np.array([0.5]), SECURE)
    assert m.encode_batch(np.array([], dtype=np.int64), SECURE).shape == (0,)
    assert sp.issparse(m.design_matrix()) and m.design_matrix().shape == (5, 5)


def test_krappor_encode_and_batch():
    m = KRappor(6, 1.0)
    one = m.encode(2)
    assert one.shape == (6,) and one.dtype == bool
    out = m.encode_batch(np.array([0, 5]), np.random.default_rng(0))
    assert out.shape == (2, 6) and out.dtype == bool


def test_orr_open_encoding_and_tables():
    m = ORR(k=8, epsilon=2.0, cohorts=4)
    cands = ["a", "b", "c"]
    table = m.symbol_table(cands)
    assert table.shape == (4, 3) and table.min() >= 0 and table.max() < 8
    cohort, symbol = m.encode("b")
    assert 0 <= cohort < 4 and 0 <= symbol < 8
    assert m.encode("b", cohort=3)[0] == 3
    cohorts, symbols = m.encode_batch(np.array([0, 1, 2, 2]), np.random.default_rng(2), table=table)
    assert cohorts.shape == symbols.shape == (4,)
    x = m.design_matrix(table)
    assert isinstance(x, sp.csr_matrix) and x.shape == (32, 3)
    np.testing.assert_array_equal(np.asarray(x.sum(axis=0)).ravel(), [4, 4, 4])  # C ones per column
    for c in range(4):
        for s in range(3):
            assert x[c * 8 + table[c, s], s] == 1
    assert (m.design_matrix(cands) != x).nnz == 0
    # encode_values hashes distinct values once and agrees with a table-based encode (same rng stream)
    vals = ["c", "a", "c", "c", b"a"]
    c1, s1 = m.encode_values(vals, np.random.default_rng(7))
    c2, s2 = m.encode_batch(np.array([0, 1, 0, 0, 1]), np.random.default_rng(7), table=m.symbol_table(["c", "a"]))
    np.testing.assert_array_equal(c1, c2)
    np.testing.assert_array_equal(s1, s2)
    with pytest.raises(ParameterError):
        m.encode_batch(np.array([0]), SECURE)  # open alphabet needs a table
    with pytest.raises(ParameterError):
        m.encode_batch(np.array([0]), SECURE, cohorts=[4], table=table)


def test_orr_closed_defaults():
    m = ORR(k=8, epsilon=2.0, cohorts=3, support=20)
    assert m.symbol_table().shape == (3, 20)
    np.testing.assert_array_equal(m.symbol_table([5, 2]), m.symbol_table()[:, [5, 2]])
    cohort, symbol = m.encode(19)
    assert 0 <= cohort < 3 and 0 <= symbol < 8
    with pytest.raises(ParameterError):
        m.encode(20)
    assert m.design_matrix().shape == (24, 20)


def test_orappor_encoding_and_tables():
    m = ORappor(k=16, epsilon=2.0, cohorts=3, hashes=2)
    cands = ["a", "b", "c", "d"]
    table = m.bloom_table(cands)
    assert table.shape == (3, 4, 2)
    x = m.design_matrix(table)
    assert x.shape == (48, 4) and x.max() == 1
    cohort, bits = m.encode("a")
    assert 0 <= cohort < 3 and bits.shape == (16,) and bits.dtype == bool
    cohorts, reports = m.encode_batch(
        np.array([0, 3, 3]), np.random.default_rng(0), cohorts=np.array([0, 1, 2]), table=table
    )
    np.testing.assert_array_equal(cohorts, [0, 1, 2])
    assert reports.shape == (3, 16)
    closed = ORappor(k=16, epsilon=2.0, cohorts=3, hashes=1, support=30)
    assert closed.bloom_table().shape == (3, 30, 1)
    assert closed.encode(29)[1].shape == (16,)


def test_simulate_sketch_requires_generator():
    with pytest.raises(ParameterError, match="Generator"):
        KRR(4, 1.0).simulate_sketch([1, 2, 3, 4], SECURE)  # type: ignore[arg-type]


def test_sketch_shapes_and_totals():
    rng = np.random.default_rng(3)
    assert KRR(4, 1.0).simulate_sketch([10, 0, 5, 0], rng).sum() == 15
    s = KRappor(4, 1.0).simulate_sketch([10, 0, 5, 0], rng)
    assert s.shape == (1, 5) and s[0, 0] == 15
    orr = ORR(8, 1.0, 4, support=10)
    s = orr.simulate_sketch(np.full(10, 3), rng)
    assert s.shape == (4, 8) and s.sum() == 30
    s = orr.simulate_sketch(np.ones((4, 10), dtype=np.int64), rng)
    np.testing.assert_array_equal(s.sum(axis=1), [10, 10, 10, 10])
    o = ORappor(16, 1.0, 4, hashes=2)
    t = o.bloom_table(["a", "b"])
    s = o.simulate_sketch([7, 9], rng, t)
    assert s.shape == (4, 17) and s[:, 0].sum() == 16
    r = Rappor(16, 2, 4, 0.5, 0.75, 0.5)
    s = r.simulate_sketch(np.array([[1, 2], [0, 0], [3, 0], [0, 4]]), rng, r.bloom_table(["a", "b"]))
    np.testing.assert_array_equal(s[:, 0], [3, 0, 3, 4])
    with pytest.raises(ParameterError):
        orr.simulate_sketch(np.full(9, 3), rng)
