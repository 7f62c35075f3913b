"""Tests for ldpstream.interop.rappor: Google RAPPOR file formats, read literally as Google's tools write them."""

from __future__ import annotations

import csv
import hashlib
import io
import struct

import numpy as np
import pytest

from ldpstream.errors import ParameterError, ReportFormatError
from ldpstream.interop.rappor import (
    ParamsFile,
    Reports,
    Values,
    bits_from_strings,
    map_rows,
    read_candidates,
    read_counts,
    read_map,
    read_params,
    read_reports,
    read_results,
    read_values,
    strings_from_bits,
    sum_bits,
    write_counts,
    write_map,
    write_params,
    write_reports,
    write_results,
    write_values,
)


def _write(tmp_path, name, data: bytes):
    path = tmp_path / name
    path.write_bytes(data)
    return path


# --- params.csv ---------------------------------------------------------------------------------------


def test_params_as_r_writes_them(tmp_path):
    # Google's apps/rappor-analysis/params.csv: quoted header (R write.csv), LF
    path = _write(tmp_path, "params.csv", b'"k","h","m","p","q","f"\n128,2,8,0.5,0.75,0\n')
    assert read_params(path) == ParamsFile(128, 2, 8, 0.5, 0.75, 0.0)


def test_params_python2_crlf_no_trailing_newline(tmp_path):
    path = _write(tmp_path, "params.csv", b"k,h,m,p,q,f\r\n32,2,32,0.25,0.75,0.5")
    p = read_params(path)
    assert (p.k, p.h, p.m, p.p, p.q, p.f) == (32, 2, 32, 0.25, 0.75, 0.5)
    # effective rates q*, p* (docs/math/mechanisms.md, "RAPPOR")
    assert p.q_star == pytest.approx(0.75 * 0.75 + 0.25 * 0.25)
    assert p.p_star == pytest.approx(0.75 * 0.25 + 0.25 * 0.75)


def test_params_roundtrip_and_errors(tmp_path):
    p = ParamsFile(16, 2, 4, 0.25, 0.75, 0.5)
    path = tmp_path / "params.csv"
    write_params(path, p)
    assert path.read_text() == "k,h,m,p,q,f\n16,2,4,0.25,0.75,0.5\n"
    assert read_params(path) == p
    bad = _write(tmp_path, "bad.csv", b"k,h,m,q,p,f\n1,1,1,0.5,0.5,0\n")
    with pytest.raises(ReportFormatError, match="header must be k,h,m,p,q,f"):
        read_params(bad)
    bad2 = _write(tmp_path, "bad2.csv", b"k,h,m,p,q,f\n1.5,1,1,0.5,0.5,0\n")
    with pytest.raises(ReportFormatError, match="k must be an integer"):
        read_params(bad2)
    with pytest.raises(ParameterError):
        ParamsFile(16, 2, 4, 1.5, 0.75, 0.5)


# --- counts.csv ---------------------------------------------------------------------------------------


def test_counts_python2_crlf(tmp_path):
    # sum_bits.py output (Python 2 csv.writer: CRLF), m = 2 cohorts, k = 4 bits
    path = _write(tmp_path, "counts.csv", b"10,1,2,3,4\r\n5,0,5,1,0\r\n")
    params = ParamsFile(4, 1, 2, 0.25, 0.75, 0.5)
    counts = read_counts(path, params)
    np.testing.assert_array_equal(counts, [[10, 1, 2, 3, 4], [5, 0, 5, 1, 0]])
    assert counts.dtype == np.int64
    out = tmp_path / "out.csv"
    write_counts(out, counts)
    assert out.read_text() == "10,1,2,3,4\n5,0,5,1,0\n"


def test_counts_shape_checks(tmp_path):
    path = _write(tmp_path, "counts.csv", b"10,1,2,3,4\n")
    with pytest.raises(ReportFormatError, match="expected m = 2"):
        read_counts(path, ParamsFile(4, 1, 2, 0.25, 0.75, 0.5))
    with pytest.raises(ReportFormatError, match="k \\+ 1 = 6"):
        read_counts(path, ParamsFile(5, 1, 1, 0.25, 0.75, 0.5))
    bad = _write(tmp_path, "bad.csv", b"3,1,4\n2,x,1\n")
    with pytest.raises(ReportFormatError, match=":2: counts must be integers"):
        read_counts(bad)
    over = _write(tmp_path, "over.csv", b"3,1,4\n")
    with pytest.raises(ReportFormatError, match="exceeds"):
        read_counts(over)


# --- map.csv ------------------------------------------------------------------------------------------


def google_bloom_bits(word: str, cohort: int, h: int, k: int) -> list[int]:
    """Independent reference for Google's get_bloom_bits: MD5(be32(cohort) ‖ word), byte i mod k."""
    digest = hashlib.md5(struct.pack(">I", cohort) + word.encode()).digest()
    return [digest[i] % k for i in range(h)]


