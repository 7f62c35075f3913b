"""Tests of Google's association file formats (ldpstream.interop.rappor: schema, assoc_reports, maps,
assoc_results, params dir) against small files written by hand in Google's exact form, and of the
one-bit boolean mechanism Google's association tools use."""

from __future__ import annotations

import hashlib
import hmac
import json
import struct

import numpy as np
import pytest

from ldpstream.errors import ParameterError, ReportFormatError
from ldpstream.interop.rappor.assoc_reports import AssocReports, read_assoc_reports, write_assoc_reports
from ldpstream.interop.rappor.assoc_results import read_assoc_results, write_assoc_metrics, write_assoc_results
from ldpstream.interop.rappor.maps import create_bool_map
from ldpstream.interop.rappor.params import ParamsFile, read_params_dir
from ldpstream.interop.rappor.schema import SchemaVariable, find_variable, read_schema, write_schema
from ldpstream.mechanisms.rappor_boolean import RapporBoolean

# Google's tests/rappor_sim.py --assoc-testdata input files, as bin/test.sh writes them.
GOOGLE_SCHEMA = "metric, var, var_type, params\nm,domain,string,m_params\nm,flag..HTTPS,boolean,m_params\n"
GOOGLE_PARAMS = "k,h,m,p,q,f\n8,1,128,0.25,0.75,0.5\n"


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


# --- rappor-vars.csv -------------------------------------------------------------------------------------


def test_schema_google_form(tmp_path):
    rows = read_schema(_write(tmp_path, "rappor-vars.csv", GOOGLE_SCHEMA))
    assert rows == [SchemaVariable("m", "domain", "string", "m_params"),
                    SchemaVariable("m", "flag..HTTPS", "boolean", "m_params")]
    assert find_variable(rows, "m", "flag..HTTPS").var_type == "boolean"
    with pytest.raises(ParameterError, match=r"couldn't find metric 'm', var 'nope'.*domain"):
        find_variable(rows, "m", "nope")
    with pytest.raises(ParameterError, match="no such metric"):
        find_variable(rows, "x", "domain")


def test_schema_reads_any_type(tmp_path):
    rows = read_schema(_write(tmp_path, "s.csv", "metric, var, var_type, params\nm,a,Ordinal,p\n"))
    assert rows == [SchemaVariable("m", "a", "ordinal", "p")]


def test_schema_round_trip_and_crlf(tmp_path):
    rows = [SchemaVariable("m", "a", "string", "p1"), SchemaVariable("m", "b", "boolean", "p2")]
    write_schema(tmp_path / "s.csv", rows)
    assert (tmp_path / "s.csv").read_text().splitlines()[0] == "metric, var, var_type, params"
    assert read_schema(tmp_path / "s.csv") == rows
    crlf = _write(tmp_path, "c.csv", GOOGLE_SCHEMA.replace("\n", "\r\n"))
    assert len(read_schema(crlf)) == 2


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("metric, var, params\nm,a,p\n", "lacks column"),
        ("metric, var, var_type, params\nm,a,string,p\nm,a,boolean,p\n", r":3: metric 'm' var 'a' repeats line 2"),
        ("metric, var, var_type, params\nm,,string,p\n", r":2: empty var"),
        ("metric, var, var_type, params\nm,a,string\n", r":2: expected 4 columns"),
        ("", "empty schema"),
    ],
)
def test_schema_errors_name_the_line(tmp_path, text, message):
    with pytest.raises(ReportFormatError, match=message):
        read_schema(_write(tmp_path, "rappor-vars.csv", text))


# --- params dir ------------------------------------------------------------------------------------------


def test_params_dir(tmp_path):
    _write(tmp_path, "m_params.csv", GOOGLE_PARAMS)
    assert read_params_dir(tmp_path, "m_params") == ParamsFile(8, 1, 128, 0.25, 0.75, 0.5)
    with pytest.raises(ParameterError, match="does not exist"):
        read_params_dir(tmp_path, "other")
    with pytest.raises(ParameterError, match="not a directory"):
        read_params_dir(tmp_path / "m_params.csv", "m_params")
    with pytest.raises(ParameterError, match="not a file name"):
        read_params_dir(tmp_path, "../m_params")


# --- reports -----------------------------------------------------------------------------------------------

# Rows as Google's rappor_sim.py --assoc-testdata writes them (csv.writer: CRLF).
GOOGLE_REPORTS = "client,cohort,domain,flag..HTTPS\r\nc0,17,01011010,1\r\nc1,127,10000001,0\r\nc2,0,00000000,1\r\n"


