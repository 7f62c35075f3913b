"""The service configuration (:class:`ldpstream.config.ServiceConfig`): flags, then the environment, then a
file, then the local stack's address; clear errors; and the Kafka client configurations it builds."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from ldpstream.config import (
    DEFAULT_PREFIX,
    DEFAULT_REGISTRY,
    KafkaConfig,
    RedisConfig,
    ServiceConfig,
    add_service_arguments,
    parse_key_values,
)
from ldpstream.errors import ConfigError

FILE = """
registry = "registry/metrics.toml"

[kafka]
bootstrap = "file-kafka:9092"
config = { "client.id" = "from-file", "linger.ms" = 7 }
consumer = { "session.timeout.ms" = "6000" }

[redis]
url = "redis://file-redis:6379/1"
prefix = "fileprefix"
"""


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "conf" / "ldpstream.toml"
    path.parent.mkdir()
    path.write_text(FILE)
    return path


# ------------------------------------------------------------------------------------------ precedence


def test_without_anything_the_local_stack_is_the_default():
    config = ServiceConfig.load({}, environ={})
    assert config.kafka.bootstrap == "127.0.0.1:39092"
    assert config.redis.url == "redis://127.0.0.1:36379/0"
    assert config.redis.prefix == DEFAULT_PREFIX
    assert config.registry == DEFAULT_REGISTRY
    assert dict(config.kafka.settings) == {} and dict(config.kafka.consumer_settings) == {}
    assert config.uses_local_stack(environ={})


def test_the_local_stack_default_follows_its_moved_ports():
    env = {"LDPSTREAM_STACK_KAFKA_PORT": "49092", "LDPSTREAM_STACK_REDIS_PORT": "46379"}
    config = ServiceConfig.load({}, environ=env)
    assert config.kafka.bootstrap == "127.0.0.1:49092"
    assert config.redis.url == "redis://127.0.0.1:46379/0"
    assert config.uses_local_stack(environ=env) and not config.uses_local_stack(environ={})
    with pytest.raises(ConfigError, match="LDPSTREAM_STACK_"):
        ServiceConfig.load({}, environ={"LDPSTREAM_STACK_KAFKA_PORT": "kafka"})


def test_the_file_overrides_the_defaults(config_file):
    config = ServiceConfig.load({}, environ={}, file=config_file)
    assert config.kafka.bootstrap == "file-kafka:9092"
    assert dict(config.kafka.settings) == {"client.id": "from-file", "linger.ms": "7"}
    assert dict(config.kafka.consumer_settings) == {"session.timeout.ms": "6000"}
    assert config.redis == RedisConfig("redis://file-redis:6379/1", "fileprefix")
    assert not config.uses_local_stack(environ={})


def test_the_file_is_found_through_the_environment_or_a_flag(config_file):
    assert ServiceConfig.load({}, environ={"LDPSTREAM_CONFIG": str(config_file)}).redis.prefix == "fileprefix"
    assert ServiceConfig.load({"config": str(config_file)}, environ={}).redis.prefix == "fileprefix"


def test_the_environment_overrides_the_file(config_file):
    env = {"LDPSTREAM_KAFKA": "env-kafka:9092", "LDPSTREAM_REDIS": "redis://env-redis:6379/2",
           "LDPSTREAM_PREFIX": "envprefix", "LDPSTREAM_REGISTRY": "env/metrics.toml",
           "LDPSTREAM_KAFKA_CONFIG": "client.id=from-env, acks=all", "LDPSTREAM_CONFIG": str(config_file)}
    config = ServiceConfig.load({}, environ=env)
    assert config.kafka.bootstrap == "env-kafka:9092"
    assert dict(config.kafka.settings) == {"client.id": "from-env", "linger.ms": "7", "acks": "all"}
    assert config.redis == RedisConfig("redis://env-redis:6379/2", "envprefix")
    assert config.registry == "env/metrics.toml"  # as given: relative to where the process runs


def test_flags_override_the_environment_and_the_file(config_file):
    env = {"LDPSTREAM_KAFKA": "env-kafka:9092", "LDPSTREAM_REDIS": "redis://env-redis:6379/2",
           "LDPSTREAM_PREFIX": "envprefix", "LDPSTREAM_REGISTRY": "env/metrics.toml",
           "LDPSTREAM_KAFKA_CONFIG": "client.id=from-env,acks=all"}
    flags = {"kafka": "flag-kafka:9092,flag-kafka-2:9093", "redis": "rediss://flag-redis:6380/3",
             "prefix": "flagprefix", "registry": "flag/metrics.toml", "kafka_config": ["client.id=from-flag"],
             "consumer_config": ["session.timeout.ms=9000", "group.instance.id=c-1"], "config": str(config_file)}
    config = ServiceConfig.load(flags, environ=env)
    assert config.kafka.bootstrap == "flag-kafka:9092,flag-kafka-2:9093"
    assert dict(config.kafka.settings) == {"client.id": "from-flag", "linger.ms": "7", "acks": "all"}
    assert dict(config.kafka.consumer_settings) == {"session.timeout.ms": "9000", "group.instance.id": "c-1"}
    assert config.redis == RedisConfig("rediss://flag-redis:6380/3", "flagprefix")
    assert config.registry == "flag/metrics.toml"


def test_unset_flags_fall_through(config_file):
    flags = {"kafka": None, "redis": None, "prefix": None, "registry": None, "kafka_config": [],
             "consumer_config": [], "config": None}
    assert ServiceConfig.load(flags, environ={}, file=config_file) == ServiceConfig.load({}, {}, config_file)


def test_from_args_reads_the_shared_flags(config_file):
    parser = argparse.ArgumentParser()
    add_service_arguments(parser, consumer=True)
    args = parser.parse_args(["--config", str(config_file), "--kafka", "flag-kafka:1", "--kafka-config", "a=1",
                              "--kafka-config", "b=2", "--consumer-config", "c=3", "--prefix", "p"])
    config = ServiceConfig.from_args(args)
    assert config.kafka.bootstrap == "flag-kafka:1"
    assert dict(config.kafka.settings) == {"client.id": "from-file", "linger.ms": "7", "a": "1", "b": "2"}
    assert dict(config.kafka.consumer_settings) == {"session.timeout.ms": "6000", "c": "3"}
    assert config.redis == RedisConfig("redis://file-redis:6379/1", "p")


# ------------------------------------------------------------------------------------------ registry path


def test_the_registry_of_a_file_is_relative_to_the_file(config_file):
    config = ServiceConfig.load({}, environ={}, file=config_file)
    assert Path(config.registry) == config_file.parent / "registry" / "metrics.toml"


def test_an_absolute_registry_in_a_file_stays_absolute(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('registry = "/etc/ldpstream/metrics.toml"\n')
    assert ServiceConfig.load({}, environ={}, file=path).registry == "/etc/ldpstream/metrics.toml"


def test_a_file_without_a_registry_leaves_the_default(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('[redis]\nprefix = "x"\n')
    assert ServiceConfig.load({}, environ={}, file=path).registry == DEFAULT_REGISTRY


# ------------------------------------------------------------------------------------------ validation


@pytest.mark.parametrize(("bootstrap", "message"), [
    ("kafka", r"Kafka bootstrap server 'kafka' is not 'host:port'"),
    ("kafka:port", r"'kafka:port' is not 'host:port'"),
    ("a:1,:2", r"':2' is not 'host:port'"),
    ("  ", r"must be a non-empty 'host:port"),
])
def test_a_bad_bootstrap_is_refused_naming_it(bootstrap, message):
    with pytest.raises(ConfigError, match=message):
        ServiceConfig.load({"kafka": bootstrap}, environ={})


def test_a_bad_bootstrap_in_the_environment_is_refused():
    with pytest.raises(ConfigError, match="'broker' is not 'host:port'"):
        ServiceConfig.load({}, environ={"LDPSTREAM_KAFKA": "broker"})


@pytest.mark.parametrize("url", ["http://redis:6379", "localhost:6379", "", "redis-server"])
def test_a_bad_redis_url_is_refused(url):
    with pytest.raises(ConfigError, match=r"must start with redis://, rediss://, unix://, redis\+cluster://"):
        RedisConfig(url)


def test_a_bad_redis_url_from_a_flag_is_refused_naming_it():
    with pytest.raises(ConfigError, match="'http://redis:6379'"):
        ServiceConfig.load({"redis": "http://redis:6379"}, environ={})


def test_unix_socket_and_tls_redis_urls_are_accepted():
    assert RedisConfig("unix:///run/redis.sock").url == "unix:///run/redis.sock"
    assert RedisConfig("rediss://r:6380/0").url == "rediss://r:6380/0"


@pytest.mark.parametrize("prefix", ["a{b}", "with space", "tab\there", "{x"])
def test_a_bad_prefix_is_refused(prefix):
    with pytest.raises(ConfigError, match=r"key prefix .* must be non-empty, without braces or spaces"):
        ServiceConfig.load({"prefix": prefix}, environ={})


def test_an_empty_prefix_is_refused():
    with pytest.raises(ConfigError, match="must be non-empty"):
        RedisConfig("redis://r:6379/0", "")


@pytest.mark.parametrize(("flags", "env", "message"), [
    ({"kafka_config": ["no-equals"]}, {}, r"--kafka-config expects KEY=VALUE, got 'no-equals'"),
    ({"kafka_config": ["=value"]}, {}, r"--kafka-config expects KEY=VALUE, got '=value'"),
    ({"consumer_config": ["x"]}, {}, r"--consumer-config expects KEY=VALUE, got 'x'"),
    ({}, {"LDPSTREAM_KAFKA_CONFIG": "a=1,broken"}, r"LDPSTREAM_KAFKA_CONFIG expects KEY=VALUE, got 'broken'"),
])
def test_a_bad_key_value_is_refused_naming_its_source(flags, env, message):
    with pytest.raises(ConfigError, match=message):
        ServiceConfig.load(flags, environ=env)


def test_key_values_keep_equals_signs_in_values_and_strip_spaces():
    assert parse_key_values([" sasl.password = a=b ", "empty="], "x") == {"sasl.password": "a=b", "empty": ""}


@pytest.mark.parametrize("setting", ["bootstrap.servers=x:1", "group.id=g"])
def test_bootstrap_and_group_id_cannot_be_set_as_librdkafka_settings(setting):
    with pytest.raises(ConfigError, match="with their own options"):
        ServiceConfig.load({"kafka_config": [setting]}, environ={})
    with pytest.raises(ConfigError, match="with their own options"):
        ServiceConfig.load({"consumer_config": [setting]}, environ={})


def test_a_missing_file_is_refused_naming_it(tmp_path):
    missing = tmp_path / "nope.toml"
    with pytest.raises(ConfigError, match=re.escape(f"configuration file {missing} does not exist")):
        ServiceConfig.load({"config": str(missing)}, environ={})
    with pytest.raises(ConfigError, match="does not exist"):
        ServiceConfig.load({}, environ={"LDPSTREAM_CONFIG": str(missing)})


def test_a_file_that_is_not_toml_is_refused_naming_it(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text("[kafka\nbootstrap = ")
    with pytest.raises(ConfigError, match=re.escape(f"configuration file {path} is not valid TOML")):
        ServiceConfig.load({}, environ={}, file=path)


@pytest.mark.parametrize("text", ['kafka = "k:1"', '[kafka]\nconfig = "a=1"', 'redis = 5'])
def test_a_file_key_that_must_be_a_table_is_refused(tmp_path, text):
    path = tmp_path / "c.toml"
    path.write_text(text + "\n")
    with pytest.raises(ConfigError, match="must be a table"):
        ServiceConfig.load({}, environ={}, file=path)


@pytest.mark.parametrize(("text", "message"), [
    ('[redis]\nprefx = "x"\n', "unknown key 'redis.prefx' (did you mean 'redis.prefix'?)"),
    ('[kafka]\nbootstrapp = "k:1"\n', "unknown key 'kafka.bootstrapp' (did you mean 'kafka.bootstrap'?)"),
    ('registy = "m.toml"\n', "unknown key 'registy' (did you mean 'registry'?)"),
    ('[redsi]\nurl = "redis://r"\n', "unknown key 'redsi' (did you mean 'redis'?)"),
    ('[kafka]\nzzz = 1\n', "unknown key 'kafka.zzz'; known in [kafka]: bootstrap, ca,"),
])
def test_an_unknown_key_in_the_file_is_refused_with_the_closest_valid_one(tmp_path, text, message):
    path = tmp_path / "c.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        ServiceConfig.load({}, environ={}, file=path)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_the_keys_of_the_documented_file_are_known(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('registry = "m.toml"\n[kafka]\nbootstrap = "k:9092"\nconfig = { "client.id" = "x" }\n'
                    'consumer = { "session.timeout.ms" = "6000" }\n[redis]\nurl = "redis://r:6379/0"\n'
                    'prefix = "p"\n')
    config = ServiceConfig.load({}, environ={}, file=path)
    assert config.redis.prefix == "p" and config.kafka.bootstrap == "k:9092"


def test_a_bad_value_in_the_file_is_refused(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('[redis]\nurl = "http://r"\n')
    with pytest.raises(ConfigError, match="'http://r'"):
        ServiceConfig.load({}, environ={}, file=path)


# ------------------------------------------------------------------------------------------ client configs


@pytest.fixture
def kafka() -> KafkaConfig:
    return KafkaConfig("k1:9092,k2:9092", {"client.id": "mine", "security.protocol": "SSL", "linger.ms": "50"},
                       {"session.timeout.ms": "6000"})


def test_the_producer_gets_bootstrap_defaults_and_the_users_settings_last(kafka):
    config = kafka.producer(**{"acks": "all", "linger.ms": 5})
    assert config == {"bootstrap.servers": "k1:9092,k2:9092", "acks": "all", "linger.ms": "50",
                      "client.id": "mine", "security.protocol": "SSL"}


def test_the_consumer_gets_the_consumer_settings_too_and_its_group(kafka):
    config = kafka.consumer("group-1", **{"enable.auto.commit": False, "session.timeout.ms": "45000"})
    assert config == {"bootstrap.servers": "k1:9092,k2:9092", "enable.auto.commit": False,
                      "session.timeout.ms": "6000", "client.id": "mine", "security.protocol": "SSL",
                      "linger.ms": "50", "group.id": "group-1"}


def test_the_admin_and_probe_get_bootstrap_and_the_users_settings_but_not_the_consumers(kafka):
    assert kafka.admin() == {"bootstrap.servers": "k1:9092,k2:9092", "client.id": "mine",
                             "security.protocol": "SSL", "linger.ms": "50"}
    probe = kafka.probe()
    assert probe["bootstrap.servers"] == "k1:9092,k2:9092" and probe["security.protocol"] == "SSL"
    assert probe["group.id"] == "_ldpstream_probe" and probe["enable.auto.commit"] is False
    assert "session.timeout.ms" not in probe
    assert kafka.probe("other")["group.id"] == "other"


def test_kafka_config_of_a_string_or_a_config():
    assert KafkaConfig.of("k:1") == KafkaConfig("k:1")
    config = KafkaConfig("k:1", {"a": "b"})
    assert KafkaConfig.of(config) is config


def test_the_loaded_configuration_builds_clients_with_every_source_merged(config_file):
    config = ServiceConfig.load({"kafka_config": ["acks=1"]}, environ={}, file=config_file)
    assert config.kafka.producer() == {"bootstrap.servers": "file-kafka:9092", "client.id": "from-file",
                                       "linger.ms": "7", "acks": "1"}
    assert config.kafka.consumer("g")["session.timeout.ms"] == "6000"
    assert "session.timeout.ms" not in config.kafka.admin()


def test_the_redis_config_builds_a_client_and_a_store_without_connecting():
    redis_config = RedisConfig("redis://somewhere.invalid:6379/4", "pfx")
    client = redis_config.client()
    assert client.connection_pool.connection_kwargs["host"] == "somewhere.invalid"
    assert client.connection_pool.connection_kwargs["db"] == 4
    store = redis_config.store()
    assert store.prefix == "pfx"
