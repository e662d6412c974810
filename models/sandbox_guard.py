"""Run as a script inside the sandbox: install an audit hook, then run the untrusted program.

    python -I [-S] sandbox_guard.py ROOT PROGRAM.py [MODULE ...]

MODULEs (trusted installed packages such as a solver) are imported before the hook goes in, so
their own use of ctypes at import time is allowed; calls through ctypes afterwards are not.

The hook (PEP 578; it cannot be removed once added) ends the process with exit code
:data:`VIOLATION` and one ``SANDBOX-VIOLATION: ...`` line on stderr when the program tries
to create a process, open a socket, load native code through ctypes, kill another process,
or write, create, delete or rename anything outside ROOT. Ending at once, with
``os._exit``, is deliberate: an exception could be caught by the program and ignored. A
``MemoryError`` that reaches the top ends with :data:`OUT_OF_MEMORY`. This file imports
nothing of edgekit, so it runs with site-packages off.
"""

import os
import sys

VIOLATION = 86
OUT_OF_MEMORY = 87

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_PROCESS_EVENTS = {"os.fork", "os.forkpty", "os.posix_spawn", "os.spawn", "os.exec", "os.system",
                   "subprocess.Popen", "os.kill", "os.killpg", "pty.spawn", "os.startfile"}
_NETWORK_EVENTS = {"socket.__new__", "socket.connect", "socket.bind", "socket.getaddrinfo",
                   "socket.gethostbyname", "socket.gethostbyaddr", "socket.sendto", "socket.socketpair"}
# Modules that start processes or reach native code without an audit event of their own.
_BLOCKED_IMPORTS = {"_posixsubprocess", "_ctypes", "ctypes", "_multiprocessing", "multiprocessing"}
# event -> positions of its path arguments that get modified
_PATH_EVENTS = {"os.remove": (0,), "os.rmdir": (0,), "os.mkdir": (0,), "os.rename": (0, 1), "os.link": (0, 1),
                "os.symlink": (1,), "os.chmod": (0,), "os.chown": (0,), "os.truncate": (0,), "os.utime": (0,),
                "os.chflags": (0,), "os.lchflags": (0,), "os.setxattr": (0,), "os.removexattr": (0,),
                "shutil.rmtree": (0,), "shutil.move": (0, 1), "shutil.copyfile": (1,)}


def _stop(detail: str) -> None:
    os.write(2, f"\nSANDBOX-VIOLATION: {detail}\n".encode(errors="replace"))
    os._exit(VIOLATION)


def make_hook(root: str):
    root = os.path.realpath(root)

    def inside(path) -> bool:
        if isinstance(path, int):  # a file descriptor the program already holds
            return True
        try:
            full = os.path.realpath(os.fsdecode(path))
        except (TypeError, ValueError):
            return False
        return full == root or full.startswith(root + os.sep)

    def hook(event, args):
        if event == "open":
            path, mode, flags = args
            writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or bool(flags & _WRITE_FLAGS)
            if writes and not inside(path):
                _stop(f"write outside the sandbox directory: open({path!r}, {mode or flags!r})")
        elif event in _PATH_EVENTS:
            for i in _PATH_EVENTS[event]:
                if i < len(args) and args[i] is not None and not inside(args[i]):
                    _stop(f"change outside the sandbox directory: {event}({args[i]!r})")
        elif event in _PROCESS_EVENTS:
            _stop(f"process creation or signalling: {event}")
        elif event in _NETWORK_EVENTS:
            _stop(f"network access: {event}")
        elif event in ("ctypes.dlopen", "ctypes.dlsym", "ctypes.call_function", "ctypes.cdata"):
            _stop("native code through ctypes")
        elif event == "import" and args[0] in _BLOCKED_IMPORTS:
            _stop(f"import of {args[0]} (process creation or native code)")

    return hook


def main() -> None:
    root, program, preload = sys.argv[1], sys.argv[2], sys.argv[3:]
    for module in preload:
        __import__(module)
    with open(program, encoding="utf-8") as handle:
        code = compile(handle.read(), program, "exec")
    sys.argv = [program]
    sys.addaudithook(make_hook(root))
    try:
        exec(code, {"__name__": "__main__", "__file__": program})
    except MemoryError:
        os.write(2, b"\nSANDBOX-MEMORY: MemoryError\n")
        os._exit(OUT_OF_MEMORY)


if __name__ == "__main__":
    main()
