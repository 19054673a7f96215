"""Redaction of credentials carried inside URLs: the one function every message goes through.

A URL can hold a secret in two places, and both end up in error messages ("cannot reach
URL"), logs and stored events unless taken out:

* the userinfo: ``https://user:password@host/`` and ``https://TOKEN@host/`` become
  ``https://***@host/`` (the user name goes too: it is the token in the second form);
* query parameters whose name ends in a credential word (``key``, ``api_key``, ``token``,
  ``access_token``, ``secret``, ``password``, ``auth``, ``sig``/``signature``,
  ``credential``, ``session``, ``code``, in any case): ``?key=abc&page=2`` becomes
  ``?key=***&page=2`` (``?keyword=`` stays).

Applied to diagnostic text (errors, warnings, logs, ``error`` and ``turn/end`` events),
never to a tool's output or a file's content, which the model may have to reproduce
exactly. Standard library only, and cheap on text without ``://`` or ``=``.
"""

from __future__ import annotations

import re

MASK = "***"

_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)[^/?#\s\"'<>]*@")
_QUERY = re.compile(
    r"(?P<lead>[?&;][^=&#\s\"'<>]*?"
    r"(?:key|token|secret|passw(?:or)?d|pass|auth|authorization|sig|signature|credential"
    r"|session|code)=)[^&#\s\"'<>]+",
    re.IGNORECASE,
)


def redact(text: str) -> str:
    """``text`` with every credential inside a URL replaced by ``***``."""
    if "@" in text and "://" in text:
        text = _USERINFO.sub(lambda m: f"{m['scheme']}{MASK}@", text)
    if "=" in text:
        text = _QUERY.sub(lambda m: f"{m['lead']}{MASK}", text)
    return text
