"""The initial retransmission timeout of SYNs and SYN-ACKs, set per run (the overload paper's
setup F: 0.5 s instead of its kernel's 3 s).

Linux retransmits an unanswered SYN or SYN-ACK first after a fixed `TCP_TIMEOUT_INIT` (1 s);
no sysctl or route attribute changes it. A cgroup's BPF `sock_ops` program can: the kernel
asks it (`BPF_SOCK_OPS_TIMEOUT_INIT`) for the SYN timeout of every socket created in the
cgroup, and for a SYN-ACK that of the listener. `InitialRto` loads such a program (six
instructions: answer T jiffies to that question, nothing to any other), attaches it to a
fresh cgroup v2 directory, and `prefix()` is the command prefix that starts a process in
that cgroup (before `ip netns exec`, which hides the cgroup file system inside the
namespace). Leaving it detaches the program and removes the directory; the processes must
have exited by then (any left are moved to the parent first).

Needs root, a kernel with CONFIG_CGROUP_BPF and a cgroup2 mount (mounted at
`/run/shortfirst-cgroup2` when there is none). The lab records T, the kernel's HZ and the
cgroup in run.json (`initial_rto`).
"""

from __future__ import annotations

import ctypes
import gzip
import itertools
import os
import platform
import struct
import subprocess
from pathlib import Path
from typing import Any

from ..kit import LabError

#: bpf(2) on x86_64 and aarch64.
_SYS_BPF = {"x86_64": 321, "aarch64": 280}
_BPF_PROG_LOAD, _BPF_PROG_ATTACH, _BPF_PROG_DETACH = 5, 8, 9
_BPF_PROG_TYPE_SOCK_OPS = 13
_BPF_CGROUP_SOCK_OPS = 3
_BPF_SOCK_OPS_TIMEOUT_INIT = 1
_ATTR_BYTES = 128
#: The kernel's limits on what T may be here: at least 10 ms, at most 60 s.
MIN_MS, MAX_MS = 10, 60_000
_CGROUP2_FALLBACK = Path("/run/shortfirst-cgroup2")
_seq = itertools.count()


class SynRtoError(LabError, RuntimeError):
    """The program could not be built, loaded or attached; the message says which step."""


def _insn(code: int, dst: int, src: int, off: int, imm: int) -> bytes:
    return struct.pack("<BBhi", code, (src << 4) | dst, off, imm)


def program(timeout_jiffies: int) -> bytes:
    """The sock_ops program: `reply = T` when `op == BPF_SOCK_OPS_TIMEOUT_INIT`; returns 1.
    `struct bpf_sock_ops` has `op` at offset 0 and `reply` at 4."""
    if not 0 < timeout_jiffies < 2**31:
        raise SynRtoError(f"timeout of {timeout_jiffies} jiffies: out of range")
    return b"".join(
        [
            _insn(0x61, 2, 1, 0, 0),  # r2 = *(u32 *)(r1 + 0)             op
            _insn(0x55, 2, 0, 2, _BPF_SOCK_OPS_TIMEOUT_INIT),  # if r2 != 1 goto +2
            _insn(0xB7, 3, 0, 0, timeout_jiffies),  # r3 = T
            _insn(0x63, 1, 3, 4, 0),  # *(u32 *)(r1 + 4) = r3             reply
            _insn(0xB7, 0, 0, 0, 1),  # r0 = 1
            _insn(0x95, 0, 0, 0, 0),  # exit
        ]
    )


def kernel_hz(config_text: str | None = None) -> int:
    """CONFIG_HZ of the running kernel (from /proc/config.gz or /boot/config-<release>)."""
    if config_text is None:
        config_text = _kernel_config()
    for line in config_text.splitlines():
        if line.startswith("CONFIG_HZ="):
            return int(line.split("=", 1)[1])
    raise SynRtoError("CONFIG_HZ not found in the kernel configuration")


def _kernel_config() -> str:
    proc = Path("/proc/config.gz")
    if proc.exists():
        return gzip.decompress(proc.read_bytes()).decode()
    boot = Path(f"/boot/config-{platform.release()}")
    if boot.exists():
        return boot.read_text()
    raise SynRtoError("no kernel configuration (/proc/config.gz, /boot/config-*) to read CONFIG_HZ from")


def jiffies(timeout_ms: int, hz: int) -> int:
    """`timeout_ms` in jiffies, rounded to the nearest (at least 1)."""
    return max(1, round(timeout_ms * hz / 1000))


def cgroup2_root(mounts_text: str | None = None) -> Path | None:
    """Where cgroup v2 is mounted, if anywhere."""
    if mounts_text is None:
        mounts_text = Path("/proc/mounts").read_text()
    for line in mounts_text.splitlines():
        fields = line.split()
        if len(fields) >= 3 and fields[2] == "cgroup2":
            return Path(fields[1])
    return None