def test_map_written_like_hash_candidates(tmp_path):
    params = ParamsFile(16, 2, 3, 0.25, 0.75, 0.5)
    words = ["apple", "banana, split"]
    table = np.array(
        [[google_bloom_bits(w, c, params.h, params.k) for w in words] for c in range(params.m)]
    )  # (C, S, h)
    path = tmp_path / "map.csv"
    write_map(path, words, table, params.k)
    rows = list(csv.reader(io.StringIO(path.read_text())))
    assert rows[1][0] == "banana, split"  # quoted by csv, read back intact
    for s, w in enumerate(words):
        expected = [c * 16 + b + 1 for c in range(3) for b in google_bloom_bits(w, c, 2, 16)]
        assert [int(x) for x in rows[s][1:]] == expected
    cmap = read_map(path, params)
    assert cmap.strings == words
    X = cmap.matrix.toarray()
    assert X.shape == (48, 2)
    for s, w in enumerate(words):
        for c in range(3):
            for b in google_bloom_bits(w, c, 2, 16):
                assert X[c * 16 + b, s] == 1
        assert X[:, s].sum() == len({(c, b) for c in range(3) for b in google_bloom_bits(w, c, 2, 16)})


def test_map_as_r_writes_it(tmp_path):
    # R write.csv style: quoted strings, an empty (NA) cell where two hashes collided, a duplicate row,
    # CRLF line ends and no newline at the end.
    text = b'"V_1",3,7,18,20\r\n"V_2",5,,17,32\r\n"V_1",1,2,17,18\r\n"",1,2,17,18'
    path = _write(tmp_path, "map.csv", text)
    params = ParamsFile(16, 2, 2, 0.25, 0.75, 0.5)
    cmap = read_map(path, params)
    assert cmap.strings == ["V_1", "V_2", ""]
    X = cmap.matrix.toarray()
    assert sorted(np.flatnonzero(X[:, 0]) + 1) == [3, 7, 18, 20]
    assert sorted(np.flatnonzero(X[:, 1]) + 1) == [5, 17, 32]
    np.testing.assert_array_equal(map_rows(np.array([[[2, 6]], [[1, 3]]]), 16), [[3, 7, 18, 20]])


def test_map_errors(tmp_path):
    params = ParamsFile(16, 2, 2, 0.25, 0.75, 0.5)
    short = _write(tmp_path, "m1.csv", b"a,1,2,3\n")
    with pytest.raises(ReportFormatError, match="m·h = 4"):
        read_map(short, params)
    big = _write(tmp_path, "m2.csv", b"a,1,2,3,33\n")
    with pytest.raises(ReportFormatError, match=r"1\.\.m·k = 32"):
        read_map(big, params)
    word = _write(tmp_path, "m3.csv", b"a,1,2,3,x\n")
    with pytest.raises(ReportFormatError, match="integers"):
        read_map(word, params)


def test_candidates(tmp_path):
    path = _write(tmp_path, "c.txt", b"\xef\xbb\xbfalpha\r\n beta \n\nalpha\ngamma")
    assert read_candidates(path) == ["alpha", "beta", "gamma"]


# --- results.csv --------------------------------------------------------------------------------------


RESULTS_R = (
    '"string","estimate","std_error","proportion","prop_std_error","prop_low_95","prop_high_95"\n'
    '"V_1",8041.5,1054.39,0.080415,0.0105439,0.0597489559,0.1010810441\n'
    '"V_2",NA,NA,NA,NA,NA,NA\n'
)


def test_results_as_r_writes_them(tmp_path):
    path = _write(tmp_path, "results.csv", RESULTS_R.encode())
    res = read_results(path)
    assert res["string"] == ["V_1", "V_2"]
    assert res["estimate"][0] == 8041.5
    assert np.isnan(res["prop_high_95"][1])
    out = tmp_path / "out.csv"
    write_results(out, {k: (list(v) if k == "string" else v) for k, v in res.items()})
    assert out.read_text() == RESULTS_R


def test_results_quoting_of_odd_strings(tmp_path):
    out = tmp_path / "r.csv"
    write_results(out, [('say "hi", ok', 1.0, 0.5, 0.1, 0.05, 0.002, 0.198)])
    lines = out.read_text().splitlines()
    assert lines[1] == '"say ""hi"", ok",1,0.5,0.1,0.05,0.002,0.198'
    assert read_results(out)["string"] == ['say "hi", ok']


# --- reports.csv and values.csv -----------------------------------------------------------------------


REPORTS_PY2 = (
    b"client,cohort,bloom,prr,irr\r\n"
    b"c1,0,0000000000100010,0000000000100010,0100000000100110\r\n"
    b"c2,1,1000000000000001,1000000000000101,1000000000000100\r\n"
    b"c3,1,0000000000000011,0000000000000011,0000000000000001\r\n"
)


