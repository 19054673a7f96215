"""Earning the tag: each platform's audit verdict taken as is, and a faithful retag.

The macOS and Windows audits run only on their runners; here their readings of the
tools' output and of PE headers are checked on the tools' documented output.
"""

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


DELOCATE_LISTDEPS = """\
dsh_runtime_bin/_internal/libpython3.12.dylib
dsh_runtime_bin/_internal/PIL/.dylibs/libjpeg.62.dylib
"""


def test_macos_listdeps_inside_the_wheel_is_fine(earn: ModuleType) -> None:
    assert earn.external_libraries(DELOCATE_LISTDEPS) == []


def test_macos_listdeps_names_libraries_outside_the_wheel(earn: ModuleType) -> None:
    text = DELOCATE_LISTDEPS + "/opt/homebrew/opt/libwebp/lib/libwebp.7.dylib\n"
    assert earn.external_libraries(text) == ["/opt/homebrew/opt/libwebp/lib/libwebp.7.dylib"]


DELVEWHEEL_NONE = """\
Analyzing dsh_runtime_bin-0.1.0-py3-none-win_amd64.whl

The following DLLs will be copied into the wheel.
    None

The following DLLs are assumed to be present in the end user's environment and will not \
be copied into the wheel.
    kernel32.dll
    python312.dll
"""


def test_windows_delvewheel_nothing_to_copy(earn: ModuleType) -> None:
    assert earn.dlls_to_copy(DELVEWHEEL_NONE) == []


def test_windows_delvewheel_names_dlls_to_copy(earn: ModuleType) -> None:
    text = DELVEWHEEL_NONE.replace(
        "    None\n", "    libssl-3-x64.dll (C:\\OpenSSL\\bin\\libssl-3-x64.dll)\n")
    assert earn.dlls_to_copy(text) == ["libssl-3-x64.dll (C:\\OpenSSL\\bin\\libssl-3-x64.dll)"]


def test_windows_delvewheel_output_without_the_list_is_refused(earn: ModuleType) -> None:
    with pytest.raises(earn.TagError, match="no list of DLLs"):
        earn.dlls_to_copy("something else\n")


def pe(machine: int) -> bytes:
    """The smallest header :func:`pe_machine` reads: MZ, e_lfanew at 0x3C, PE, Machine."""
    head = bytearray(0x80)
    head[:2] = b"MZ"
    head[0x3C:0x40] = (0x40).to_bytes(4, "little")
    head[0x40:0x44] = b"PE\0\0"
    head[0x44:0x46] = machine.to_bytes(2, "little")
    return bytes(head)


def test_pe_machine(earn: ModuleType) -> None:
    assert earn.pe_machine(pe(0x8664)) == 0x8664
    assert earn.pe_machine(pe(0xAA64)) == 0xAA64
    assert earn.pe_machine(b"\x7fELF" + bytes(100)) is None
    assert earn.pe_machine(b"MZ" + bytes(10)) is None


def test_pe_machines_of_every_binary_in_the_wheel(earn: ModuleType, tmp_path: Path) -> None:
    wheel = tmp_path / "dsh_runtime_bin-1.0-py3-none-win_amd64.whl"
    with zipfile.ZipFile(wheel, "w") as out:
        out.writestr("dsh_runtime_bin/dsh-runtime-win-x64.exe", pe(0x8664))
        out.writestr("dsh_runtime_bin/_internal/python312.dll", pe(0x8664))
        out.writestr("dsh_runtime_bin/_internal/_ssl.pyd", pe(0x014C))
        out.writestr("dsh_runtime_bin/_internal/base_library.txt", b"text")
    assert earn.pe_machines(wheel) == {
        "dsh_runtime_bin/dsh-runtime-win-x64.exe": 0x8664,
        "dsh_runtime_bin/_internal/python312.dll": 0x8664,
        "dsh_runtime_bin/_internal/_ssl.pyd": 0x014C}


def test_a_missing_audit_tool_is_named_with_its_install(earn: ModuleType, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    wheel = tmp_path / "dsh_runtime_bin-1.0-py3-none-macosx_11_0_arm64.whl"
    wheel.write_bytes(b"")
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(earn.TagError, match=r"delocate-listdeps is not installed"):
        earn.earn(wheel)
    windows = tmp_path / "dsh_runtime_bin-1.0-py3-none-win_amd64.whl"
    windows.write_bytes(b"")
    with pytest.raises(earn.TagError, match=r"delvewheel is not installed"):
        earn.earn(windows)
    with pytest.raises(earn.TagError, match="no way to earn"):
        earn.earn(tmp_path / "dsh_runtime_bin-1.0-py3-none-any.whl")
