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

A value a patch reads with ``!env NAME`` is potentially a secret as a whole (a key put
in the wrong variable, a token), wherever the config uses it: the tag resolves to an
:class:`EnvValue`, which a diagnostic names by its variable (:func:`shown`,
:func:`withheld`) instead of quoting, as the environment snapshot's diagnostics name a
value's origin, never the value.
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


class EnvValue(str):
    """A string a ``!env NAME`` tag read from the launch's environment (``name``: NAME).

    It is the value itself everywhere a value is used; only a diagnostic treats it
    differently, naming the variable instead (:func:`shown`). ``repr`` never shows it.
    """

    name: str

    def __new__(cls, value: str, name: str) -> EnvValue:
        self = super().__new__(cls, value)
        self.name = name
        return self

    def __repr__(self) -> str:
        return f"EnvValue(!env {self.name})"

    def __reduce__(self) -> tuple[type[EnvValue], tuple[str, str]]:
        return (EnvValue, (str(self), self.name))


def shown(value: str) -> str:
    """``value`` as a diagnostic quotes it: ``'value'``, or ``the value of !env NAME``
    when it came from the environment (an :class:`EnvValue`)."""
    if isinstance(value, EnvValue):
        return f"the value of !env {value.name}"
    return f"'{value}'"


def withheld(text: str, *values: object) -> str:
    """``text`` (a message that may quote them, e.g. another process's error) with each
    non-empty :class:`EnvValue` among ``values`` replaced by ``<!env NAME>``."""
    for value in values:
        if isinstance(value, EnvValue) and value:
            text = text.replace(str(value), f"<!env {value.name}>")
    return text
