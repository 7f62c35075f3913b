"""The private engine's command line, the image inputs and the fixtures' source choice, without an engine (the
engine and the image builder are the checkout's development tooling, ``tools/``).

The engine, the images and the containers themselves are exercised for real in CI's container phase
(``tests/containers`` and the integration tests with ``LDPSTREAM_SERVICES=testcontainers``)."""

from __future__ import annotations

import itertools
import os

import pytest

from ldpstream.cli import build_parser
from ldpstream.deploy import containers
from ldpstream.deploy.stack import KAFKA_FILES
from ldpstream.testing import SOURCES, forced_source
from tests.containers.test_compose_deployment import SERVICES, derived_compose
from tools import engine, images


def test_engine_lives_under_the_stack_dir_and_its_data_root_under_the_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("LDPSTREAM_STACK_DIR", str(tmp_path / "stack"))
    monkeypatch.setenv("LDPSTREAM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("LDPSTREAM_ENGINE_DATA_ROOT", raising=False)
    cfg = engine.EngineConfig.from_env()
    assert cfg.socket == tmp_path / "stack" / "engine" / "docker.sock"
    assert cfg.data_root == tmp_path / "cache" / "engine"
    described = engine.EngineStatus(False, cfg.docker_host, cfg.data_root, cfg.log).describe()
    assert described.splitlines()[-1] == f"DOCKER_HOST=unix://{cfg.socket}"


def test_dockerd_gets_its_own_folders_and_leaves_the_firewall_alone(tmp_path):
    cfg = engine.EngineConfig(run_dir=tmp_path / "run", data_root=tmp_path / "data")
    argv = engine.dockerd_argv(cfg, "/usr/sbin/dockerd", "vfs")
    flags = {flag: value for flag, value in itertools.pairwise(argv)
             if flag.startswith("--") and "=" not in flag}
    assert flags["--host"] == cfg.docker_host
    assert flags["--data-root"] == str(cfg.data_root)
    assert flags["--exec-root"] == str(cfg.exec_root)
    assert flags["--pidfile"] == str(cfg.pid_file)
    assert flags["--ip"] == "127.0.0.1"
    assert {"--storage-driver=vfs", "--iptables=false", "--ip6tables=false"} <= set(argv)


def test_engine_status_of_a_socket_nobody_serves(tmp_path):
    assert not engine.socket_answers(tmp_path / "none.sock")


@pytest.mark.parametrize("argv", [["stack", "up"], ["stack", "status", "--secure"], ["stack", "down"]])
def test_stack_subcommands_parse(argv):
    args = build_parser().parse_args(argv)
    assert callable(args.func)


@pytest.mark.parametrize(("tool", "argv"), [(engine, ["up"]), (engine, ["status"]), (engine, ["down"]),
                                            (images, []), (images, ["--only", "redis,kafka", "--force"])])
def test_the_tools_command_lines_parse(tool, argv):
    args = tool.build_parser().parse_args(argv)
    assert vars(args)


def test_the_engine_and_the_images_are_development_tooling_not_commands():
    with pytest.raises(SystemExit):
        build_parser().parse_args(["stack", "engine", "up"])
    with pytest.raises(SystemExit):
        build_parser().parse_args(["stack", "images"])
    assert engine.EngineConfig.from_env().docker_host == f"unix://{containers.private_engine_socket()}"


def test_image_names_are_the_pinned_names_a_user_pulls():
    from ldpstream import __version__
    from ldpstream.deploy.stack import KAFKA_VERSION

    kafka_version = KAFKA_VERSION
    assert containers.KAFKA_IMAGE.split(":") == ["apache/kafka", kafka_version]
    assert f"redis:7.0.15-{images.DEBIAN_SUITE}" == containers.REDIS_IMAGE
    assert containers.ldpstream_image() == f"ldpstream:{__version__}"
    assert (images.KAFKA_IMAGE, images.REDIS_IMAGE) == (containers.KAFKA_IMAGE, containers.REDIS_IMAGE)


def test_ldpstream_context_follows_the_dockerignore_allow_list():
    files = set(images.ldpstream_context_files())
    assert {"pyproject.toml", "README.md", "deploy/Dockerfile", "ldpstream/__init__.py",
            "ldpstream/producers", "producers/client.py"} <= files  # symbolic links kept as links
    assert not any(f.startswith(("tests/", "bench/", "deploy/k8s/", "tools/", ".git/")) for f in files)
    assert not any("__pycache__" in f for f in files)


def test_input_digest_depends_on_contents_not_on_times(tmp_path):
    (tmp_path / "a").write_text("one")
    before = images._files_digest(tmp_path, ["a"])
    os.utime(tmp_path / "a", (0, 0))
    assert images._files_digest(tmp_path, ["a"]) == before
    (tmp_path / "a").write_text("two")
    assert images._files_digest(tmp_path, ["a"]) != before


def test_debian_mirror_can_be_chosen(monkeypatch):
    monkeypatch.setenv("LDPSTREAM_DEBIAN_MIRROR", "http://mirror.invalid/debian")
    assert images.debian_mirror() == "http://mirror.invalid/debian"


def kafka_property(variable: str) -> str:
    """The official image's rule, as tools/images/kafka/docker/run applies it."""
    key = variable.removeprefix("KAFKA_").lower()
    return key.replace("___", "\x01").replace("__", "\x02").replace("_", ".").replace("\x01", "-").replace("\x02", "_")


def test_fixture_kafka_environment_names_real_broker_properties():
    env = containers.kafka_environment("127.0.0.1", 40123)
    properties = {kafka_property(k): v for k, v in env.items() if k.startswith("KAFKA_") and k != "KAFKA_HEAP_OPTS"}
    template = KAFKA_FILES / "server.properties.template"
    local_stack_keys = {line.split("=", 1)[0] for line in template.read_text().splitlines()
                        if "=" in line and not line.startswith("#")}
    # every setting of the local stack's broker is there, with the client listener advertised on the host port
    assert local_stack_keys - {"log.retention.hours", "log.segment.bytes", "log.dirs"} <= set(properties)
    assert properties["advertised.listeners"] == "PLAINTEXT://127.0.0.1:40123"
    assert properties["auto.create.topics.enable"] == "false"


def test_forced_source_is_checked(monkeypatch):
    monkeypatch.delenv("LDPSTREAM_SERVICES", raising=False)
    assert forced_source() is None
    for source in SOURCES:
        monkeypatch.setenv("LDPSTREAM_SERVICES", source.upper())
        assert forced_source() == source
    monkeypatch.setenv("LDPSTREAM_SERVICES", "docker")
    with pytest.raises(ValueError, match="testcontainers"):
        forced_source()


def test_derived_compose_changes_only_what_compose_v1_and_the_test_need():
    original = images._DEPLOY / "compose.yaml"
    import yaml

    source = yaml.safe_load(original.read_text())["services"]
    derived = derived_compose(40999)
    assert "name" not in derived and "configs" not in derived
    assert set(derived["services"]) == set(SERVICES)
    for name, spec in derived["services"].items():
        assert spec["image"] == source[name]["image"]
        assert spec.get("entrypoint") == source[name].get("entrypoint")
        assert spec.get("depends_on") == source[name].get("depends_on")
        assert spec["healthcheck"]["test"] == source[name]["healthcheck"]["test"] if "healthcheck" in spec else True
        for mount in source[name].get("configs", []):
            assert any(volume.endswith(f":{mount['target']}:ro") for volume in spec["volumes"])
    assert derived["services"]["kafka"]["ports"] == ["127.0.0.1:40999:29092"]
    assert "EXTERNAL://127.0.0.1:40999" in derived["services"]["kafka"]["environment"]["KAFKA_ADVERTISED_LISTENERS"]
    consume = [a for a in derived["services"]["consume"]["command"]]
    assert consume == source["consume"]["command"]
