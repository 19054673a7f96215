"""The DSN is a secret: how it is shown, and how it is scrubbed from any message.

A DSN (``postgresql://user:password@host:port/db`` or ``host=... password=...``) carries
the database password, and libpq's own errors sometimes quote the DSN they could not
parse. So nothing in dsh formats a DSN or a driver's message directly: :func:`describe`
gives ``postgresql://host:port/db as user`` (never the password), and :func:`redact` removes
the DSN and its password, in every spelling found in it, from a text.

Parsing here is dsh's own (no driver needed), so a DSN the driver refuses is still
scrubbed; an unparseable DSN is described as such, never echoed.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, quote, unquote, urlsplit

_KEYWORD = re.compile(r"([A-Za-z_]+)\s*=\s*('(?:[^'\\]|\\.)*'|[^\s]*)")
MASK = "***"


def is_uri(dsn: str) -> bool:
    """Whether ``dsn`` is the URI form (``postgresql://`` or ``postgres://``)."""
    return dsn.startswith(("postgresql://", "postgres://"))


def fields(dsn: str) -> dict[str, str]:
    """The DSN's settings (``user``, ``password``, ``host``, ``port``, ``dbname``, ...);
    empty when it cannot be read."""
    if is_uri(dsn):
        try:
            parts = urlsplit(dsn)
            if parts.fragment or "@" in parts.path + parts.query:
                # A password with an unescaped '/', '?', '#' or '@' leaves part of it
                # outside the authority: such a DSN is not read (never shown) at all.
                return {}
            netloc = parts.netloc.rpartition("@")
            out: dict[str, str] = {}
            if netloc[1]:
                user, has_password, password = netloc[0].partition(":")
                if user:
                    out["user"] = unquote(user)
                if has_password:
                    out["password"] = unquote(password)
            hosts = netloc[2]
            if hosts:
                host_list, port_list = [], []
                for item in hosts.split(","):
                    if item.startswith("["):  # [IPv6]:port
                        host, _, rest = item[1:].partition("]")
                        port = rest.removeprefix(":")
                    else:
                        host, _, port = item.partition(":")
                    host_list.append(unquote(host))
                    port_list.append(port)
                out["host"] = ",".join(host_list)
                if any(port_list):
                    out["port"] = ",".join(port_list)
            if parts.path.strip("/"):
                out["dbname"] = unquote(parts.path.lstrip("/"))
            out.update(parse_qsl(parts.query))
            return out
        except ValueError:
            return {}
    out = {}
    for key, value in _KEYWORD.findall(dsn):
        if value.startswith("'") and value.endswith("'") and len(value) >= 2:
            value = re.sub(r"\\(.)", r"\1", value[1:-1])
        out[key] = value
    return out


def describe(dsn: str) -> str:
    """``postgresql://host:port/db as user``: where a DSN points, without its password."""
    found = fields(dsn)
    if not found:
        return "the DSN (which cannot be read)"
    user = found.get("user", "")
    host = found.get("host", "") or "localhost"
    if ":" in host and "," not in host:
        host = f"[{host}]"
    port = found.get("port", "")
    where = f"{host}:{port}" if port and "," not in host else host
    # The user goes after the URL, not in it: a user name inside a URL is masked by
    # dsh.core.redact wherever messages go (it may be a token elsewhere), which would hide it.
    return (f"postgresql://{where}/{found.get('dbname', '')}"
            + (f" as {user}" if user else ""))


def secrets(dsn: str) -> list[str]:
    """Every text that would give the password away: the DSN itself, the password, and
    its quoted and escaped spellings, longest first."""
    found: set[str] = {dsn.strip()} if dsn.strip() else set()
    password = fields(dsn).get("password")
    if is_uri(dsn):
        netloc = urlsplit(dsn).netloc.rpartition("@")[0]
        raw = netloc.partition(":")[2]
        if raw:
            found.add(raw)
        for key, value in parse_qsl(urlsplit(dsn).query, keep_blank_values=True):
            if key == "password" and value:
                found.add(value)
    else:
        for key, value in _KEYWORD.findall(dsn):
            if key == "password" and value:
                found.add(value)
    if password:
        found.update({password, quote(password, safe=""), password.replace("'", "\\'")})
    # A DSN libpq cannot parse is quoted by the token it stopped at, whose password this
    # module may not have found: every longer word of the DSN goes too.
    found.update(token for token in dsn.split() if len(token) >= 4)
    return sorted((s for s in found if s), key=len, reverse=True)


def redact(text: str, dsn: str) -> str:
    """``text`` with the DSN and its password replaced (the DSN by :func:`describe`)."""
    if not dsn:
        return text
    whole = dsn.strip()
    if whole and whole in text:
        text = text.replace(whole, describe(dsn))
    for secret in secrets(dsn):
        if secret != whole:
            text = text.replace(secret, MASK)
    return text


def has_password(dsn: str) -> bool:
    """Whether the DSN itself carries a password (libpq may still find one elsewhere:
    ``PGPASSWORD``, a password file)."""
    return bool(fields(dsn).get("password"))
