"""End-to-end tests of ``ldpstream rappor`` (encode → sum-bits → hash-candidates → decode) and of Google's
exact file formats, through ``ldpstream.cli.main``."""

from __future__ import annotations

import hashlib
import io
import struct
import sys

import numpy as np
import pytest
from scipy import stats

from ldpstream.cli import main
from ldpstream.interop.rappor import read_counts, read_reports, read_results, sum_bits

HEADER = '"string","estimate","std_error","proportion","prop_std_error","prop_low_95","prop_high_95"'


def md5_bits(word: str, cohort: int, h: int, k: int) -> list[int]:
    """Independent reference for Google's Bloom bits: MD5(be32(cohort) ‖ word), digest byte i mod k."""
    d = hashlib.md5(struct.pack(">I", cohort) + word.encode()).digest()
    return [d[i] % k for i in range(h)]


@pytest.fixture
def pipeline(tmp_path):
    """Files of a simulated RAPPOR collection: 5 heavy hitters among 30 candidates, 20000 clients."""
    (tmp_path / "params.csv").write_text("k,h,m,p,q,f\n32,2,16,0.25,0.75,0.5\n")
    rng = np.random.default_rng(7)
    n = 20_000
    cands = [f"v{i}" for i in range(30)]
    p = np.array([0.3, 0.2, 0.15, 0.1, 0.05] + [0.2 / 25] * 25)
    vals = rng.choice(30, size=n, p=p)
    lines = ["client,cohort,value"] + [f"c{i},{i % 16},{cands[v]}" for i, v in enumerate(vals)]
    (tmp_path / "values.csv").write_text("\r\n".join(lines) + "\r\n")  # CRLF like Python 2's csv
    (tmp_path / "cands.txt").write_text("\n".join(cands))
    (tmp_path / "secret.bin").write_bytes(bytes(range(32)))
    return tmp_path, cands, vals


def run(*argv: str) -> int:
    return main(["rappor", *argv])


def test_round_trip_finds_heavy_hitters(pipeline):
    d, cands, vals = pipeline
    P = str(d / "params.csv")
    assert run("encode", "--params", P, "--values", str(d / "values.csv"), "--secret-file", str(d / "secret.bin"),
               "--insecure-seed", "1", "--out", str(d / "reports.csv")) == 0
    assert run("sum-bits", "--params", P, "--reports", str(d / "reports.csv"), "--out", str(d / "counts.csv")) == 0
    assert run("hash-candidates", "--params", P, "--candidates", str(d / "cands.txt"), "--out", str(d / "map.csv")) == 0
    assert run("decode", "--params", P, "--counts", str(d / "counts.csv"), "--map", str(d / "map.csv"),
               "--out", str(d / "results.csv")) == 0

    # reports: one per value, Bloom bits are Google's MD5 bits, cohorts as given
    rep = read_reports(d / "reports.csv", 32, 16)
    assert len(rep.clients) == len(vals)
    for i in (0, 1, 2, 999):
        expected = sorted(set(md5_bits(cands[vals[i]], i % 16, 2, 32)))
        assert sorted(set(np.flatnonzero(rep.bloom[i]).tolist())) == expected
    # counts.csv is exactly the bit sums of the reports
    np.testing.assert_array_equal(read_counts(d / "counts.csv"), sum_bits(rep.cohorts, rep.irr, 16))

    text = (d / "results.csv").read_text()
    assert text.splitlines()[0] == HEADER
    res = read_results(d / "results.csv")
    assert set(res["string"][:5]) == {"v0", "v1", "v2", "v3", "v4"}
    n = len(vals)
    emp = np.bincount(vals, minlength=30) / n
    z_crit = stats.norm.isf(0.001 / 2 / 5)  # two-sided, Bonferroni over the 5 heavy hitters, α = 0.001
    for i in range(5):
        row = res["string"].index(f"v{i}")
        prop, se = res["proportion"][row], res["prop_std_error"][row]
        assert abs(prop - emp[i]) <= z_crit * se, (i, prop, emp[i], se)
        assert res["estimate"][row] == pytest.approx(prop * n, rel=1e-9)
        assert res["std_error"][row] == pytest.approx(se * n, rel=1e-9)
        # the published interval is the least-squares one (estimators/candidates.py, "Intervals"): centred on
        # the unconstrained fit, not on the constrained proportion, with the same standard error
        low, high = res["prop_low_95"][row], res["prop_high_95"][row]
        assert 0 < low <= high < 1
        assert high - low == pytest.approx(2 * 1.959964 * se, rel=1e-6)
        # a heavy hitter is detected: Bonferroni over the 30 candidates (docs/math/estimators.md)
        assert prop / se > stats.norm.isf(0.05 / 30)

    # --significant keeps the heavy hitters only among the strong ones
    assert run("decode", "--params", P, "--counts", str(d / "counts.csv"), "--map", str(d / "map.csv"),
               "--significant", "--out", str(d / "sig.csv")) == 0
    sig = read_results(d / "sig.csv")["string"]
    assert {"v0", "v1", "v2", "v3", "v4"} <= set(sig)


