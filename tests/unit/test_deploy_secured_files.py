"""The secured and clustered deployment files (deploy/compose.secure.yaml, deploy/compose.cluster.yaml,
deploy/k8s-secure/) configure ldpstream through settings the service configuration understands: each
ldpstream service's environment, with the mounted files in place, builds a SASL_SSL Kafka and a TLS (or
cluster) Redis configuration; passwords only ever as files."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from ldpstream.config import ServiceConfig
from ldpstream.deploy.secure import make_secrets

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


@pytest.fixture(scope="module")
def secrets_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("secrets")
    make_secrets(folder, ("kafka", "redis"))
    return folder


def _config(environment: dict[str, str], mounted: str, secrets_dir: Path) -> ServiceConfig:
    env = {k: str(v).replace(mounted, str(secrets_dir)) for k, v in environment.items()}
    assert not any("PASSWORD" in k and not k.endswith("_FILE") for k in env), "a password given as a value"
    return ServiceConfig.load({}, environ=env)


def test_compose_secure_configures_tls_sasl_and_an_acl_user(secrets_dir):
    overlay = yaml.safe_load((DEPLOY / "compose.secure.yaml").read_text())
    base_env = yaml.safe_load((DEPLOY / "compose.yaml").read_text())["x-ldpstream"]["environment"]
    for name in ("consume", "decode"):
        service = overlay["services"][name]
        config = _config({**base_env, **service["environment"]}, "/run/secrets", secrets_dir)
        assert config.kafka.security.protocol == "SASL_SSL" and config.kafka.security.user == "ldpstream"
        assert config.kafka.security.password is not None and config.redis.tls and config.redis.user == "ldpstream"
        mounted = {Path(v).name for k, v in service["environment"].items() if str(v).startswith("/run/secrets/")}
        assert mounted <= set(service["secrets"]), f"{name} does not mount {mounted - set(service['secrets'])}"
    files = {s["file"].removeprefix("./secrets/") for s in overlay["secrets"].values()}
    assert files <= {p.name for p in secrets_dir.iterdir()}, "ldpstream stack secrets makes every mounted file"


def test_compose_cluster_points_ldpstream_at_a_cluster_url():
    overlay = yaml.safe_load((DEPLOY / "compose.cluster.yaml").read_text())
    for name in ("consume", "decode"):
        url = overlay["services"][name]["environment"]["LDPSTREAM_REDIS"]
        config = ServiceConfig.load({}, environ={"LDPSTREAM_REDIS": url})
        assert config.redis.cluster
        nodes = {n.split(":")[0] for n in url.removeprefix("redis+cluster://").split(",")}
        assert nodes <= set(overlay["services"])


def test_k8s_secure_overlay_configures_the_same_and_mounts_the_credentials(secrets_dir):
    secret = yaml.safe_load((DEPLOY / "k8s-secure" / "services-secure.yaml").read_text())
    config = _config(secret["stringData"], "/var/run/secrets/ldpstream", secrets_dir)
    assert config.kafka.security.protocol == "SASL_SSL" and config.redis.tls
    patch = yaml.safe_load((DEPLOY / "k8s-secure" / "credentials-volume.yaml").read_text())
    assert patch[1]["value"]["mountPath"] == "/var/run/secrets/ldpstream"
    if shutil.which("kubectl"):
        built = subprocess.run(["kubectl", "kustomize", str(DEPLOY / "k8s-secure")], capture_output=True,
                               text=True, check=True).stdout
        deployments = [d for d in yaml.safe_load_all(built) if d and d["kind"] == "Deployment"]
        assert len(deployments) == 2
        for deployment in deployments:
            mounts = deployment["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
            assert {"name": "credentials", "mountPath": "/var/run/secrets/ldpstream", "readOnly": True} in mounts
