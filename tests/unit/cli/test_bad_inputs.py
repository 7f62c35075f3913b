"""The CLI over a corpus of bad inputs: each ends in one line that names the problem and a non-zero exit,
never a traceback or a hang. (No service is needed: the unreachable ones are unreachable on purpose.)"""

from __future__ import annotations

import pytest

from ldpstream.cli import main

NOWHERE_REDIS = "redis://127.0.0.1:1/0"
NOWHERE_KAFKA = "127.0.0.1:1"
GOOD_METRIC = 'id = 1\nmechanism = "krr"\nk = 4\nepsilon = 1.0\n'


def _registry(tmp_path, body: str) -> str:
    path = tmp_path / "metrics.toml"
    path.write_text(body)
    return str(path)


REGISTRY_CASES = {
    "mistyped field": ('[metrics.m]\nid = 1\nmechanism = "krr"\nk = "eight"\nepsilon = 1.0\n', "k must be"),
    "mistyped bucket": (f"[metrics.m]\n{GOOD_METRIC}bucket_seconds = \"1h\"\n", "bucket_seconds must be"),
    "k too wide for memory": ('[metrics.m]\nid = 1\nmechanism = "krr"\nk = 1000000000\nepsilon = 1.0\n', "cells"),
    "epsilon meaningless": ('[metrics.m]\nid = 1\nmechanism = "krr"\nk = 4\nepsilon = 50.0\n', "at most 10"),
    "raw bloom filter": ('[metrics.m]\nid = 1\nmechanism = "rappor"\nk = 16\nhashes = 2\ncohorts = 4\n'
                         "p = 0.0\nq = 1.0\nf = 0.0\n", "at most 10"),
    "duplicate labels": (f'[metrics.m]\n{GOOD_METRIC}labels = ["a", "a", "b", "c"]\n', "distinct"),
    "labels not strings": (f"[metrics.m]\n{GOOD_METRIC}labels = [1, 2, 3, 4]\n", "strings"),
    "cohorts beyond the format": ('[metrics.m]\nid = 1\nmechanism = "orr"\nk = 2\ncohorts = 70000\nepsilon = 1.0\n',
                                  "cohorts"),
    "retention too long": (f'[metrics.m]\n{GOOD_METRIC}retention = "9999d"\n', "retention"),
    "not TOML": ("[metrics.m\n", "not valid TOML"),
    "unknown estimator": (f'[metrics.m]\n{GOOD_METRIC}estimator = "magic"\n', "estimator 'magic' is not one of"),
    "estimator of another family": (f'[metrics.m]\n{GOOD_METRIC}estimator = "nnls"\n', "unbiased, truncate"),
    "RAPPOR f the encoder cannot realize": ('[metrics.m]\nid = 1\nmechanism = "rappor"\nk = 16\nhashes = 2\n'
                                            "cohorts = 4\np = 0.25\nq = 0.75\nf = 0.3\n", "128*f"),
    "metrics not a table": ("metrics = 3\n", "no [metrics.NAME]"),
}


@pytest.mark.parametrize("case", sorted(REGISTRY_CASES))
def test_a_bad_registry_is_refused_at_load_with_one_line(tmp_path, capsys, case):
    body, expected = REGISTRY_CASES[case]
    code = main(["status", "--registry", _registry(tmp_path, body), "--redis", NOWHERE_REDIS, "--kafka",
                 NOWHERE_KAFKA])
    _assert_one_error_line(capsys, code, "status", expected)


def test_files_that_are_not_files_or_not_text(tmp_path, capsys):
    assert main(["status", "--registry", str(tmp_path), "--redis", NOWHERE_REDIS]) == 1
    _assert_one_error_line(capsys, 1, "status", "is a directory")
    binary = tmp_path / "binary.toml"
    binary.write_bytes(b"\xff\xfe[metrics]")
    assert main(["status", "--registry", str(binary), "--redis", NOWHERE_REDIS]) == 1
    _assert_one_error_line(capsys, 1, "status", "not UTF-8")
    code = main(["rappor", "decode", "--params", str(tmp_path), "--counts", str(tmp_path), "--map", str(tmp_path)])
    _assert_one_error_line(capsys, code, "rappor", "directory")


@pytest.mark.parametrize(("row", "expected"), [("1000000000,2,64,0.25,0.75,0.5", "k must be"),
                                              ("128,2,100000000,0.25,0.75,0.5", "m must be"),
                                              ("128,200,64,0.25,0.75,0.5", "h must be"),
                                              ("500000,2,60000,0.25,0.75,0.5", "count cells")])
def test_absurd_rappor_parameters(tmp_path, capsys, row, expected):
    params = tmp_path / "params.csv"
    params.write_text(f"k,h,m,p,q,f\n{row}\n")
    code = main(["rappor", "hash-candidates", "--params", str(params), "--candidates", str(params)])
    _assert_one_error_line(capsys, code, "rappor", expected)


def test_unreachable_redis_in_status_and_watch(tmp_path, capsys):
    registry = _registry(tmp_path, f"[metrics.m]\n{GOOD_METRIC}")
    code = main(["status", "--registry", registry, "--redis", NOWHERE_REDIS, "--kafka", NOWHERE_KAFKA])
    _assert_one_error_line(capsys, code, "status", "Redis")
    code = main(["watch", "m", "--redis", NOWHERE_REDIS, "--iterations", "1"])
    _assert_one_error_line(capsys, code, "watch", "Redis")


@pytest.mark.parametrize(("argv", "expected"), [
    (["simulate", "--mechanism", "krr", "--epsilon", "1", "--support", "1000000000", "--n", "10"], "--support"),
    (["simulate", "--mechanism", "krr", "--epsilon", "1", "--support", "4", "--n", "10", "--trials", "10000000"],
     "--trials"),
    (["simulate", "--mechanism", "krr", "--epsilon", "1e308", "--support", "4", "--n", "10"], "--epsilon"),
    (["simulate", "--mechanism", "krr", "--epsilon", "nan", "--support", "4", "--n", "10"], "--epsilon"),
    (["simulate", "--mechanism", "krappor", "--epsilon", "1", "--support", "4", "--n", "10" + "0" * 20], "--n"),
    (["simulate", "--mechanism", "orr", "--epsilon", "1", "--support", "4", "--n", "10", "--cohorts", "10000000"],
     "--cohorts"),
    (["tune", "--epsilon", "1", "--support", "100000000", "--n", "10"], "--support"),
    (["tune", "--epsilon", "-1", "--support", "4", "--n", "10"], "--epsilon"),
])
def test_absurd_numbers_for_offline_commands(capsys, argv, expected):
    _assert_one_error_line(capsys, main(argv), argv[0], expected)


def test_decode_refuses_to_start_without_its_store(tmp_path, capsys):
    registry = _registry(tmp_path, f"[metrics.m]\n{GOOD_METRIC}")
    code = main(["decode", "--once", "--no-kafka", "--metrics-port", "0", "--registry", registry,
                 "--redis", NOWHERE_REDIS])
    _assert_one_error_line(capsys, code, "decode", "Redis")


def _assert_one_error_line(capsys, code: int, command: str, expected: str) -> None:
    err = capsys.readouterr().err
    assert code != 0
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(f"ldpstream {command}: error: ") and expected in lines[0], lines[0]
