"""Which shell runs a ``bash`` call, with which flags, and what the model is told.

On Windows the default is PowerShell; a row's ``shell`` naming ``pwsh``, ``powershell`` or
``cmd`` (a bare name or a path in either slash) gets that shell's own flags, anywhere.
The choice is a pure function of the configured value and the platform, tested here for
each platform; where PowerShell is installed a real command runs through it.
"""

from __future__ import annotations

import shutil
import sys

import pytest
from conftest import make_plugin, run, tools_of

from dsh.runtime.tools.base import ToolContext
from dsh.runtime.tools.shell import ShellTools, shell_argv, shell_family


@pytest.mark.parametrize(("configured", "platform", "family"), [
    ("", "linux", "posix"),
    ("", "darwin", "posix"),
    ("", "win32", "powershell"),
    ("/bin/zsh", "linux", "posix"),
    ("cmd", "win32", "cmd"),
    ("C:\\Windows\\System32\\cmd.exe", "win32", "cmd"),
    ("pwsh", "linux", "powershell"),
    ("C:/Program Files/PowerShell/7/pwsh.exe", "win32", "powershell"),
    ("powershell.exe", "win32", "powershell"),
    ("bash", "win32", "posix"),
])
def test_the_family_follows_the_configured_shell_and_the_platform(
        configured: str, platform: str, family: str) -> None:
    assert shell_family(configured, platform) == family


def test_each_family_gets_its_own_flags() -> None:
    assert shell_argv("/bin/zsh", "ls", "darwin") == ["/bin/zsh", "-c", "ls"]
    assert shell_argv("cmd", "dir", "win32") == ["cmd", "/d", "/s", "/c", "dir"]
    assert shell_argv("pwsh", "Get-Date", "linux") == [
        "pwsh", "-NoProfile", "-NonInteractive", "-Command", "Get-Date"]
    default = shell_argv("", "Get-Date", "win32")
    assert default[1:] == ["-NoProfile", "-NonInteractive", "-Command", "Get-Date"]
    assert default[0].lower().removesuffix(".exe").endswith(("pwsh", "powershell"))


@pytest.mark.parametrize(("configured", "opening", "command_help"), [
    ("", "Run a bash command", "The command to run with bash -c."),
    ("pwsh", "Run a PowerShell command", "The command to run with PowerShell -Command."),
    ("cmd", "Run a cmd.exe command", "The command to run with cmd /c."),
])
def test_the_model_is_told_which_shell_it_writes_for(
        configured: str, opening: str, command_help: str) -> None:
    if not configured and sys.platform == "win32":
        pytest.skip("the default shell is PowerShell on Windows")
    tool = tools_of(make_plugin(ShellTools, shell=configured))["bash"]
    assert tool.name == "bash"  # the wire name stays, whatever runs the command
    assert tool.description.startswith(opening)
    assert tool.parameters["properties"]["command"]["description"] == command_help
    assert tool.parameters["required"] == ["command"]


@pytest.mark.skipif(shutil.which("pwsh") is None, reason="PowerShell (pwsh) is not installed")
def test_a_real_powershell_command_has_the_same_result_shape(ctx: ToolContext) -> None:
    tool = tools_of(make_plugin(ShellTools, shell="pwsh"))["bash"]
    result = run(tool, ctx, command="Write-Output hi; exit 3")
    assert result.text == "hi\n[Command finished with exit code 3]"