def test_prr_is_permanent_per_client_secret(pipeline):
    d, _, _ = pipeline
    P = str(d / "params.csv")
    for seed in ("1", "2"):
        assert run("encode", "--params", P, "--values", str(d / "values.csv"), "--secret-file",
                   str(d / "secret.bin"), "--insecure-seed", seed, "--out", str(d / f"r{seed}.csv")) == 0
    a, b = read_reports(d / "r1.csv", 32), read_reports(d / "r2.csv", 32)
    np.testing.assert_array_equal(a.prr, b.prr)  # PRR depends on (secret, client, value) only
    assert not np.array_equal(a.irr, b.irr)  # IRR is fresh


def test_encode_prr_rate(pipeline):
    """PRR bits that differ from the Bloom filter occur w.p. f/2 per bit (docs/math/mechanisms.md, "RAPPOR")."""
    d, _, _ = pipeline
    assert run("encode", "--params", str(d / "params.csv"), "--values", str(d / "values.csv"), "--secret-file",
               str(d / "secret.bin"), "--insecure-seed", "3", "--out", str(d / "r.csv")) == 0
    rep = read_reports(d / "r.csv", 32)
    flips = (rep.prr != rep.bloom).mean()
    m = rep.prr.size
    # per-bit indicator has variance (f/2)(1 − f/2); bits of one report are independent given the digest.
    sd = np.sqrt(0.25 * 0.75 / m)
    assert abs(flips - 0.25) < 6 * sd
    # IRR rates q*, p*: P(irr = 1 | bloom = 1) = q* = 0.625, P(irr = 1 | bloom = 0) = p* = 0.375
    ones = rep.bloom == 1
    for mask, rate in ((ones, 0.625), (~ones, 0.375)):
        k = mask.sum()
        assert abs(rep.irr[mask].mean() - rate) < 6 * np.sqrt(rate * (1 - rate) / k)


# --- Google's exact formats, written literally ----------------------------------------------------------

PARAMS_R = b'"k","h","m","p","q","f"\n8,1,2,0.25,0.75,0\n'
# cohort 0: 1000 reports; cohort 1: 1000 reports. Candidates "a" (cohort 0 bit 0, cohort 1 bit 3) and
# "b" (cohort 0 bit 5, cohort 1 bit 7) at 60% / 40%: E[count] = N (p* + (q* − p*) · share).
COUNTS_PY2 = b"1000,550,250,250,250,250,450,250,250\r\n1000,250,250,250,550,250,250,250,450\r\n"
MAP_R = b'"a",1,12\n"b",6,16\n'


def test_decode_hand_written_google_files(tmp_path, capsys):
    (tmp_path / "params.csv").write_bytes(PARAMS_R)
    (tmp_path / "counts.csv").write_bytes(COUNTS_PY2)
    (tmp_path / "map.csv").write_bytes(MAP_R)
    assert run("decode", "--params", str(tmp_path / "params.csv"), "--counts", str(tmp_path / "counts.csv"),
               "--map", str(tmp_path / "map.csv"), "--method", "ls", "--no-other") == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == HEADER
    assert lines[1].startswith("\"a\",1200,") and lines[2].startswith("\"b\",800,")  # of N = 2000 reports
    res = read_results(io.StringIO(out))
    np.testing.assert_allclose(res["proportion"], [0.6, 0.4], atol=1e-9)
    assert np.all(res["prop_std_error"] > 0)


def test_sum_bits_hand_written_reports(tmp_path, capsys):
    (tmp_path / "params.csv").write_bytes(b"k,h,m,p,q,f\r\n4,1,2,0.25,0.75,0.5\r\n")
    (tmp_path / "reports.csv").write_bytes(
        b"client,cohort,bloom,prr,irr\r\nc1,0,0001,0001,0011\r\nc2,1,0010,0110,1000\r\nc3,1,0100,0100,1001"
    )
    assert run("sum-bits", "--params", str(tmp_path / "params.csv"), "--reports", str(tmp_path / "reports.csv")) == 0
    # row = [reports, bit0, bit1, bit2, bit3]; "0011" sets bits 0 and 1
    assert capsys.readouterr().out == "1,1,1,0,0\n2,1,0,0,2\n"


