"""Windows job objects: one child's whole process tree, killed together and with dsh.

Windows has no process groups to signal and no parent-death signal. A **job object** is
both: every process a member starts joins the job too, ``TerminateJobObject`` ends them
all at once, and with ``JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE`` the kernel ends them when the
last handle to the job closes, which is when dsh exits, however it exits (the handle is
never inherited, so only dsh holds it).

The child is created suspended (``CREATE_SUSPENDED``), assigned to its own job, then
resumed: a child running before its assignment could start a grandchild outside the job.
``subprocess`` closes the main thread's handle, so the process is resumed as a whole with
``NtResumeProcess`` (what psutil's ``resume()`` uses). If the job cannot be made, the
child is still resumed and stopped without it (``taskkill /T /F``): never left suspended.

Only :mod:`dsh.core.process` uses this module, and only on Windows (``ctypes.windll``).
"""

from __future__ import annotations

import ctypes
from ctypes import wintypes
from typing import Any

CREATE_SUSPENDED = 0x00000004

_JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE = 0x00002000
_JOB_OBJECT_EXTENDED_LIMIT_INFORMATION = 9
_PROCESS_SET_QUOTA = 0x0100
_PROCESS_TERMINATE = 0x0001
_PROCESS_SUSPEND_RESUME = 0x0800


class _IoCounters(ctypes.Structure):
    _fields_ = [(name, ctypes.c_ulonglong) for name in (
        "ReadOperationCount", "WriteOperationCount", "OtherOperationCount",
        "ReadTransferCount", "WriteTransferCount", "OtherTransferCount")]


class _BasicLimits(ctypes.Structure):
    _fields_ = [
        ("PerProcessUserTimeLimit", ctypes.c_int64),
        ("PerJobUserTimeLimit", ctypes.c_int64),
        ("LimitFlags", wintypes.DWORD),
        ("MinimumWorkingSetSize", ctypes.c_size_t),
        ("MaximumWorkingSetSize", ctypes.c_size_t),
        ("ActiveProcessLimit", wintypes.DWORD),
        ("Affinity", ctypes.c_size_t),
        ("PriorityClass", wintypes.DWORD),
        ("SchedulingClass", wintypes.DWORD),
    ]


class _ExtendedLimits(ctypes.Structure):
    _fields_ = [
        ("BasicLimitInformation", _BasicLimits),
        ("IoInfo", _IoCounters),
        ("ProcessMemoryLimit", ctypes.c_size_t),
        ("JobMemoryLimit", ctypes.c_size_t),
        ("PeakProcessMemoryUsed", ctypes.c_size_t),
        ("PeakJobMemoryUsed", ctypes.c_size_t),
    ]


def _api() -> tuple[Any, Any]:
    kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)  # type: ignore[attr-defined]
    ntdll = ctypes.WinDLL("ntdll")  # type: ignore[attr-defined]
    kernel32.CreateJobObjectW.restype = wintypes.HANDLE
    kernel32.CreateJobObjectW.argtypes = [wintypes.LPVOID, wintypes.LPCWSTR]
    kernel32.SetInformationJobObject.argtypes = [wintypes.HANDLE, ctypes.c_int,
                                                 wintypes.LPVOID, wintypes.DWORD]
    kernel32.OpenProcess.restype = wintypes.HANDLE
    kernel32.OpenProcess.argtypes = [wintypes.DWORD, wintypes.BOOL, wintypes.DWORD]
    kernel32.AssignProcessToJobObject.argtypes = [wintypes.HANDLE, wintypes.HANDLE]
    kernel32.TerminateJobObject.argtypes = [wintypes.HANDLE, wintypes.UINT]
    kernel32.CloseHandle.argtypes = [wintypes.HANDLE]
    ntdll.NtResumeProcess.argtypes = [wintypes.HANDLE]
    ntdll.NtResumeProcess.restype = ctypes.c_long
    return kernel32, ntdll


class Job:
    """The job object holding one child's tree (``None`` handle once closed)."""

    def __init__(self, handle: int) -> None:
        self._handle: int | None = handle

    def terminate(self, code: int = 1) -> bool:
        """End every process in the job now; False when the job is closed or empty."""
        if self._handle is None:
            return False
        kernel32, _ = _api()
        return bool(kernel32.TerminateJobObject(self._handle, code))

    def close(self) -> None:
        """Let go of the job (what is still in it dies: kill-on-close)."""
        if self._handle is not None:
            handle, self._handle = self._handle, None
            kernel32, _ = _api()
            kernel32.CloseHandle(handle)


def adopt(pid: int) -> Job | None:
    """Put the suspended process ``pid`` into a new kill-on-close job, then resume it.

    Returns None when no job could be made (the process is resumed all the same).
    Raises OSError when the process cannot be resumed: the caller kills it then.
    """
    kernel32, ntdll = _api()
    process = kernel32.OpenProcess(
        _PROCESS_SET_QUOTA | _PROCESS_TERMINATE | _PROCESS_SUSPEND_RESUME, False, pid)
    if not process:
        raise ctypes.WinError(ctypes.get_last_error())  # type: ignore[attr-defined]
    job = None
    try:
        job = _new_job(kernel32)
        if job is not None and not kernel32.AssignProcessToJobObject(job._handle, process):
            job.close()
            job = None
        status = ntdll.NtResumeProcess(process)
        if status != 0:
            raise OSError(f"NtResumeProcess failed (status {status & 0xFFFFFFFF:#x})")
    except BaseException:
        if job is not None:
            job.close()
        raise
    finally:
        kernel32.CloseHandle(process)
    return job


def _new_job(kernel32: Any) -> Job | None:
    handle = kernel32.CreateJobObjectW(None, None)
    if not handle:
        return None
    limits = _ExtendedLimits()
    limits.BasicLimitInformation.LimitFlags = _JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE
    if not kernel32.SetInformationJobObject(handle, _JOB_OBJECT_EXTENDED_LIMIT_INFORMATION,
                                            ctypes.byref(limits), ctypes.sizeof(limits)):
        kernel32.CloseHandle(handle)
        return None
    return Job(handle)
