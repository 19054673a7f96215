"""The sub-agent's environment: credentials and ``DSH_*`` withheld, ``pass_env`` given."""

from __future__ import annotations

from dsh.runtime.subagents.environment import child_environment, scrubbed


def test_credential_names_and_dsh_names_are_scrubbed() -> None:
    for name in ("SECRET_TOKEN", "DEEPSEEK_API_KEY", "GITHUB_TOKEN", "DB_PASSWORD",
                 "AWS_SECRET_ACCESS_KEY", "ssh_passphrase", "DSH_HOME", "DSH_RUNTIME_BIN",
                 "NPM_AUTH", "GOOGLE_APPLICATION_CREDENTIALS"):
        assert scrubbed(name), name
    for name in ("PATH", "HOME", "LANG", "PYTHONPATH", "TERM"):
        assert not scrubbed(name), name


def test_pass_env_adds_back_only_what_the_parent_has() -> None:
    parent = {"PATH": "/bin", "SECRET_TOKEN": "s", "DEEPSEEK_API_KEY": "k", "DSH_HOME": "/h"}
    env = child_environment(parent, ["DEEPSEEK_API_KEY", "MISSING_KEY"])
    assert env == {"PATH": "/bin", "DEEPSEEK_API_KEY": "k"}


def test_values_the_parent_read_from_env_files_stay_with_the_parent() -> None:
    from dsh.core.launch import EnvSnapshot

    parent = EnvSnapshot({"PATH": "/bin", "FROM_HOME": "h", "API_KEY": "k"},
                         {"PATH": "environment", "FROM_HOME": "/home/.env",
                          "API_KEY": "/home/.env"})
    assert child_environment(parent, ["API_KEY"]) == {"PATH": "/bin", "API_KEY": "k"}