def test_hash_candidates_from_stdin(tmp_path, capsys, monkeypatch):
    (tmp_path / "params.csv").write_bytes(b"k,h,m,p,q,f\n16,2,3,0.25,0.75,0.5\n")
    monkeypatch.setattr(sys, "stdin", io.StringIO("foo\r\nbar\n\n"))
    assert run("hash-candidates", "--params", str(tmp_path / "params.csv")) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    for line, word in zip(lines, ["foo", "bar"], strict=True):
        expected = [c * 16 + b + 1 for c in range(3) for b in md5_bits(word, c, 2, 16)]
        assert line == ",".join([word, *map(str, expected)])


def test_errors_exit_1(tmp_path, capsys):
    (tmp_path / "params.csv").write_bytes(b"k,h,m,p,q,f\n16,2,3,0.25,0.75,0.5\n")
    assert run("sum-bits", "--params", str(tmp_path / "params.csv"), "--reports", str(tmp_path / "nope.csv")) == 1
    assert "does not exist" in capsys.readouterr().err
    (tmp_path / "counts.csv").write_bytes(b"1,0,0\n")
    (tmp_path / "map.csv").write_bytes(b"a,1,2,3,4,5,6\n")
    assert run("decode", "--params", str(tmp_path / "params.csv"), "--counts", str(tmp_path / "counts.csv"),
               "--map", str(tmp_path / "map.csv")) == 1
    assert "expected m = 3" in capsys.readouterr().err
    (tmp_path / "short.bin").write_bytes(b"abc")
    (tmp_path / "values.csv").write_bytes(b"client,cohort,value\nc1,0,x\n")
    assert run("encode", "--params", str(tmp_path / "params.csv"), "--values", str(tmp_path / "values.csv"),
               "--secret-file", str(tmp_path / "short.bin")) == 1
    assert "at least 16" in capsys.readouterr().err


def test_sum_bits_accepts_cpp_client_reports(tmp_path, capsys):
    """reports.csv from Google's C++ client: empty bloom and prr columns, only the irr bits (Google's
    sum_bits accepts it, so do we)."""
    (tmp_path / "params.csv").write_bytes(b"k,h,m,p,q,f\n4,1,2,0.25,0.75,0.5\n")
    (tmp_path / "reports.csv").write_bytes(
        b"client,cohort,bloom,prr,irr\nc1,0,,,0011\nc2,1,,,1000\nc3,1,,,1001\n"
    )
    assert run("sum-bits", "--params", str(tmp_path / "params.csv"), "--reports", str(tmp_path / "reports.csv")) == 0
    assert capsys.readouterr().out == "1,1,1,0,0\n2,1,0,0,2\n"


def test_decode_writes_detected_by_default_all_with_flag(pipeline, capsys):
    """`decode` writes only the detected strings by default (like Google's decode-dist), `--significant` is
    the same, `--all` writes every candidate; the rule used is reported on stderr."""
    d, cands, _vals = pipeline
    P = str(d / "params.csv")
    assert run("encode", "--params", P, "--values", str(d / "values.csv"), "--secret-file", str(d / "secret.bin"),
               "--insecure-seed", "1", "--out", str(d / "reports.csv")) == 0
    assert run("sum-bits", "--params", P, "--reports", str(d / "reports.csv"), "--out", str(d / "counts.csv")) == 0
    assert run("hash-candidates", "--params", P, "--candidates", str(d / "cands.txt"), "--out", str(d / "map.csv")) == 0
    base = ("decode", "--params", P, "--counts", str(d / "counts.csv"), "--map", str(d / "map.csv"))
    capsys.readouterr()
    assert run(*base, "--out", str(d / "default.csv")) == 0
    assert "rule bh at alpha 0.1 " in capsys.readouterr().err
    assert run(*base, "--significant", "--out", str(d / "sig.csv")) == 0
    said_detected = capsys.readouterr().err
    assert run(*base, "--all", "--out", str(d / "all.csv")) == 0
    said_all = capsys.readouterr().err  # --all writes every candidate but still counts the detected ones
    assert said_all.split(" detected")[0] == said_detected.split(" detected")[0]
    assert "; --all: every candidate written" in said_all
    assert run(*base, "--correction", "bh", "--out", str(d / "bh.csv")) == 0
    assert "rule bh" in capsys.readouterr().err
    default, sig, every, bh = (read_results(d / f)["string"] for f in ("default.csv", "sig.csv", "all.csv", "bh.csv"))
    assert default == sig
    assert {"v0", "v1", "v2", "v3", "v4"} <= set(default) <= set(bh)
    assert len(default) < 30 and sorted(every) == sorted(cands)
    allres = read_results(d / "all.csv")
    assert np.all(np.isfinite(allres["prop_std_error"])) and np.all(allres["proportion"] >= 0)
