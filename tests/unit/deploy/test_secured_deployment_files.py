"""The secured and clustered deployment files (deploy/compose.secure.yaml, deploy/compose.cluster.yaml,
deploy/k8s-secure/) configure ldpstream through settings the service configuration understands: each
ldpstream service's environment, with the mounted files in place, builds a SASL_SSL Kafka and a TLS (or
cluster) Redis configuration with its role's own user; passwords only ever as files, readable by the group the
containers share and by no one else; the Kafka ACLs and Redis ACL users they ship are those of
deploy/secure.py (KAFKA_ACLS, redis_acl_rules), which the secured local stack runs."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from ldpstream.config import ServiceConfig
from ldpstream.deploy import secure
from ldpstream.deploy.secure import make_secrets
from ldpstream.errors import ConfigError

DEPLOY = Path(__file__).resolve().parents[3] / "deploy"


@pytest.fixture(scope="module")
def secrets_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("secrets")
    make_secrets(folder, ("kafka", "redis"))
    return folder


def _config(environment: dict[str, str], mounted: str, secrets_dir: Path) -> ServiceConfig:
    env = {k: str(v).replace(mounted, str(secrets_dir)) for k, v in environment.items()}
    assert not any("PASSWORD" in k and not k.endswith("_FILE") for k in env), "a password given as a value"
    return ServiceConfig.load({}, environ=env)


ROLE_OF = {"consume": "consumer", "decode": "decoder"}


def test_make_secrets_leaves_the_files_to_the_group_of_the_containers_alone(secrets_dir):
    assert secrets_dir.stat().st_mode & 0o777 == 0o700
    for path in secrets_dir.iterdir():
        mode = path.stat().st_mode & 0o777
        expected = {"ca.key": 0o600, "ca.pem": 0o644}.get(path.name, 0o640)
        assert mode == expected, f"{path.name}: {mode:o}"
        if os.geteuid() == 0 and path.name != "ca.key":
            assert path.stat().st_gid == secure.SECRETS_GID, path.name
    assert {f"{service}-{user}-password" for service, users in (("kafka", secure.KAFKA_USERS),
                                                               ("redis", secure.REDIS_USERS)) for user in users} \
        <= {p.name for p in secrets_dir.iterdir()}


def test_compose_secure_gives_each_role_its_own_users_and_no_other_password(secrets_dir):
    overlay = yaml.safe_load((DEPLOY / "compose.secure.yaml").read_text())
    base_env = yaml.safe_load((DEPLOY / "compose.yaml").read_text())["x-ldpstream"]["environment"]
    for name, role in ROLE_OF.items():
        service = overlay["services"][name]
        config = _config({**base_env, **service["environment"]}, "/run/secrets", secrets_dir)
        assert config.kafka.security.protocol == "SASL_SSL" and config.kafka.security.user == role
        assert config.kafka.security.password is not None and config.redis.tls and config.redis.user == role
        mounted = {Path(v).name for k, v in service["environment"].items() if str(v).startswith("/run/secrets/")}
        assert mounted <= set(service["secrets"]), f"{name} does not mount {mounted - set(service['secrets'])}"
        assert set(service["secrets"]) == {"ca.pem", f"kafka-{role}-password", f"redis-{role}-password"}
    for name in ("kafka", "redis", "topics"):  # they read 0640 files of the group 10001
        assert str(secure.SECRETS_GID) in overlay["services"][name]["group_add"], name
    files = {s["file"].removeprefix("./secrets/") for s in overlay["secrets"].values()}
    assert files <= {p.name for p in secrets_dir.iterdir()}, "ldpstream stack secrets makes every mounted file"


def test_compose_secure_ships_the_kafka_acls_and_redis_users_of_the_secured_stack():
    services = yaml.safe_load((DEPLOY / "compose.secure.yaml").read_text())["services"]
    kafka = services["kafka"]["command"][0]
    assert all(line in kafka.splitlines() for line in secure.authorizer_properties())
    # no password on a command line: the SCRAM user goes to the StorageTool in a Java argument file
    assert "kafka-storage.sh" not in kafka and "kafka-run-class.sh @$$a" in kafka
    topics = services["topics"]["command"][0]
    # the role users' passwords likewise, to kafka.admin.ConfigCommand
    assert topics.count("--add-config") == 1 and "$$run @$$a" in topics and "kafka-configs.sh" not in topics
    shipped = set()
    for line in topics.splitlines():
        if line.strip().startswith("$$acls "):
            words = shlex.split(line)
            option = dict(zip(words[1::2], words[2::2], strict=False))
            kind = "TOPIC" if "--topic" in option else "GROUP"
            shipped.add(secure.KafkaAcl(option["--allow-principal"].removeprefix("User:"),
                                        option["--operation"].upper(), kind, option.get("--topic") or
                                        option["--group"], option["--resource-pattern-type"].upper()))
    assert shipped == set(secure.KAFKA_ACLS)
    redis = services["redis"]["command"][0]
    users = dict(re.findall(r"printf 'user %s on >%s %s\\n' (\w+) \"[^\"]+\" \\\n\s+'([^']+)'", redis))
    assert users == secure.redis_acl_rules("ldp")
    assert "user default off" in redis and "&*" not in redis and "+@all" not in users["consumer"]


def test_compose_secure_controller_listener_admits_the_brokers_certificate_alone():
    services = yaml.safe_load((DEPLOY / "compose.secure.yaml").read_text())["services"]
    kafka = services["kafka"]["command"][0].replace("$$", "$")  # as the container's shell reads it
    lines = kafka.splitlines()
    listener = secure.controller_listener_properties(f"$s/{secure.BROKER_KEYSTORE}", "$s/ca.pem")
    assert all(line.strip() in {x.strip() for x in lines} for line in listener), listener
    protocols = next(x for x in lines if x.strip().startswith("listener.security.protocol.map="))
    assert "CONTROLLER:SSL" in protocols and "PLAINTEXT" not in protocols
    assert "ANONYMOUS" not in kafka and f"User:{secure.BROKER_PRINCIPAL}" in kafka
    assert secure.BROKER_KEYSTORE in services["kafka"]["secrets"]
    assert not any(secure.BROKER_KEYSTORE in services[name].get("secrets", []) for name in services if name != "kafka")
    # the healthcheck reaches the controller with the broker's certificate, which the command writes for it
    health = services["kafka"]["healthcheck"]["test"][1]
    assert "--bootstrap-controller" in health and "--command-config /tmp/controller.properties" in health
    assert f"ssl.keystore.location=$s/{secure.BROKER_KEYSTORE}" in kafka and "> /tmp/controller.properties" in kafka


def test_the_brokers_controller_certificate_is_its_own_for_server_and_client(secrets_dir):
    keystore = secrets_dir / secure.BROKER_KEYSTORE
    assert keystore.stat().st_mode & 0o777 == 0o640
    text = subprocess.run(["openssl", "x509", "-noout", "-subject", "-ext", "subjectAltName,extendedKeyUsage",
                           "-in", str(keystore)], capture_output=True, text=True, check=True).stdout
    assert f"CN = {secure.BROKER_PRINCIPAL}" in text or f"CN={secure.BROKER_PRINCIPAL}" in text, text
    assert "DNS:kafka" in text and "TLS Web Server Authentication" in text and "TLS Web Client Authentication" in text
    assert keystore.read_text() != (secrets_dir / "server-keystore.pem").read_text()  # Redis holds the server key
    with pytest.raises(ConfigError, match="the broker's own identity"):
        secure.make_client_certificate(secrets_dir, secure.BROKER_PRINCIPAL)


def test_compose_cluster_points_ldpstream_at_a_cluster_url():
    overlay = yaml.safe_load((DEPLOY / "compose.cluster.yaml").read_text())
    for name in ("consume", "decode"):
        url = overlay["services"][name]["environment"]["LDPSTREAM_REDIS"]
        config = ServiceConfig.load({}, environ={"LDPSTREAM_REDIS": url})
        assert config.redis.cluster
        nodes = {n.split(":")[0] for n in url.removeprefix("redis+cluster://").split(",")}
        assert nodes <= set(overlay["services"])


def test_k8s_secure_overlay_gives_each_role_its_own_credentials_mounted_0440(secrets_dir):
    secret = yaml.safe_load((DEPLOY / "k8s-secure" / "services-secure.yaml").read_text())
    for deployment, role in ROLE_OF.items():
        patch = yaml.safe_load((DEPLOY / "k8s-secure" / f"credentials-{deployment}.yaml").read_text())
        env = {op["value"]["name"]: op["value"]["value"] for op in patch if op["path"].endswith("/env/-")}
        volume = next(op["value"] for op in patch if op["path"].endswith("/volumes/-"))
        assert volume["secret"]["defaultMode"] == 0o440
        assert {i["key"] for i in volume["secret"]["items"]} == {"ca.pem", f"kafka-{role}-password",
                                                                 f"redis-{role}-password"}
        assert any(op["path"].endswith("/securityContext/fsGroup") and op["value"] == secure.SECRETS_GID
                   for op in patch)
        mounted = {i["path"]: i["key"] for i in volume["secret"]["items"]}
        for name, key in mounted.items():  # the files the environment names, as the Secret's items hold them
            target = secrets_dir / "k8s" / role / name
            target.parent.mkdir(parents=True, exist_ok=True)
            if not target.exists():
                target.symlink_to(secrets_dir / key)
        config = _config({**secret["stringData"], **env}, "/var/run/secrets/ldpstream", secrets_dir / "k8s" / role)
        assert config.kafka.security.protocol == "SASL_SSL" and config.redis.tls
        assert config.kafka.security.user == role and config.redis.user == role
    if shutil.which("kubectl"):
        built = subprocess.run(["kubectl", "kustomize", str(DEPLOY / "k8s-secure")], capture_output=True,
                               text=True, check=True).stdout
        deployments = [d for d in yaml.safe_load_all(built) if d and d["kind"] == "Deployment"]
        assert len(deployments) == 2
        for deployment in deployments:
            role = ROLE_OF[deployment["metadata"]["name"].removeprefix("ldpstream-")]
            pod = deployment["spec"]["template"]["spec"]
            mounts = pod["containers"][0]["volumeMounts"]
            assert {"name": "credentials", "mountPath": "/var/run/secrets/ldpstream", "readOnly": True} in mounts
            assert pod["securityContext"]["fsGroup"] == secure.SECRETS_GID
            env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
            assert env["LDPSTREAM_KAFKA_USER"] == env["LDPSTREAM_REDIS_USER"] == role
            keys = {i["key"] for v in pod["volumes"] if v["name"] == "credentials" for i in v["secret"]["items"]}
            assert not any(other in key for key in keys for other in secure.ROLES if other != role)


def test_k8s_secure_platform_files_ship_the_same_acls():
    users = [u for u in yaml.safe_load_all((DEPLOY / "k8s-secure" / "kafka-users.yaml").read_text()) if u]
    shipped = {secure.KafkaAcl(u["metadata"]["name"], op.upper(), acl["resource"]["type"].upper(),
                               acl["resource"]["name"], acl["resource"]["patternType"].upper())
               for u in users for acl in u["spec"]["authorization"]["acls"] for op in acl["operations"]}
    assert shipped == set(secure.KAFKA_ACLS)
    lines = (DEPLOY / "k8s-secure" / "redis-users.acl.template").read_text().splitlines()
    assert lines[0] == "user default off"
    rules = {line.split()[1]: line.split(" ", 4)[4] for line in lines[1:]}
    assert rules == {u: r for u, r in secure.redis_acl_rules("ldp").items() if u != secure.ADMIN}
