"""The page's vendored libraries: the files README.md describes, with their licences,
served by dsh web itself under a content security policy as strict as before.

The libraries (markdown-it, DOMPurify, highlight.js) are third-party code in the page;
what is shipped must be exactly what ``static/vendor/README.md`` says was taken from npm,
and loading it must not cost the page its policy: scripts and styles from this origin
only, no inline script or style, no eval, no remote load.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from webkit import OFFLINE_PATCH, REPO, WebProcess

STATIC = REPO / "src" / "dsh" / "runtime" / "web" / "static"
VENDOR = STATIC / "vendor"


def recorded_hashes() -> dict[str, str]:
    """``file: sha256`` from the README's checksum block."""
    text = (VENDOR / "README.md").read_text()
    return {name: digest for digest, name in re.findall(r"^([0-9a-f]{64})  (\S+)$", text,
                                                         flags=re.MULTILINE)}


def test_the_vendored_files_are_the_recorded_ones_with_their_licences() -> None:
    hashes = recorded_hashes()
    shipped = sorted(p.name for p in VENDOR.iterdir() if p.suffix in (".js", ".css"))
    assert sorted(hashes) == shipped == [
        "highlight-github.min.css", "highlight.min.js", "markdown-it.min.js", "purify.min.js"]
    for name, digest in hashes.items():
        assert hashlib.sha256((VENDOR / name).read_bytes()).hexdigest() == digest, name
    licences = sorted(p.name for p in (VENDOR / "licenses").iterdir())
    assert licences == ["dompurify-Apache-2.0.txt", "dompurify-MPL-2.0.txt", "entities.txt",
                        "highlight.js.txt", "linkify-it.txt", "markdown-it.txt", "mdurl.txt",
                        "punycode.js.txt", "uc.micro.txt"]


def test_the_page_loads_them_from_its_own_origin_under_the_same_policy() -> None:
    page_html = (STATIC / "index.html").read_text()
    sources = re.findall(r'(?:src|href)="([^"]+)"', page_html)
    assert all(s.startswith("/static/") or s == "data:," for s in sources), sources
    assert "style=" not in page_html and "<script>" not in page_html
    with WebProcess([OFFLINE_PATCH], cwd=Path.cwd()) as web, web.client(auth=False) as anon:
        policy = anon.get("/", params={"token": web.token}).headers["content-security-policy"]
        assert policy == ("default-src 'self'; img-src 'self' data:; object-src 'none'; "
                          "base-uri 'none'; frame-ancestors 'none'; form-action 'none'")
        for source in sources:
            if source.startswith("/static/"):
                served = anon.get(source)
                assert served.status_code == 200, source
                assert served.content == (STATIC / source.removeprefix("/static/")).read_bytes()
                kind = "text/css" if source.endswith(".css") else "text/javascript"
                assert served.headers["content-type"].startswith(kind)
        # The licences and notes are in the repository and the wheel, not on the wire.
        assert anon.get("/static/vendor/README.md", params={"token": web.token}).status_code == 404
