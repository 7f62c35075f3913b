"""Security in the service configuration: Kafka SASL/TLS and Redis ACL/TLS settings from every source,
passwords from files or the environment only (never a flag alone), never shown by a ``repr`` or an error, and
the client configurations built from them. The same settings against real servers: tests/integration/
test_secure_stack.py."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import pytest

from ldpstream.cli.main import main
from ldpstream.config import (
    KafkaConfig,
    KafkaSecurity,
    RedisConfig,
    Secret,
    ServiceConfig,
    add_service_arguments,
    redact_url,
)
from ldpstream.errors import ConfigError

PASSWORD = "s3cr3t-Pa55word-xyzzy"


@pytest.fixture
def password_file(tmp_path: Path) -> Path:
    path = tmp_path / "password"
    path.write_text(PASSWORD + "\n")
    path.chmod(0o600)
    return path


@pytest.fixture
def ca(tmp_path: Path) -> Path:
    path = tmp_path / "ca.pem"
    path.write_text("-----BEGIN CERTIFICATE-----\n")
    return path


def secure_env(password_file: Path, ca: Path) -> dict[str, str]:
    return {"LDPSTREAM_KAFKA": "broker:9093", "LDPSTREAM_KAFKA_SECURITY": "sasl_ssl",
            "LDPSTREAM_KAFKA_SASL_MECHANISM": "scram-sha-512", "LDPSTREAM_KAFKA_USER": "alice",
            "LDPSTREAM_KAFKA_PASSWORD_FILE": str(password_file), "LDPSTREAM_KAFKA_CA": str(ca),
            "LDPSTREAM_REDIS": "rediss://redis:6380/2", "LDPSTREAM_REDIS_USER": "bob",
            "LDPSTREAM_REDIS_PASSWORD": PASSWORD, "LDPSTREAM_REDIS_CA": str(ca)}


def test_no_security_is_plaintext_and_adds_no_setting():
    config = ServiceConfig.load({}, environ={})
    assert config.kafka.security == KafkaSecurity()
    assert "security.protocol" not in config.kafka.producer()
    assert config.redis.user is None and config.redis.password is None and not config.redis.tls


def test_security_from_the_environment_reaches_every_kafka_client(password_file, ca):
    config = ServiceConfig.load({}, environ=secure_env(password_file, ca))
    expected = {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice",
                "sasl.password": PASSWORD, "ssl.ca.location": str(ca)}
    for built in (config.kafka.producer(), config.kafka.consumer("g"), config.kafka.admin(), config.kafka.probe()):
        assert {k: built[k] for k in expected} == expected
    assert config.redis.user == "bob" and config.redis.password == Secret(PASSWORD) and config.redis.tls


def test_security_from_the_file_with_paths_relative_to_it(tmp_path, password_file, ca):
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "kafka-password").write_text(PASSWORD)
    (tmp_path / "conf" / "kafka-password").chmod(0o640)
    (tmp_path / "conf" / "ca.pem").write_text("x")
    file = tmp_path / "conf" / "ldpstream.toml"
    file.write_text('[kafka]\nbootstrap = "b:9093"\nsecurity = "SASL_SSL"\nsasl_mechanism = "SCRAM-SHA-256"\n'
                    'user = "alice"\npassword_file = "kafka-password"\nca = "ca.pem"\n'
                    '[redis]\nurl = "rediss://r:6380/0"\nuser = "bob"\npassword = "in-the-file"\nca = "ca.pem"\n')
    config = ServiceConfig.load({"config": str(file)}, environ={})
    assert config.kafka.security.password == Secret(PASSWORD)
    assert config.kafka.security.ca == str(tmp_path / "conf" / "ca.pem")
    assert config.kafka.admin()["sasl.mechanism"] == "SCRAM-SHA-256"
    assert config.redis.password == Secret("in-the-file") and config.redis.ca == str(tmp_path / "conf" / "ca.pem")


def test_flags_override_the_environment_but_name_password_files_only(tmp_path, password_file, ca):
    other = tmp_path / "other"
    other.write_text("from-the-flag-file")
    other.chmod(0o600)
    parser = argparse.ArgumentParser()
    add_service_arguments(parser, consumer=True)
    args = parser.parse_args(["--kafka-user", "carol", "--kafka-password-file", str(other),
                              "--redis-user", "dave", "--redis-password-file", str(other)])
    flags = {k: getattr(args, k) for k in vars(args)}
    config = ServiceConfig.load(flags, environ=secure_env(password_file, ca))
    assert config.kafka.security.user == "carol" and config.kafka.security.password == Secret("from-the-flag-file")
    assert config.redis.user == "dave" and config.redis.password == Secret("from-the-flag-file")
    for flag in ("--kafka-password", "--redis-password"):  # refused, not read as an abbreviation of --..-file
        args = parser.parse_args([flag, PASSWORD])
        with pytest.raises(ConfigError, match="not accepted") as error:
            ServiceConfig.load({k: getattr(args, k) for k in vars(args)}, environ={})
        assert PASSWORD not in str(error.value)


@pytest.mark.parametrize("flags", [
    {"kafka_config": [f"sasl.password={PASSWORD}"]},
    {"consumer_config": [f"ssl.key.password={PASSWORD}"]},
    {"redis": f"redis://bob:{PASSWORD}@redis:6379/0"},
    {"redis": f"redis://127.0.0.1:1/0?password={PASSWORD}"},  # regression: the query form was accepted
    {"redis": f"redis+cluster://127.0.0.1:1?db=0&password={PASSWORD}"},
])
def test_a_password_on_the_command_line_is_refused_without_showing_it(flags):
    with pytest.raises(ConfigError, match=r"file|environment") as error:
        ServiceConfig.load(flags, environ={})
    assert PASSWORD not in str(error.value)


def test_a_password_in_the_environment_url_is_accepted_and_never_shown():
    config = ServiceConfig.load({}, environ={"LDPSTREAM_REDIS": f"redis://bob:{PASSWORD}@redis:6379/0",
                                             "LDPSTREAM_KAFKA_CONFIG": f"sasl.password={PASSWORD}"})
    assert config.kafka.admin()["sasl.password"] == PASSWORD
    assert PASSWORD not in repr(config) and PASSWORD not in str(config)
    assert config.redis.safe_url == "redis://bob:***@redis:6379/0"
    with pytest.raises(ConfigError) as error:
        RedisConfig(f"http://bob:{PASSWORD}@redis:6379/0")
    assert PASSWORD not in str(error.value)


def test_no_repr_shows_a_password(password_file, ca):
    config = ServiceConfig.load({}, environ=secure_env(password_file, ca))
    for shown in (repr(config), str(config), repr(config.kafka), repr(config.redis), repr(config.kafka.security),
                  f"{config.redis.password}", f"{config.kafka.security.password!r}"):
        assert PASSWORD not in shown
    assert "***" in repr(config)


def test_the_password_never_reaches_a_log(password_file, ca, caplog):
    caplog.set_level(logging.DEBUG)
    config = ServiceConfig.load({}, environ=secure_env(password_file, ca))
    logging.getLogger("ldpstream.test").info("configuration: %s %r", config, config)
    logging.getLogger("ldpstream.test").info("redis: %s", config.redis)
    assert PASSWORD not in caplog.text and "***" in caplog.text


@pytest.mark.parametrize(("security", "message"), [
    ({"protocol": "TLS"}, "not one of"),
    ({"protocol": "SASL_SSL", "user": "a", "password": Secret("p")}, "needs a SASL mechanism"),
    ({"protocol": "SASL_SSL", "sasl_mechanism": "PLAIN", "user": "a"}, "needs a user and a password"),
    ({"protocol": "SSL", "user": "a"}, "needs security SASL_SSL or SASL_PLAINTEXT"),
    ({"protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN", "user": "a", "password": Secret("p"),
      "ca": "/etc/hosts"}, "TLS files need security SSL or SASL_SSL"),
    ({"protocol": "SSL", "cert": "/etc/hosts"}, "needs its key"),
    ({"protocol": "SSL", "ca": "/nonexistent/ca.pem"}, "does not exist"),
])
def test_inconsistent_kafka_security_is_refused_naming_the_problem(security, message):
    with pytest.raises(ConfigError, match=message):
        KafkaSecurity(**security)


def test_inconsistent_redis_security_is_refused():
    with pytest.raises(ConfigError, match="rediss://"):
        RedisConfig("redis://r:6379/0", ca="/etc/hosts")
    with pytest.raises(ConfigError, match="only database 0"):
        RedisConfig("redis+cluster://r:7000/3")
    assert RedisConfig("rediss+cluster://r:7000,r:7001").cluster


def test_a_missing_or_empty_password_file_is_refused_naming_it(tmp_path):
    with pytest.raises(ConfigError, match="cannot read the kafka password"):
        ServiceConfig.load({}, environ={"LDPSTREAM_KAFKA_PASSWORD_FILE": str(tmp_path / "none")})
    (tmp_path / "empty").write_text("\n")
    (tmp_path / "empty").chmod(0o600)
    with pytest.raises(ConfigError, match="is empty"):
        ServiceConfig.load({}, environ={"LDPSTREAM_REDIS_PASSWORD_FILE": str(tmp_path / "empty")})


@pytest.mark.parametrize("mode", [0o604, 0o606, 0o644, 0o601])
def test_a_password_or_key_file_others_may_read_is_refused(tmp_path, password_file, ca, mode):
    password_file.chmod(mode)
    with pytest.raises(ConfigError, match=f"may be read by others \\(mode {mode:o}\\).*chmod o-rwx"):
        ServiceConfig.load({}, environ=secure_env(password_file, ca))
    password_file.chmod(0o600)
    key = tmp_path / "client.key"
    key.write_text("-----BEGIN PRIVATE KEY-----\n")
    key.chmod(mode)
    (tmp_path / "client.pem").write_text("-----BEGIN CERTIFICATE-----\n")
    env = secure_env(password_file, ca) | {"LDPSTREAM_KAFKA_SECURITY": "ssl", "LDPSTREAM_KAFKA_SASL_MECHANISM": "",
                                           "LDPSTREAM_KAFKA_USER": "", "LDPSTREAM_KAFKA_PASSWORD_FILE": "",
                                           "LDPSTREAM_KAFKA_CERT": str(tmp_path / "client.pem"),
                                           "LDPSTREAM_KAFKA_KEY": str(key)}
    with pytest.raises(ConfigError, match=r"Kafka TLS key file .* may be read by others"):
        ServiceConfig.load({}, environ=env)


@pytest.mark.parametrize("mode", [0o600, 0o640, 0o440, 0o400])
def test_a_password_file_its_owner_or_group_alone_may_read_is_accepted(password_file, ca, mode):
    password_file.chmod(mode)
    assert ServiceConfig.load({}, environ=secure_env(password_file, ca)).kafka.security.password is not None


def test_the_redis_client_gets_the_user_password_and_tls_files(password_file, ca):
    config = ServiceConfig.load({}, environ=secure_env(password_file, ca))
    kwargs = config.redis.client().connection_pool.connection_kwargs
    assert (kwargs["username"], kwargs["password"], kwargs["ssl_ca_certs"]) == ("bob", PASSWORD, str(ca))


@pytest.mark.parametrize(("url", "shown"), [
    ("rediss://u:p@h:1/0", "rediss://u:***@h:1/0"),
    ("redis://h:1/0", "redis://h:1/0"),
    ("redis://h:1/0?password=p&socket_timeout=3", "redis://h:1/0?password=***&socket_timeout=3"),
    ("rediss://:p@h:1/0?password=q", "rediss://:***@h:1/0?password=***"),
    ("unix:///run/redis.sock?password=p", "unix:///run/redis.sock?password=***"),
    ("redis+cluster://u:p@a:1,b:2", "redis+cluster://u:***@a:1,b:2"),
    ("rediss+cluster://a:1?password=p", "rediss+cluster://a:1?password=***"),
])
def test_redact_url_hides_a_password_in_the_user_part_and_in_the_query_of_every_scheme(url, shown):
    assert redact_url(url) == shown


def test_a_password_from_a_file_wins_over_one_in_the_url():
    """Regression: redis-py lets a URL's password override its ``password`` keyword, so a password in the URL
    (from the environment) silently replaced the one from the password file."""
    for url in (f"redis://127.0.0.1:1/0?password={PASSWORD}", f"redis://bob:{PASSWORD}@127.0.0.1:1/0"):
        client = RedisConfig(url, password=Secret("from-the-file")).client()
        try:
            assert client.connection_pool.connection_kwargs["password"] == "from-the-file"
        finally:
            client.close()
    client = RedisConfig(f"redis://127.0.0.1:1/0?password={PASSWORD}").client()  # no file: the URL's
    assert client.connection_pool.connection_kwargs["password"] == PASSWORD
    client.close()


def test_a_command_given_a_password_flag_says_so_in_one_line_without_it(capsys):
    code = main(["status", "--registry", "none.toml", "--kafka-config", f"sasl.password={PASSWORD}"])
    err = capsys.readouterr().err
    assert code == 1 and PASSWORD not in err
    assert err.count("\n") == 1 and "must not carry the secret sasl.password" in err


def test_kafka_config_of_a_string_has_no_security():
    assert KafkaConfig.of("h:1").security.protocol == "PLAINTEXT"