def _bpf(cmd: int, attr: bytes) -> int:
    nr = _SYS_BPF.get(platform.machine())
    if nr is None:
        raise SynRtoError(f"bpf(2) number unknown on {platform.machine()}")
    libc = ctypes.CDLL(None, use_errno=True)
    buf = ctypes.create_string_buffer(attr.ljust(_ATTR_BYTES, b"\0"), _ATTR_BYTES)
    r = libc.syscall(nr, cmd, buf, _ATTR_BYTES)
    if r < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return int(r)


class InitialRto:
    """A cgroup whose sockets' SYNs and SYN-ACKs are first retransmitted after `timeout_ms`."""

    def __init__(self, timeout_ms: int, hz: int | None = None) -> None:
        if not MIN_MS <= timeout_ms <= MAX_MS:
            raise SynRtoError(f"initial RTO of {timeout_ms} ms: expected {MIN_MS}-{MAX_MS} ms")
        self.timeout_ms = timeout_ms
        self.hz = hz if hz is not None else kernel_hz()
        self.timeout_jiffies = jiffies(timeout_ms, self.hz)
        self.cgroup: Path | None = None
        self._prog_fd = -1
        self._cg_fd = -1

    def __enter__(self) -> InitialRto:
        root = cgroup2_root() or self._mount_cgroup2()
        self.cgroup = root / f"shortfirst-rto-{os.getpid()}-{next(_seq)}"
        self.cgroup.mkdir()
        try:
            self._prog_fd = self._load()
            self._cg_fd = os.open(self.cgroup, os.O_RDONLY | os.O_DIRECTORY)
            try:
                _bpf(
                    _BPF_PROG_ATTACH,
                    struct.pack("<IIII", self._cg_fd, self._prog_fd, _BPF_CGROUP_SOCK_OPS, 0),
                )
            except OSError as e:
                raise SynRtoError(f"attaching the sock_ops program to {self.cgroup}: {e}") from e
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _load(self) -> int:
        code = program(self.timeout_jiffies)
        insns = ctypes.create_string_buffer(code, len(code))
        lic = ctypes.create_string_buffer(b"GPL")
        log = ctypes.create_string_buffer(1 << 16)
        attr = struct.pack(
            "<IIQQIIQ",
            _BPF_PROG_TYPE_SOCK_OPS,
            len(code) // 8,
            ctypes.addressof(insns),
            ctypes.addressof(lic),
            1,
            len(log),
            ctypes.addressof(log),
        )
        try:
            return _bpf(_BPF_PROG_LOAD, attr)
        except OSError as e:
            raise SynRtoError(
                f"loading the sock_ops program: {e}; verifier: {log.value.decode()[:500]}"
            ) from e

    @staticmethod
    def _mount_cgroup2() -> Path:
        _CGROUP2_FALLBACK.mkdir(parents=True, exist_ok=True)
        r = subprocess.run(
            ["mount", "-t", "cgroup2", "none", str(_CGROUP2_FALLBACK)], capture_output=True, text=True
        )
        if r.returncode != 0:
            raise SynRtoError(f"no cgroup2 mount, and mounting one failed: {r.stderr.strip()}")
        return _CGROUP2_FALLBACK

    def prefix(self) -> list[str]:
        """A command prefix that moves the process into the cgroup and then execs the rest."""
        assert self.cgroup is not None, "enter InitialRto first"
        script = 'echo $$ > "$1" && shift && exec "$@"'
        return ["sh", "-c", script, "sh", str(self.cgroup / "cgroup.procs")]

    def record(self) -> dict[str, Any]:
        return {
            "ms": self.timeout_ms,
            "jiffies": self.timeout_jiffies,
            "hz": self.hz,
            "cgroup": str(self.cgroup),
        }

    def __exit__(self, *exc: object) -> None:
        if self._cg_fd >= 0 and self._prog_fd >= 0:
            try:
                _bpf(
                    _BPF_PROG_DETACH,
                    struct.pack("<IIII", self._cg_fd, self._prog_fd, _BPF_CGROUP_SOCK_OPS, 0),
                )
            except OSError:
                pass  # removing the cgroup detaches it too
        for fd in (self._cg_fd, self._prog_fd):
            if fd >= 0:
                os.close(fd)
        self._cg_fd = self._prog_fd = -1
        if self.cgroup is not None and self.cgroup.exists():
            procs = self.cgroup / "cgroup.procs"
            for pid in procs.read_text().split():
                try:
                    (self.cgroup.parent / "cgroup.procs").write_text(pid)
                except OSError:
                    pass  # exited meanwhile
            self.cgroup.rmdir()
