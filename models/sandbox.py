"""Run untrusted Python (generated programs, generated optimisation models) in a sandboxed subprocess.

Layers, each stopping what the others might miss:

* an audit hook in the child (:mod:`.sandbox_guard`) that ends it on process creation, sockets,
  ctypes, or any write outside its temporary directory;
* resource limits set before ``exec``: address space (memory), CPU seconds, file size (which
  caps the output, written to files in the directory), open files, no core dumps, and for a
  non-root user the number of processes (``RLIMIT_NPROC`` counts every process of the user, so it
  is set to what the user runs now plus a small margin; root ignores it, which is why the audit
  hook refuses ``fork`` first);
* a new session, so the whole process group is killed when the wall-clock limit passes and after
  every run (stray children included);
* where the process may (root on Linux), a new, empty network namespace: no interface but a
  loopback that is down, even for code that slipped past the hook.

The child runs ``python -I`` (isolated: no environment variables, no user site) in a fresh
temporary directory, which is deleted afterwards, with a minimal environment.
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from . import sandbox_guard

CLONE_NEWNET = 0x40000000
STATUSES = ("ok", "error", "timeout", "memory", "output_limit", "violation")


@dataclass(frozen=True)
class Limits:
    seconds: float = 5.0  # wall clock; CPU time is capped one second above it
    memory_mb: int = 512  # address space
    output_bytes: int = 1_000_000  # each of stdout and stderr
    open_files: int = 64
    processes: int = 8  # margin above the user's current processes (non-root only)
    site_packages: bool = False  # True for programs that import installed packages (scipy, highspy, ortools)
    preload: tuple[str, ...] = ()  # trusted modules imported before the audit hook (needs site_packages)

    def __post_init__(self):
        for name in ("seconds", "memory_mb", "output_bytes", "open_files", "processes"):
            if not getattr(self, name) > 0:
                raise ValueError(f"Limits.{name} must be positive, got {getattr(self, name)!r}")
        if self.preload and not self.site_packages:
            raise ValueError("Limits.preload names installed modules, so it needs site_packages=True")


@dataclass(frozen=True)
class SandboxResult:
    status: str  # one of STATUSES
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    detail: str = ""  # what was stopped, in words

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def _user_process_count() -> int:
    uid = os.getuid()
    count = 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                count += entry.stat().st_uid == uid
            except OSError:
                pass
    return count


def isolation_layers() -> list[str]:
    """The layers this machine gives (recorded with every result)."""
    layers = ["audit-hook", "rlimits(as,cpu,fsize,nofile,core)", "process-group-kill", "temp-directory"]
    layers.append("network-namespace" if _can_unshare_network() else "no-network-namespace")
    layers.append("rlimit-nproc" if os.geteuid() != 0 else "no-rlimit-nproc(root)")
    return layers


def _can_unshare_network() -> bool:
    if os.geteuid() != 0 or not sys.platform.startswith("linux"):
        return False
    probe = subprocess.run([sys.executable, "-I", "-S", "-c",
                            "import ctypes,sys; sys.exit(ctypes.CDLL(None, use_errno=True).unshare(0x40000000) != 0)"],
                           capture_output=True, timeout=10, check=False)
    return probe.returncode == 0


def _limit_child(limits: Limits, nproc: int | None, unshare_net: bool):
    def apply():  # runs in the child between fork and exec
        os.setsid()
        memory = limits.memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        cpu = int(limits.seconds) + 1
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        resource.setrlimit(resource.RLIMIT_FSIZE, (limits.output_bytes, limits.output_bytes))
        resource.setrlimit(resource.RLIMIT_NOFILE, (limits.open_files, limits.open_files))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if nproc is not None:
            resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
        if unshare_net:
            ctypes.CDLL(None, use_errno=True).unshare(CLONE_NEWNET)

    return apply


_NETNS: bool | None = None


def run_python(source: str, limits: Limits = Limits(), stdin: str = "") -> SandboxResult:
    """Run ``source`` as a program in the sandbox and say how it ended.

    ``status``: ``ok`` (exit 0), ``error`` (an exception or a non-zero exit), ``timeout`` (killed
    at the wall-clock or CPU limit), ``memory`` (address-space limit reached), ``output_limit``
    (stdout or stderr reached ``limits.output_bytes``), ``violation`` (stopped by the audit hook;
    ``detail`` says what it tried).
    """
    global _NETNS
    if not isinstance(source, str):
        raise ValueError(f"source must be Python source text (str), got {type(source).__name__}")
    if _NETNS is None:
        _NETNS = _can_unshare_network()
    nproc = None if os.geteuid() == 0 else _user_process_count() + limits.processes
    with tempfile.TemporaryDirectory(prefix="edgekit-sandbox-") as root:
        program = Path(root, "program.py")
        program.write_text(source, encoding="utf-8")
        out_path, err_path = Path(root, ".stdout"), Path(root, ".stderr")
        env = {"PATH": "/usr/bin:/bin", "HOME": root, "TMPDIR": root, "LANG": "C.UTF-8"}
        argv = [sys.executable, "-I"] + ([] if limits.site_packages else ["-S"])
        argv += [sandbox_guard.__file__, root, str(program), *limits.preload]
        start = time.perf_counter()
        timed_out = False
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=out, stderr=err, cwd=root, env=env,
                                    preexec_fn=_limit_child(limits, nproc, _NETNS), close_fds=True)
            try:
                proc.communicate(stdin.encode(), timeout=limits.seconds)
            except subprocess.TimeoutExpired:
                timed_out = True
            finally:
                _kill_group(proc.pid)
                proc.wait()
        seconds = time.perf_counter() - start
        stdout = out_path.read_bytes()
        stderr = err_path.read_bytes()
    return _classify(proc.returncode, stdout, stderr, seconds, timed_out, limits)


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _classify(code: int, stdout: bytes, stderr: bytes, seconds: float, timed_out: bool,
              limits: Limits) -> SandboxResult:
    out, err = stdout.decode(errors="replace"), stderr.decode(errors="replace")

    def result(status, detail=""):
        return SandboxResult(status, code, out, err, seconds, detail)

    if code == sandbox_guard.VIOLATION and "SANDBOX-VIOLATION:" in err:
        return result("violation", err.rsplit("SANDBOX-VIOLATION:", 1)[1].strip())
    if timed_out or code in (-signal.SIGXCPU, -signal.SIGKILL):
        return result("timeout", f"killed after {seconds:.2f} s (limit {limits.seconds} s)")
    if code == sandbox_guard.OUT_OF_MEMORY or "MemoryError" in err[-2000:]:
        return result("memory", f"address space limit {limits.memory_mb} MB")
    if max(len(stdout), len(stderr)) >= limits.output_bytes:
        return result("output_limit", f"output reached {limits.output_bytes} bytes")
    if code != 0:
        lines = [line for line in err.strip().splitlines() if line.strip()]
        return result("error", lines[-1] if lines else f"exit code {code}")
    return result("ok")
