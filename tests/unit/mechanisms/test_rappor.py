"""RAPPOR: ε formulas, Google reference-client compatibility of Bloom filter + PRR, client behaviour."""

import hashlib
import hmac
import math
import struct

import numpy as np
import pytest

from ldpstream.errors import ParameterError
from ldpstream.mechanisms import (
    Rappor,
    RapporClient,
    RapporParams,
    bit_string,
    bits_to_int,
    get_prr_masks,
    int_to_bits,
)
from ldpstream.mechanisms.rappor import prr_digest_bytes, prr_message


def test_epsilon_of_a_worked_rappor_example():
    """h = 2, p = 0.5, q = 0.75, f = 0.5: ε_1 = h ln(q*(1 − p*)/(p*(1 − q*))) ≈ 1.0743 and
    ε_∞ = 2h ln((1 − f/2)/(f/2)) = 4 ln 3 (docs/math/mechanisms.md#privacy-of-one-report-and-of-all-reports)."""
    r = Rappor(k=32, hashes=2, cohorts=64, p=0.5, q=0.75, f=0.5)
    assert r.q_star == pytest.approx(0.6875)
    assert r.p_star == pytest.approx(0.5625)
    assert round(r.epsilon, 4) == 1.0743
    assert r.epsilon_inf == pytest.approx(4 * math.log(3))
    assert round(r.epsilon_inf, 3) == 4.394
    assert RapporParams is Rappor


def test_epsilon_edge_cases():
    assert Rappor(8, 1, 1, p=0.0, q=1.0, f=0.0).epsilon == math.inf
    assert Rappor(8, 1, 1, p=0.0, q=1.0, f=0.0).epsilon_inf == math.inf
    with pytest.raises(ParameterError, match="q must exceed p"):
        Rappor(8, 1, 1, p=0.5, q=0.5, f=0.5)
    with pytest.raises(ParameterError):
        Rappor(8, 1, 1, p=0.25, q=0.75, f=1.0)


def google_prr(secret: bytes, bloom: int, f: float, k: int) -> int:
    """Written out from Google's client (Encoder._internal_encode_bits + get_prr_masks), k <= 32."""
    digest = hmac.new(secret, struct.pack(">L", bloom), digestmod=hashlib.sha256).digest()
    uniform = f_mask = 0
    for i in range(k):
        byte = digest[i]
        uniform |= (byte & 0x01) << i
        f_mask |= int((byte >> 1) < f * 128) << i
    return (bloom & ~f_mask) | (uniform & f_mask)


def test_google_reference_encoder_vector():
    # Google's rappor_test.py testEncoder: k=16, h=2, f=0.5, p=0.5, q=0.75, cohort 0, secret 'secret',
    # IRR randomness mocked with the cycle [0.0, 0.6, 0.0] -> encode("abc") == 64493.
    params = Rappor(k=16, hashes=2, cohorts=64, p=0.5, q=0.75, f=0.5)
    client = RapporClient(params, b"secret", 0)
    prr = client.prr(client.bloom("abc"))
    cycle = [0.0, 0.6, 0.0]
    p_bits = sum(int(cycle[i % 3] < params.p) << i for i in range(16))
    q_bits = sum(int(cycle[i % 3] < params.q) << i for i in range(16))
    assert (p_bits & ~prr) | (q_bits & prr) == 64493


def test_bloom_and_prr_pinned_and_independent():
    params = Rappor(k=16, hashes=2, cohorts=64, p=0.5, q=0.75, f=0.5)
    client = RapporClient(params, b"secret", 0)
    bloom = client.bloom("abc")
    assert bloom == (1 << 6) | (1 << 13) == 8256
    assert client.prr(bloom) == 57576
    for secret, cohort, word in [(b"secret", 0, "abc"), (b"k", 9, "foo"), (b"\x00" * 32, 63, "héllo")]:
        c = RapporClient(params, secret, cohort)
        b = c.bloom(word)
        assert c.prr(b) == google_prr(secret, b, 0.5, 16)
    big = Rappor(k=32, hashes=2, cohorts=64, p=0.25, q=0.75, f=0.25)
    c = RapporClient(big, b"another secret", 17)
    b = c.bloom("xyz")
    assert c.prr(b) == google_prr(b"another secret", b, 0.25, 32)


