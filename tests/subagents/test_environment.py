"""The sub-agent's environment: credentials (by name and by value) and ``DSH_*``
withheld, ``pass_env`` given."""

from __future__ import annotations

from dsh.runtime.subagents.environment import child_environment


def test_credential_names_values_and_dsh_names_are_withheld() -> None:
    parent = {name: "plain" for name in (
        "SECRET_TOKEN", "DEEPSEEK_API_KEY", "GITHUB_TOKEN", "DB_PASSWORD",
        "AWS_SECRET_ACCESS_KEY", "ssh_passphrase", "DSH_HOME", "DSH_RUNTIME_BIN", "NPM_AUTH",
        "GOOGLE_APPLICATION_CREDENTIALS", "SMTP_PASS", "MYSQL_PWD", "GH_PAT", "JWT",
        "SLACK_WEBHOOK_URL", "OTEL_EXPORTER_OTLP_HEADERS", "PATH", "HOME", "LANG",
        "PYTHONPATH", "TERM", "DBUS_SESSION_BUS_ADDRESS", "XDG_SESSION_TYPE")}
    parent["DATABASE_URL"] = "postgres://app:pw@db/app"
    parent["UPLINK"] = "ghp_" + "a1" * 18
    assert sorted(child_environment(parent, [])) == [
        "DBUS_SESSION_BUS_ADDRESS", "HOME", "LANG", "PATH", "PYTHONPATH", "TERM",
        "XDG_SESSION_TYPE"]


def test_pass_env_adds_back_only_what_the_parent_has() -> None:
    parent = {"PATH": "/bin", "SECRET_TOKEN": "s", "DEEPSEEK_API_KEY": "k", "DSH_HOME": "/h",
              "UPLINK": "ghp_" + "a1" * 18}
    env = child_environment(parent, ["DEEPSEEK_API_KEY", "MISSING_KEY", "UPLINK"])
    assert env == {"PATH": "/bin", "DEEPSEEK_API_KEY": "k", "UPLINK": parent["UPLINK"]}


def test_values_the_parent_read_from_env_files_stay_with_the_parent() -> None:
    from dsh.core.launch import EnvSnapshot

    parent = EnvSnapshot({"PATH": "/bin", "FROM_HOME": "h", "API_KEY": "k"},
                         {"PATH": "environment", "FROM_HOME": "/home/.env",
                          "API_KEY": "/home/.env"})
    assert child_environment(parent, ["API_KEY"]) == {"PATH": "/bin", "API_KEY": "k"}
