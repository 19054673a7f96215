"""Earning the Linux tag: auditwheel's verdict taken as is, and a faithful retag."""

from __future__ import annotations

import base64
import hashlib
import json
import zipfile
import zlib
from pathlib import Path
from types import ModuleType

import pytest

from .conftest import WHEELS


def test_manylinux_verdict_is_the_tag(earn: ModuleType) -> None:
    report = {"wheel": "w.whl", "pure": False, "overall_tag": "manylinux_2_28_x86_64"}
    assert earn.earned_tag(report) == "manylinux_2_28_x86_64"


def test_linux_verdict_fails_naming_external_libraries(earn: ModuleType) -> None:
    report = {"wheel": "w.whl", "pure": False, "overall_tag": "linux_x86_64",
              "external_libs": {"libssl.so.3": "/usr/lib/libssl.so.3"}}
    with pytest.raises(earn.TagError, match=r"not portable \(external libraries: libssl"):
        earn.earned_tag(report)


def test_pure_wheel_fails(earn: ModuleType) -> None:
    with pytest.raises(earn.TagError, match="no native code"):
        earn.earned_tag({"wheel": "w.whl", "pure": True, "overall_tag": ""})


def test_expected_tag_from_platforms(earn: ModuleType) -> None:
    platforms = json.loads((WHEELS / "platforms.json").read_text())
    assert earn.expected_tag("linux_aarch64", platforms) == (
        platforms["platforms"]["linux-arm64"]["wheel_tag"])
    with pytest.raises(earn.TagError, match="linux_riscv64"):
        earn.expected_tag("linux_riscv64", platforms)


def record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(
        b"=").decode()


def test_retag_rewrites_only_the_wheels_own_metadata(earn: ModuleType,
                                                     tmp_path: Path) -> None:
    wheel = tmp_path / "dsh_runtime_bin-1.0-py3-none-linux_x86_64.whl"
    meta = b"Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: py3-none-linux_x86_64\n"
    nested = b"Tag: py3-none-any\n"
    with zipfile.ZipFile(wheel, "w") as out:
        out.writestr("dsh_runtime_bin/_internal/click-8.dist-info/WHEEL", nested)
        out.writestr("dsh_runtime_bin-1.0.dist-info/WHEEL", meta)
        out.writestr("dsh_runtime_bin-1.0.dist-info/RECORD",
                     f"dsh_runtime_bin-1.0.dist-info/WHEEL,{record_hash(meta)},{len(meta)}\n"
                     "dsh_runtime_bin-1.0.dist-info/RECORD,,\n")
    target = earn.retag(wheel, "manylinux_2_28_x86_64", tmp_path / "out")
    assert target.name == "dsh_runtime_bin-1.0-py3-none-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(target) as result:
        new_meta = result.read("dsh_runtime_bin-1.0.dist-info/WHEEL")
        assert new_meta.decode().endswith("Tag: py3-none-manylinux_2_28_x86_64\n")
        assert result.read("dsh_runtime_bin/_internal/click-8.dist-info/WHEEL") == nested
        record = result.read("dsh_runtime_bin-1.0.dist-info/RECORD").decode()
        assert (f"dsh_runtime_bin-1.0.dist-info/WHEEL,{record_hash(new_meta)},"
                f"{len(new_meta)}") in record.splitlines()


def test_retag_deflates_members_at_level_9(earn: ModuleType, tmp_path: Path) -> None:
    wheel = tmp_path / "dsh_runtime_bin-1.0-py3-none-linux_x86_64.whl"
    meta = b"Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: py3-none-linux_x86_64\n"
    data = (Path(earn.__file__).read_bytes() + bytes(range(256))) * 4
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as out:
        out.writestr("dsh_runtime_bin/data", data)
        out.writestr("dsh_runtime_bin-1.0.dist-info/WHEEL", meta)
        out.writestr("dsh_runtime_bin-1.0.dist-info/RECORD", "")
    target = earn.retag(wheel, "manylinux_2_28_x86_64", tmp_path / "out")
    deflate = zlib.compressobj(9, zlib.DEFLATED, -15)
    level9 = len(deflate.compress(data) + deflate.flush())
    with zipfile.ZipFile(target) as result:
        assert result.read("dsh_runtime_bin/data") == data
        assert result.getinfo("dsh_runtime_bin/data").compress_size == level9
