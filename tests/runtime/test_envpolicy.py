"""``dsh.runtime.kernel.envpolicy``: the one secret list, declared secrets, and the row policy."""

from __future__ import annotations

import pytest

from dsh.core.errors import ConfigError
from dsh.core.launch import EnvSnapshot
from dsh.runtime.kernel.envpolicy import (
    EnvPolicy,
    declared_secrets,
    is_secret,
    scrubbed,
    secret_value,
    withheld,
)
from dsh.runtime.kernel.plugin import EnvVar, Manifest

ENV = {"PATH": "/bin", "HOME": "/h", "LANG": "C", "DEEPSEEK_API_KEY": "k",
       "GITHUB_TOKEN": "t", "DB_PASSWORD": "p", "DSH_POSTGRES_DSN": "d", "aws_secret": "s",
       "SSH_AUTH_SOCK": "/a", "MY_LLM_ACCESS": "declared", "BUILD_MODE": "fast"}


@pytest.mark.parametrize("name", ["DEEPSEEK_API_KEY", "GITHUB_TOKEN", "DB_PASSWORD",
                                  "db_passwd", "SSH_PASSPHRASE", "DSH_POSTGRES_DSN",
                                  "GOOGLE_APPLICATION_CREDENTIALS", "aws_secret",
                                  "SSH_AUTH_SOCK", "PRIVATE_THING", "SESSION_COOKIE"])
def test_secret_looking_names(name: str) -> None:
    assert is_secret(name)


@pytest.mark.parametrize("name", ["SMTP_PASS", "DB_PASS", "PASSWORD", "MYSQL_PWD", "GH_PAT",
                                  "AZURE_DEVOPS_PAT", "JWT", "AUTH_JWT_TOKEN", "jwt_secret",
                                  "SLACK_WEBHOOK_URL", "WEBHOOK", "APP_SESSION", "SESSION_ID",
                                  "FLASK_SESSION_KEY", "AWS_SESSION_TOKEN",
                                  "OTEL_EXPORTER_OTLP_HEADERS",
                                  "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
                                  "otel_exporter_otlp_logs_headers"])
def test_names_added_by_issue_32(name: str) -> None:
    assert is_secret(name)


@pytest.mark.parametrize("name", ["PATH", "HOME", "LANG", "TERM", "PYTHONPATH", "CC", "PWD",
                                  "OLDPWD", "TZ", "LC_ALL", "EDITOR",
                                  "DBUS_SESSION_BUS_ADDRESS", "XDG_SESSION_TYPE",
                                  "XDG_SESSION_ID", "DESKTOP_SESSION", "SESSION_MANAGER",
                                  "TERM_SESSION_ID", "OTEL_EXPORTER_OTLP_ENDPOINT",
                                  "PATTERN", "OTEL_SERVICE_NAME"])
def test_ordinary_names(name: str) -> None:
    assert not is_secret(name)
    assert is_secret(name, declared={name})


@pytest.mark.parametrize(("name", "value", "secret"), [
    ("NSS_WRAPPER_PASSWD", "/tmp/passwd", False),  # a passwd file, not a password
    ("SSH_ASKPASS", "/usr/lib/ssh/x11-ssh-askpass", False),  # a program that asks
    ("SUDO_ASKPASS", "~/bin/askpass", False),
    ("MYSQL_PASSWD", "hunter2", True),
    ("DB_PASSWD", "/no/longer/a/path because spaces\nand lines", True),
    ("SMTP_PASS", "/looks/like/a/path", True),  # only PASSWD and ASKPASS names hold paths
    ("PASSWD_TOKEN", "/tmp/x", True),  # TOKEN decides
])
def test_a_passwd_or_askpass_name_holding_a_path(name: str, value: str, secret: bool) -> None:
    assert is_secret(name, value=value) is secret
    assert is_secret(name)  # the name alone is a secret: the value settles it


B64 = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9"  # {"alg":"HS256","typ":"JWT"}


@pytest.mark.parametrize(("value", "what"), [
    ("postgres://app:pw@db.example:5432/app", "a URL with credentials"),
    ("redis://:pw@cache:6379/0", "a URL with credentials"),
    ("http://user:secret@proxy.example:3128", "a URL with credentials"),
    ("ghp_" + "A1b2" * 9, "a GitHub token"),
    ("gho_" + "A1b2" * 9, "a GitHub token"),
    ("github_pat_11ABCDEFG0" + "x" * 40, "a GitHub token"),
    ("token ghs_" + "A1b2" * 9 + " in a line", "a GitHub token"),
    ("sk-" + "a1B2" * 12, "an API key (sk-)"),
    ("sk-proj-" + "a1B2" * 20, "an API key (sk-)"),
    ("sk-ant-api03-" + "a1B2_-" * 15, "an API key (sk-)"),
    ("xoxb-1234567890-abcdefghij", "a Slack token"),
    ("xoxp-1234567890-abcdefghij", "a Slack token"),
    ("AKIAIOSFODNN7EXAMPLE", "an AWS access key id"),
    ("ASIAIOSFODNN7EXAMPLE", "an AWS access key id"),
    (f"{B64}.eyJzdWIiOiIxMjMifQ.c2ln", "a JWT"),
    (f"Bearer {B64}.eyJzdWIiOiIxMjMifQ.", "a JWT"),  # unsigned (alg none) has no signature
    ("-----BEGIN PRIVATE KEY-----\nMIIB\n-----END PRIVATE KEY-----", "a PEM private key"),
    ("-----BEGIN RSA PRIVATE KEY-----\n", "a PEM private key"),
    ("-----BEGIN OPENSSH PRIVATE KEY-----\n", "a PEM private key"),
    ("glpat-" + "a1B2" * 5, "a GitLab token"),
])
def test_secret_values(value: str, what: str) -> None:
    assert secret_value(value) == what
    assert withheld("ORDINARY_NAME", value)