def test_reports_google_form(tmp_path):
    r = read_assoc_reports(_write(tmp_path, "reports.csv", GOOGLE_REPORTS), {"domain": 8, "flag..HTTPS": 1})
    assert r.clients == ["c0", "c1", "c2"]
    assert r.cohorts.tolist() == [17, 127, 0]
    # most significant bit first: "01011010" has bits 1, 3, 4, 6 set
    assert np.flatnonzero(r.variables["domain"][0]).tolist() == [1, 3, 4, 6]
    assert np.flatnonzero(r.variables["domain"][1]).tolist() == [0, 7]
    assert r.variables["flag..HTTPS"][:, 0].tolist() == [1, 0, 1]
    assert r.removed == 0
    write_assoc_reports(tmp_path / "out.csv", r, ["domain", "flag..HTTPS"])
    assert (tmp_path / "out.csv").read_text() == GOOGLE_REPORTS.replace("\r\n", "\n")


def test_reports_extra_columns_and_order(tmp_path):
    text = "cohort,flag..HTTPS,other,client,domain\n3,1,x,c9,0011\n"
    r = read_assoc_reports(_write(tmp_path, "r.csv", text), {"domain": 4, "flag..HTTPS": 1})
    assert r.clients == ["c9"] and r.cohorts.tolist() == [3]
    assert np.flatnonzero(r.variables["domain"][0]).tolist() == [0, 1]


def test_reports_bad_rows(tmp_path):
    # bin/test.sh's bad rows: each misses one of the columns
    text = GOOGLE_REPORTS + "c0,0,10101010,\r\nc0,0,,0\r\n"
    path = _write(tmp_path, "r.csv", text)
    widths = {"domain": 8, "flag..HTTPS": 1}
    with pytest.raises(ReportFormatError, match=r"r.csv:5: empty \['flag..HTTPS'\] \(2 such bad row"):
        read_assoc_reports(path, widths)
    r = read_assoc_reports(path, widths, remove_bad_rows=True)
    assert len(r) == 3 and r.removed == 2


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("c0,1,0101101,1\n", r"r.csv:2: column 'domain'.*expected 8 bits"),
        ("c0,1,01011010,1\nc1,1,0101101x,1\n", r"r.csv:3: column 'domain'.*digits must be 0 or 1"),
        ("c0,1,01011010,2\n", r"r.csv:2: column 'flag..HTTPS'.*digits must be 0 or 1"),
        ("c0,1,01011010,TRUE\n", r"r.csv:2: column 'flag..HTTPS'.*expected 1 bits"),
        ("c0,x,01011010,1\n", r"r.csv:2: cohort must be a non-negative integer, got 'x'"),
        ("c0,-1,01011010,1\n", r"r.csv:2: cohort must be a non-negative integer"),
        ("c0,1,01011010\n", r"r.csv:2: expected 4 columns, got 3"),
    ],
)
def test_reports_errors_name_the_line(tmp_path, body, message):
    path = _write(tmp_path, "r.csv", "client,cohort,domain,flag..HTTPS\n" + body)
    with pytest.raises(ReportFormatError, match=message):
        read_assoc_reports(path, {"domain": 8, "flag..HTTPS": 1})


def test_reports_missing_variable_column(tmp_path):
    path = _write(tmp_path, "r.csv", "client,cohort,domain\nc0,1,01011010\n")
    with pytest.raises(ReportFormatError, match=r"lacks the variable column\(s\) \['flag..HTTPS'\]"):
        read_assoc_reports(path, {"domain": 8, "flag..HTTPS": 1})


# --- maps --------------------------------------------------------------------------------------------------


def test_bool_map_is_googles():
    # decode_assoc.R CreateAssocBoolMap: per cohort a 1 x 2 map, (1, 2) = TRUE set, FALSE sets nothing
    cmap = create_bool_map(ParamsFile(8, 1, 4, 0.25, 0.75, 0.5))
    assert cmap.strings == ["FALSE", "TRUE"]
    assert cmap.matrix.toarray().tolist() == [[0, 1]] * 4


# --- assoc-results.csv / assoc-metrics.json ---------------------------------------------------------------


def test_assoc_results_google_header_and_order(tmp_path):
    prop = np.array([[0.25, 0.05], [0.125, 0.075], [0.5, 0.0]])  # [var1, var2]
    cols = {"proportion": prop, "std_error": prop / 10, "low_95": prop / 2, "high_95": np.minimum(prop * 2, 1)}
    write_assoc_results(tmp_path / "a.csv", "domain", "flag..HTTPS", ["google.com", 'q"q', "Other"],
                        ["TRUE", "FALSE"], cols)
    # R: write.csv(as.data.frame(as.table(fit)), row.names = FALSE), fit indexed [var2, var1]
    assert (tmp_path / "a.csv").read_text() == (
        '"flag..HTTPS","domain","proportion","std_error","low_95","high_95"\n'
        '"TRUE","google.com",0.25,0.025,0.125,0.5\n'
        '"FALSE","google.com",0.05,0.005,0.025,0.1\n'
        '"TRUE","q""q",0.125,0.0125,0.0625,0.25\n'
        '"FALSE","q""q",0.075,0.0075,0.0375,0.15\n'
        '"TRUE","Other",0.5,0.05,0.25,1\n'
        '"FALSE","Other",0,0,0,0\n'
    )
    back = read_assoc_results(tmp_path / "a.csv")
    assert back["var2"] == "flag..HTTPS" and back["var1"] == "domain"
    assert back["var1_values"][2] == 'q"q' and back["var2_values"][:2] == ["TRUE", "FALSE"]
    assert back["proportion"].tolist() == prop.ravel().tolist()


