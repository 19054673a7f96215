"""``reloadRequired``'s judge: a layer file changed in content, appeared or vanished."""

from __future__ import annotations

import os
from pathlib import Path

from dsh.runtime.kernel.layerfiles import LayerFingerprint


def bump_mtime(path: Path) -> None:
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))


def test_untouched_and_touched_files_are_unchanged(tmp_path: Path) -> None:
    layer = tmp_path / "patch.yml"
    layer.write_text("- {id: a, disabled: true}\n")
    fingerprint = LayerFingerprint([layer])
    assert fingerprint.changed() == []
    bump_mtime(layer)  # same bytes: a touch is not an edit
    assert fingerprint.changed() == []


def test_same_size_edit_is_a_change(tmp_path: Path) -> None:
    layer = tmp_path / "patch.yml"
    layer.write_text("- {id: a, disabled: true}\n")
    fingerprint = LayerFingerprint([layer])
    layer.write_text("- {id: b, disabled: true}\n")
    bump_mtime(layer)
    assert fingerprint.changed() == [layer]


def test_appearing_and_vanishing_files_are_changes(tmp_path: Path) -> None:
    present, absent = tmp_path / "present.yml", tmp_path / "absent.yml"
    present.write_text("[]\n")
    fingerprint = LayerFingerprint([present, absent])
    present.unlink()
    absent.write_text("[]\n")
    assert fingerprint.changed() == [present, absent]
