"""A seccomp filter for bubblewrap sandboxes: what Docker's default profile refuses, refused here too.

bwrap takes a compiled BPF program on a file descriptor (`--seccomp FD`). libseccomp (libseccomp.so.2,
installed with apt on Debian and Ubuntu) resolves the syscall names for this machine's architecture
and compiles the program; it is called through ctypes, so no Python package is needed. Without the
library the sandbox starts without the filter and the log says so once.

Refused (EPERM): kernel modules, kexec, reboot, mount and friends, namespaces (unshare, setns, clone
with a CLONE_NEW* flag), keyrings, bpf, perf events, ptrace-like access to other processes' memory,
clock and swap changes, open_by_handle_at. clone3 and io_uring get ENOSYS, so runtimes fall back to
what is allowed (as under Docker).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import errno
import logging
import os
import tempfile

log = logging.getLogger("nanoclaw.runtime.seccomp")

DENIED = (
    "acct", "add_key", "bpf", "clock_adjtime", "clock_settime", "create_module", "delete_module",
    "finit_module", "fsconfig", "fsmount", "fsopen", "fspick", "get_kernel_syms", "init_module", "ioperm",
    "iopl", "kcmp", "kexec_file_load", "kexec_load", "keyctl", "lookup_dcookie", "mount", "mount_setattr",
    "move_mount", "name_to_handle_at", "nfsservctl", "open_by_handle_at", "open_tree", "perf_event_open",
    "pivot_root", "process_vm_readv", "process_vm_writev", "query_module", "quotactl", "quotactl_fd",
    "reboot", "request_key", "setns", "settimeofday", "stime", "swapoff", "swapon", "sysfs", "_sysctl",
    "umount", "umount2", "unshare", "uselib", "userfaultfd", "ustat", "vm86", "vm86old",
)
NOT_THERE = ("clone3", "io_uring_setup", "io_uring_enter", "io_uring_register")  # ENOSYS: callers fall back
CLONE_NAMESPACES = (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000,
                    0x00000080)  # NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET, NEWTIME

SCMP_ACT_ALLOW = 0x7FFF0000
SCMP_CMP_MASKED_EQ = 7


def scmp_act_errno(code: int) -> int:
    return 0x00050000 | (code & 0x0000FFFF)


class _ArgCmp(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int), ("datum_a", ctypes.c_uint64),
                ("datum_b", ctypes.c_uint64)]


def _library():
    name = ctypes.util.find_library("seccomp") or "libseccomp.so.2"
    try:
        lib = ctypes.CDLL(name, use_errno=True)
    except OSError:
        return None
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    lib.seccomp_syscall_resolve_name.restype = ctypes.c_int
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add_array.restype = ctypes.c_int
    lib.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint,
                                           ctypes.POINTER(_ArgCmp)]
    lib.seccomp_export_bpf.restype = ctypes.c_int
    lib.seccomp_export_bpf.argtypes = [ctypes.c_void_p, ctypes.c_int]
    return lib


_compiled: list[bytes | None] = []


def cached_filter() -> bytes | None:
    """compile_filter(), once per process (it does not change while we run)."""
    if not _compiled:
        try:
            _compiled.append(compile_filter())
        except OSError as exc:
            log.error("could not build the seccomp filter for bubblewrap sandboxes: %s", exc)
            _compiled.append(None)
        if _compiled[0] is None:
            log.warning("libseccomp is not installed: bubblewrap sandboxes run without a seccomp filter "
                        "(apt-get install libseccomp2)")
    return _compiled[0]


def filter_fd(program: bytes) -> int:
    """A file descriptor holding the program, for `bwrap --seccomp FD` (the caller closes it)."""
    fd = os.memfd_create("nanoclaw-seccomp", 0)
    os.write(fd, program)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def compile_filter() -> bytes | None:
    """The BPF program for this architecture, or None when libseccomp is not installed."""
    lib = _library()
    if lib is None:
        return None
    ctx = lib.seccomp_init(SCMP_ACT_ALLOW)
    if not ctx:
        return None
    try:
        def add(name: str, action: int, *cmps: _ArgCmp) -> None:
            nr = lib.seccomp_syscall_resolve_name(name.encode())
            if nr < 0:
                return  # not a syscall on this architecture (vm86 on arm64, ...)
            array = (_ArgCmp * len(cmps))(*cmps) if cmps else None
            rc = lib.seccomp_rule_add_array(ctx, action, nr, len(cmps), array)
            if rc < 0:
                raise OSError(-rc, f"seccomp rule for {name}: {os.strerror(-rc)}")
        for name in DENIED:
            add(name, scmp_act_errno(errno.EPERM))
        for name in NOT_THERE:
            add(name, scmp_act_errno(errno.ENOSYS))
        for flag in CLONE_NAMESPACES:  # clone's first argument holds the flags (x86-64 and arm64 alike)
            add("clone", scmp_act_errno(errno.EPERM), _ArgCmp(0, SCMP_CMP_MASKED_EQ, flag, flag))
        with tempfile.TemporaryFile() as out:
            rc = lib.seccomp_export_bpf(ctx, out.fileno())
            if rc < 0:
                raise OSError(-rc, f"seccomp export: {os.strerror(-rc)}")
            out.seek(0)
            return out.read()
    finally:
        lib.seccomp_release(ctx)