def test_assoc_results_reads_googles_three_columns(tmp_path):
    text = '"flag..HTTPS","domain","proportion"\n"TRUE","bing.com",0.2718526\n"FALSE","bing.com",0.1404581\n'
    back = read_assoc_results(_write(tmp_path, "g.csv", text))
    assert back["proportion"].tolist() == [0.2718526, 0.1404581] and "std_error" not in back
    with pytest.raises(ReportFormatError, match=r"g2.csv:2: proportion must be a number"):
        read_assoc_results(_write(tmp_path, "g2.csv", text.replace("0.2718526", "x")))


def test_assoc_metrics_json(tmp_path):
    write_assoc_metrics(tmp_path / "m.json", {"num_reports": np.int64(5), "x": float("nan"), "d": [2, 3]})
    assert json.loads((tmp_path / "m.json").read_text()) == {"num_reports": 5, "x": None, "d": [2, 3]}


# --- the one-bit boolean -----------------------------------------------------------------------------------


def test_boolean_rates_are_raports_with_one_bit():
    m = RapporBoolean(cohorts=4, p=0.25, q=0.75, f=0.5)
    # q* = (1 - f/2) q + (f/2) p, p* = (1 - f/2) p + (f/2) q (docs/math/mechanisms.md)
    assert m.q_star == pytest.approx(0.75 * 0.75 + 0.25 * 0.25)
    assert m.p_star == pytest.approx(0.75 * 0.25 + 0.25 * 0.75)
    assert m.epsilon == pytest.approx(np.log(m.q_star * (1 - m.p_star) / (m.p_star * (1 - m.q_star))))
    assert m.epsilon_inf == pytest.approx(2 * np.log(0.75 / 0.25))
    assert m.design_matrix().toarray().tolist() == [[0, 1]] * 4
    with pytest.raises(ParameterError):
        RapporBoolean(cohorts=4, p=0.75, q=0.25, f=0.5)


def test_boolean_encode_rates():
    m = RapporBoolean(cohorts=3, p=0.25, q=0.75, f=0.5)
    n = 200_000
    rng = np.random.default_rng(3)
    values = np.repeat([0, 1], n // 2)
    cohorts, bits = m.encode_batch(values, rng)
    assert bits.shape == (n, 1) and set(np.unique(cohorts)) == {0, 1, 2}
    for v, rate in ((0, m.p_star), (1, m.q_star)):
        got = bits[values == v, 0].mean()
        assert abs(got - rate) < 4 * np.sqrt(rate * (1 - rate) / (n // 2))  # 4 binomial standard errors
    sketch = m.simulate_sketch(np.array([60_000, 40_000]), rng)
    assert sketch.shape == (3, 2) and sketch[:, 0].sum() == 100_000
    expect = 60_000 * m.p_star + 40_000 * m.q_star
    var = 60_000 * m.p_star * (1 - m.p_star) + 40_000 * m.q_star * (1 - m.q_star)
    assert abs(sketch[:, 1].sum() - expect) < 4 * np.sqrt(var)


def test_boolean_client_is_googles_encode_bits():
    # Google's Encoder(num_bloombits=1)._internal_encode_bits(v): message be32(v), HMAC-SHA256 byte 0:
    # uniform = byte & 1, f_mask = (byte >> 1) < 128 f, prr = (v & ~f_mask) | (uniform & f_mask)
    m = RapporBoolean(cohorts=1, p=0.0, q=1.0, f=0.5)  # p = 0, q = 1: the IRR is the PRR
    for secret in (b"c0", b"c1", b"c7", b"client-42"):
        for v in (0, 1):
            byte = hmac.new(secret, struct.pack(">L", v), hashlib.sha256).digest()[0]
            f_mask = int((byte >> 1) < 64)
            prr = (v & ~f_mask) | ((byte & 1) & f_mask)
            assert m.client_encoder(secret, 0).encode_bits(v) == prr


def test_reports_round_trip_dataclass(tmp_path):
    r = AssocReports(["a", "b"], np.array([0, 5]), {"x": np.array([[1, 0, 1], [0, 0, 1]], dtype=np.uint8),
                                                     "y": np.array([[1], [0]], dtype=np.uint8)})
    write_assoc_reports(tmp_path / "r.csv", r)
    assert (tmp_path / "r.csv").read_text() == "client,cohort,x,y\na,0,101,1\nb,5,100,0\n"
    back = read_assoc_reports(tmp_path / "r.csv", {"x": 3, "y": 1})
    assert np.array_equal(back.variables["x"], r.variables["x"])
