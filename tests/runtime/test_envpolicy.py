"""``dsh.runtime.kernel.envpolicy``: the one secret list, declared secrets, and the row policy."""

from __future__ import annotations

import pytest

from dsh.core.errors import ConfigError
from dsh.core.launch import EnvSnapshot
from dsh.runtime.kernel.envpolicy import EnvPolicy, declared_secrets, is_secret, scrubbed
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


@pytest.mark.parametrize("name", ["PATH", "HOME", "LANG", "TERM", "PYTHONPATH", "CC"])
def test_ordinary_names(name: str) -> None:
    assert not is_secret(name)
    assert is_secret(name, declared={name})


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