@pytest.mark.parametrize("value", [
    "https://github.com/owner/repo", "ssh://git@github.com/owner/repo", "unix:path=/run/bus",
    "/opt/sk-learn-models-directory-xyz", "desk-0123456789abcdefghij", "sk-short1",
    "AKIA-not-a-key", "3.11.7", "build-server01.example.corp", "a.b.c",
    "/usr/local/bin:/usr/bin:/bin", "en_US.UTF-8", "Europe/Vienna",
    "xoxz-1234567890-abcdefghij", "-----BEGIN PUBLIC KEY-----", "ghp_short",
    "aGVsbG8gd29ybGQh.aGVsbG8gd29ybGQh.aGVsbG8",  # dotted base64, but no JSON header
])
def test_ordinary_values(value: str) -> None:
    assert secret_value(value) is None
    assert not withheld("ORDINARY_NAME", value)


def test_dsh_names_are_withheld_and_core_gains_tz_and_locale() -> None:
    env = {"DSH_HOME": "/h", "dsh_log_level": "debug", "TZ": "UTC", "LC_TIME": "C",
           "LC_ALL": "C", "PATH": "/bin", "EDITOR": "vi"}
    assert dict(EnvPolicy().build(env)) == {"TZ": "UTC", "LC_TIME": "C", "LC_ALL": "C",
                                           "PATH": "/bin", "EDITOR": "vi"}
    assert dict(EnvPolicy(inherit="core").build(env)) == {"TZ": "UTC", "LC_TIME": "C",
                                                         "LC_ALL": "C", "PATH": "/bin"}
    kept = EnvPolicy(ignore_default_excludes=True).build({**env, "X": "ghp_" + "a1" * 18})
    assert "DSH_HOME" in kept and "X" in kept  # the user's own decision


def test_set_passes_a_secret_value_on_deliberately() -> None:
    token = "ghp_" + "a1" * 18
    policy = EnvPolicy.from_config({"set": {"GH_TOKEN_FOR_TOOL": token}})
    assert dict(policy.build({"UPLINK": token})) == {"GH_TOKEN_FOR_TOOL": token}


def test_declared_secrets_come_from_manifests_and_config() -> None:
    manifest = Manifest(id="p", version="1", env={"LLM_ACCESS": EnvVar(secret=True),
                                                  "LLM_REGION": EnvVar()})
    config = {"api_key_env": "MY_LLM_ACCESS", "base_url_env": "MY_LLM_URL",
              "search": {"token_env": "SEARCH_PASS"}, "model_env": "MY_MODEL",
              "list": [{"secret_env": "IN_A_LIST_IS_NOT_READ"}]}
    assert declared_secrets(manifest, config) == {"LLM_ACCESS", "MY_LLM_ACCESS",
                                                  "SEARCH_PASS"}


def test_the_default_policy_leaves_out_every_secret_and_declared_name() -> None:
    env = EnvPolicy().build(ENV, declared={"MY_LLM_ACCESS"})
    assert dict(env) == {"PATH": "/bin", "HOME": "/h", "LANG": "C", "BUILD_MODE": "fast"}
    assert dict(scrubbed(ENV)) == {**dict(env), "MY_LLM_ACCESS": "declared"}


def test_policy_steps_in_codex_order() -> None:
    policy = EnvPolicy.from_config({"inherit": "core", "exclude": ["lang"],
                                    "set": {"SSH_AUTH_SOCK": "/kept", "UNSET": None,
                                            "EXTRA": "1"}})
    assert dict(policy.build(ENV)) == {"PATH": "/bin", "HOME": "/h",
                                       "SSH_AUTH_SOCK": "/kept", "EXTRA": "1"}
    only = EnvPolicy.from_config({"include_only": ["P*", "*_TOKEN"],
                                  "ignore_default_excludes": True})
    assert dict(only.build(ENV)) == {"PATH": "/bin", "GITHUB_TOKEN": "t"}
    assert dict(EnvPolicy.from_config({"inherit": "none"}).build(ENV)) == {}


def test_origins_survive_for_the_sandbox() -> None:
    snapshot = EnvSnapshot({"PATH": "/bin", "FROM_HOME": "x"},
                           {"PATH": "environment", "FROM_HOME": "/home/.env"})
    env = EnvPolicy.from_config({"set": {"S": "v"}}).build(snapshot)
    assert env.origin("FROM_HOME") == "/home/.env" and env.origin("S") == "config"


def test_bad_policy_names_the_field_never_the_value() -> None:
    with pytest.raises(ConfigError, match=r"^row 'tools:shell' config.env.inherit: "):
        EnvPolicy.from_config({"inherit": "some"}, row_id="tools:shell")
    with pytest.raises(ConfigError) as info:
        EnvPolicy.from_config({"set": {"X": 12345}})
    assert str(info.value) == "row 'shell' config.env.set.X: expected a string"