def test_prr_extension_beyond_32_bits():
    params = Rappor(k=64, hashes=2, cohorts=4, p=0.5, q=0.75, f=0.5)
    client = RapporClient(params, b"k3y", 2)
    bloom = client.bloom("abc")
    assert bloom == 17179869216
    assert client.prr(bloom) == 2347158417141015101  # pinned
    msg = bloom.to_bytes(8, "big")
    stream = (
        hmac.new(b"k3y", msg, hashlib.sha256).digest()
        + hmac.new(b"k3y", msg + struct.pack(">I", 1), hashlib.sha256).digest()
    )
    assert prr_message(bloom, 64) == msg
    assert prr_digest_bytes(b"k3y", msg, 64) == stream
    uniform, f_mask = get_prr_masks(b"k3y", msg, 0.5, 64)
    assert client.prr(bloom) == (bloom & ~f_mask) | (uniform & f_mask)
    assert prr_message(5, 32) == b"\x00\x00\x00\x05"


def test_prr_is_memoized_and_deterministic():
    params = Rappor(k=16, hashes=2, cohorts=8, p=0.5, q=0.75, f=0.5)
    a = RapporClient(params, b"s", 3)
    b = RapporClient(params, b"s", 3)
    bloom = a.bloom("value")
    assert a.prr(bloom) == a.prr(bloom) == b.prr(bloom)
    report = a.encode("value")
    assert report.shape == (16,) and report.dtype == bool


def test_client_validation():
    params = Rappor(k=16, hashes=2, cohorts=8, p=0.5, q=0.75, f=0.3)
    with pytest.raises(ParameterError, match="128"):
        RapporClient(params, b"s", 0)
    ok = Rappor(k=16, hashes=2, cohorts=8, p=0.5, q=0.75, f=0.5)
    with pytest.raises(ParameterError):
        RapporClient(ok, b"", 0)
    with pytest.raises(ParameterError):
        RapporClient(ok, "str secret", 0)  # type: ignore[arg-type]
    with pytest.raises(ParameterError):
        RapporClient(ok, b"s", 8)


def test_bit_helpers():
    assert bit_string(0b1011, 6) == "001011"
    bits = int_to_bits(0b1011, 6)
    assert bits.tolist() == [True, True, False, True, False, False]
    assert bits_to_int(bits) == 0b1011
    assert bit_string(bits, 6) == "001011"
    with pytest.raises(ParameterError):
        int_to_bits(64, 6)


def test_design_matrix_and_map_layout():
    params = Rappor(k=16, hashes=2, cohorts=3, p=0.5, q=0.75, f=0.5)
    cands = ["abc", "foo", "bar"]
    x = params.design_matrix(cands)
    assert x.shape == (48, 3)
    dense = x.toarray()
    for c in range(3):
        for s, v in enumerate(cands):
            bits = set(params.bloom_bits(v, c))
            assert set(np.flatnonzero(dense[c * 16 : (c + 1) * 16, s]).tolist()) == bits
    assert dense.max() == 1.0  # "foo" sets bit 6 twice in cohort 0: still a single 1


def test_encode_shapes():
    params = Rappor(k=16, hashes=2, cohorts=8, p=0.5, q=0.75, f=0.5)
    cohort, bits = params.encode("abc")
    assert 0 <= cohort < 8 and bits.shape == (16,) and bits.dtype == bool
    assert params.encode("abc", cohort=5)[0] == 5
    rng = np.random.default_rng(0)
    table = params.bloom_table(["a", "b"])
    reports = params.simulate_reports(np.array([0, 1, 1]), np.array([0, 7, 2]), rng, table)
    assert reports.shape == (3, 16)
    cohorts, reports = params.encode_batch(np.array([0, 1, 1, 0]), rng, table=table)
    assert cohorts.shape == (4,) and reports.shape == (4, 16)


def test_the_prr_memo_is_bounded_and_an_evicted_prr_comes_back_identical(monkeypatch):
    import ldpstream.mechanisms.rappor as rappor

    monkeypatch.setattr(rappor, "MEMO_CAPACITY", 4)
    params = Rappor(k=32, hashes=2, cohorts=8, p=0.5, q=0.75, f=0.5)
    client = RapporClient(params, b"s", 3)
    blooms = [client.bloom(f"v{i}") for i in range(20)]
    first = [client.prr(b) for b in blooms]
    assert len(client._memo) == 4
    assert [client.prr(b) for b in blooms] == first == [RapporClient(params, b"s", 3).prr(b) for b in blooms]
