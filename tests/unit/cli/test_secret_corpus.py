"""No secret appears in any output of a corpus of bad invocations: passwords in URLs (both forms, every scheme),
in the environment, in password files (readable by others, or naming a service that does not answer), in
librdkafka settings and in the service configuration file. Each invocation fails; its stdout, stderr and logs
never hold the secret."""

from __future__ import annotations

import logging

import pytest

from ldpstream.cli import main

SECRET = "S3cret-7f1c9e42b8d0a6"
NOWHERE_REDIS = "127.0.0.1:1"
NOWHERE_KAFKA = "127.0.0.1:1"


def _registry(tmp_path) -> str:
    path = tmp_path / "metrics.toml"
    path.write_text('[metrics.m]\nid = 1\nmechanism = "krr"\nk = 4\nepsilon = 1.0\n')
    return str(path)


def _password_file(tmp_path, mode: int) -> str:
    path = tmp_path / f"password-{mode:o}"
    path.write_text(SECRET + "\n")
    path.chmod(mode)
    return str(path)


URLS = [f"redis://u:{SECRET}@{NOWHERE_REDIS}/0", f"redis://:{SECRET}@{NOWHERE_REDIS}/0",
        f"redis://{NOWHERE_REDIS}/0?password={SECRET}", f"rediss://u:{SECRET}@{NOWHERE_REDIS}/0",
        f"redis+cluster://u:{SECRET}@{NOWHERE_REDIS}", f"rediss+cluster://{NOWHERE_REDIS}?password={SECRET}",
        f"unix://u:{SECRET}@/tmp/nowhere.sock"]


def _invocations(tmp_path) -> list[tuple[list[str], dict[str, str]]]:
    registry = _registry(tmp_path)
    loose, tight = _password_file(tmp_path, 0o644), _password_file(tmp_path, 0o600)
    config = tmp_path / "service.toml"
    config.write_text(f'[redis]\nurl = "redis://u:{SECRET}@{NOWHERE_REDIS}/0"\n')
    config.chmod(0o600)
    base = ["--registry", registry]
    cases: list[tuple[list[str], dict[str, str]]] = []
    for url in URLS:
        for command in (["status", *base], ["watch", "m", "--iterations", "1"],
                        ["report", "m", "--out", str(tmp_path / "m.png")]):
            cases.append(([*command, "--redis", url], {}))      # on the command line: refused
            cases.append((command, {"LDPSTREAM_REDIS": url}))  # from the environment: used, and fails
    cases += [
        (["status", *base, "--redis", f"redis://{NOWHERE_REDIS}/0", "--redis-password-file", loose], {}),
        (["status", *base, "--redis", f"redis://{NOWHERE_REDIS}/0", "--redis-user", "u",
          "--redis-password-file", tight], {}),
        (["status", *base, "--kafka-config", f"sasl.password={SECRET}"], {}),
        (["status", *base, "--kafka", NOWHERE_KAFKA, "--kafka-security", "SASL_SSL", "--kafka-sasl-mechanism",
          "PLAIN", "--kafka-user", "u", "--kafka-password-file", loose], {}),
        (["status", *base, "--config", str(config)], {}),
        (["status", *base], {"LDPSTREAM_REDIS": f"redis://{NOWHERE_REDIS}/0", "LDPSTREAM_REDIS_PASSWORD": SECRET,
                             "LDPSTREAM_REDIS_USER": "u"}),
        (["decode", "--once", "--no-kafka", "--metrics-port", "0", *base], {
            "LDPSTREAM_REDIS": f"redis://u:{SECRET}@{NOWHERE_REDIS}/0"}),
        (["consume", "--idle-exit", "1", *base, "--kafka", NOWHERE_KAFKA, "--kafka-security", "SASL_PLAINTEXT",
          "--kafka-sasl-mechanism", "PLAIN", "--kafka-user", "u", "--kafka-password-file", loose], {}),
    ]
    return cases


def test_no_bad_invocation_shows_a_secret(tmp_path, capsys, caplog, monkeypatch):
    caplog.set_level(logging.DEBUG)
    cases = _invocations(tmp_path)
    for argv, environ in cases:
        with monkeypatch.context() as patch:
            for name in ("LDPSTREAM_CONFIG", "LDPSTREAM_REDIS", "LDPSTREAM_KAFKA", "LDPSTREAM_REDIS_PASSWORD"):
                patch.delenv(name, raising=False)
            for name, value in environ.items():
                patch.setenv(name, value)
            code = main(argv)
        out, err = capsys.readouterr()
        shown = out + err + caplog.text
        assert code != 0, (argv, environ, out, err)
        assert err.strip(), (argv, environ)
        assert SECRET not in shown, (argv, environ, shown)
        caplog.clear()
    assert len(cases) > 45


@pytest.mark.parametrize("url", URLS)
def test_each_url_form_is_refused_on_the_command_line_without_echoing_its_password(tmp_path, capsys, url):
    assert main(["status", "--registry", _registry(tmp_path), "--redis", url]) != 0
    err = capsys.readouterr().err
    assert "must not carry a password" in err and SECRET not in err and "***" in err