def test_reports_from_rappor_sim(tmp_path):
    path = _write(tmp_path, "reports.csv", REPORTS_PY2)
    rep = read_reports(path, k=16, cohorts=2)
    assert rep.clients == ["c1", "c2", "c3"]
    np.testing.assert_array_equal(rep.cohorts, [0, 1, 1])
    # MSB first: "0000000000100010" has bits 1 and 5 set (value 34)
    assert np.flatnonzero(rep.bloom[0]).tolist() == [1, 5]
    assert int((rep.bloom[0].astype(np.int64) << np.arange(16)).sum()) == 34
    assert np.flatnonzero(rep.irr[0]).tolist() == [1, 2, 5, 14]
    assert np.flatnonzero(rep.prr[1]).tolist() == [0, 2, 15]
    # Google's sum_bits.py on these rows
    counts = sum_bits(rep.cohorts, rep.irr, 2)
    expected = np.zeros((2, 17), dtype=np.int64)
    expected[0, 0], expected[1, 0] = 1, 2
    for bit in (1, 2, 5, 14):
        expected[0, 1 + bit] += 1
    for bit in (2, 15, 0):
        expected[1, 1 + bit] += 1
    np.testing.assert_array_equal(counts, expected)
    out = tmp_path / "out.csv"
    write_reports(out, rep)
    assert out.read_bytes() == REPORTS_PY2.replace(b"\r\n", b"\n")


def test_reports_three_column_form(tmp_path):
    path = _write(tmp_path, "r.csv", b"client,cohort,irr\nu1,0,0101\nu2,0,1111")
    rep = read_reports(path, k=4)
    assert rep.bloom is None and rep.prr is None
    np.testing.assert_array_equal(rep.irr, [[1, 0, 1, 0], [1, 1, 1, 1]])
    out = tmp_path / "o.csv"
    write_reports(out, rep)
    assert out.read_text() == "client,cohort,irr\nu1,0,0101\nu2,0,1111\n"


@pytest.mark.parametrize(
    ("row", "message"),
    [
        (b"u1,0,01x1", "digits must be 0 or 1"),
        (b"u1,0,011", "expected 4 bits"),
        (b"u1,5,0101", "outside"),
        (b"u1,zero,0101", "cohort must be an integer"),
    ],
)
def test_reports_errors(tmp_path, row, message):
    path = _write(tmp_path, "r.csv", b"client,cohort,irr\n" + row + b"\n")
    with pytest.raises(ReportFormatError, match=message):
        read_reports(path, k=4, cohorts=2)


def test_bit_string_conversion_vectorized_roundtrip():
    rng = np.random.default_rng(0)
    bits = rng.integers(0, 2, size=(1000, 37)).astype(np.uint8)
    strings = strings_from_bits(bits)
    assert all(len(s) == 37 for s in strings)
    # MSB first: the string read as a binary number is sum(bit_i 2^i)
    assert int(strings[0], 2) == int(sum(int(b) << i for i, b in enumerate(bits[0])))
    np.testing.assert_array_equal(bits_from_strings(strings, 37), bits)


def test_values_file(tmp_path):
    path = _write(tmp_path, "v.csv", b'client,cohort,value\r\nc1,0,"a,b"\r\nc2,3,v2\r\n')
    vals = read_values(path, cohorts=4)
    assert vals.clients == ["c1", "c2"] and vals.values == ["a,b", "v2"]
    np.testing.assert_array_equal(vals.cohorts, [0, 3])
    out = tmp_path / "o.csv"
    write_values(out, Values(vals.clients, vals.cohorts, vals.values))
    assert out.read_text() == 'client,cohort,value\nc1,0,"a,b"\nc2,3,v2\n'
    with pytest.raises(ReportFormatError, match="outside"):
        read_values(path, cohorts=2)


def test_sum_bits_matches_loop():
    rng = np.random.default_rng(3)
    cohorts = rng.integers(0, 5, size=500)
    irr = rng.integers(0, 2, size=(500, 8)).astype(np.uint8)
    out = sum_bits(cohorts, irr, 5)
    for c in range(5):
        assert out[c, 0] == (cohorts == c).sum()
        np.testing.assert_array_equal(out[c, 1:], irr[cohorts == c].sum(axis=0))
    with pytest.raises(ParameterError):
        sum_bits(cohorts, irr, 3)


def test_reports_dataclass_write_requires_consistent_lengths(tmp_path):
    rep = Reports(["a"], np.array([0, 1]), np.zeros((2, 4), dtype=np.uint8))
    with pytest.raises(ValueError):
        write_reports(tmp_path / "x.csv", rep)


def test_reports_with_empty_bloom_and_prr_columns(tmp_path):
    """Google's C++ client writes reports.csv with empty bloom and prr cells and only the irr bits."""
    path = _write(tmp_path, "r.csv", b"client,cohort,bloom,prr,irr\r\nu1,0,,,0101\r\nu2,1,,,1111\r\n")
    rep = read_reports(path, k=4)
    assert rep.bloom is None and rep.prr is None
    np.testing.assert_array_equal(rep.irr, [[1, 0, 1, 0], [1, 1, 1, 1]])
    np.testing.assert_array_equal(rep.cohorts, [0, 1])


def test_reports_partly_empty_bloom_column_is_refused(tmp_path):
    path = _write(tmp_path, "r.csv", b"client,cohort,bloom,prr,irr\nu1,0,,,0101\nu2,1,0001,,1111\n")
    with pytest.raises(ReportFormatError):
        read_reports(path, k=4)
