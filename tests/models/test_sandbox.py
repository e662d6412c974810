import os
import socket
import subprocess
import sys
import tempfile

import pytest

from edgekit.models.sandbox import Limits, _can_unshare_network, _limit_child, run_python

TIGHT = Limits(seconds=1.5, memory_mb=200, output_bytes=50_000)


def test_a_plain_program_runs_and_its_output_comes_back():
    result = run_python("import math\nprint(math.factorial(5))", TIGHT)
    assert (result.status, result.stdout) == ("ok", "120\n")


def test_an_infinite_loop_is_killed_at_the_wall_clock_limit():
    result = run_python("while True:\n    pass", Limits(seconds=1.0))
    assert result.status == "timeout"
    assert 0.9 < result.seconds < 3.0


def test_a_memory_bomb_stops_at_the_address_space_limit():
    result = run_python("blocks = []\nwhile True:\n    blocks.append(bytearray(10**7))", TIGHT)
    assert result.status == "memory", result


def test_a_fork_bomb_is_stopped_before_its_first_child():
    result = run_python("import os\nwhile True:\n    os.fork()", TIGHT)
    assert result.status == "violation" and "os.fork" in result.detail


def test_catching_the_violation_does_not_help():
    result = run_python("import os\ntry:\n    os.fork()\nexcept BaseException:\n    print('escaped')", TIGHT)
    assert result.status == "violation" and "escaped" not in result.stdout


@pytest.mark.parametrize("source", ["import subprocess", "import ctypes", "import multiprocessing",
                                    "import os\nos.system('true')"])
def test_other_ways_to_start_processes_or_reach_native_code_are_stopped(source):
    assert run_python(source, TIGHT).status == "violation"


def test_a_write_outside_its_directory_is_stopped_and_nothing_is_written():
    target = os.path.join(tempfile.gettempdir(), f"edgekit-sandbox-escape-{os.getpid()}.txt")
    result = run_python(f"open({target!r}, 'w').write('x')", TIGHT)
    assert result.status == "violation" and target in result.detail
    assert not os.path.exists(target)
    assert run_python(f"import os\nos.remove({target!r})", TIGHT).status == "violation"


def test_writes_inside_its_directory_are_allowed():
    result = run_python("open('a.txt', 'w').write('hi')\nprint(open('a.txt').read())", TIGHT)
    assert (result.status, result.stdout) == ("ok", "hi\n")


def test_opening_a_socket_is_stopped():
    result = run_python("import socket\nsocket.create_connection(('127.0.0.1', 9))", TIGHT)
    assert result.status == "violation" and "socket" in result.detail


def test_flooding_the_output_stops_at_the_output_limit():
    result = run_python("while True:\n    print('x' * 1000)", TIGHT)
    assert result.status == "output_limit"
    assert len(result.stdout) <= TIGHT.output_bytes


def test_an_exception_is_an_error_with_its_last_line():
    result = run_python("1 / 0", TIGHT)
    assert result.status == "error" and "ZeroDivisionError" in result.detail


@pytest.mark.skipif(not _can_unshare_network(), reason="no network namespace here (needs root on Linux)")
def test_the_network_namespace_blocks_sockets_even_without_the_audit_hook():
    # A listening socket that the parent can reach; the child, under the sandbox's limits alone
    # (no audit hook), must not reach it.
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    code = f"import socket\ntry:\n    socket.create_connection(('127.0.0.1', {port}), timeout=1)\n" \
           "    print('connected')\nexcept OSError:\n    print('blocked')"
    try:
        plain = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, timeout=10)
        limited = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, timeout=10,
                                 preexec_fn=_limit_child(TIGHT, None, True))
    finally:
        server.close()
    assert plain.stdout.strip() == "connected"
    assert limited.stdout.strip() == "blocked"


def test_bad_limits_and_bad_source_are_refused():
    with pytest.raises(ValueError, match="seconds"):
        Limits(seconds=0)
    with pytest.raises(ValueError, match="memory_mb"):
        Limits(memory_mb=-1)
    with pytest.raises(ValueError, match="source"):
        run_python(b"print(1)")


def test_preloaded_trusted_modules_may_use_ctypes_but_the_program_may_not():
    limits = Limits(seconds=10, memory_mb=1024, site_packages=True, preload=("numpy",))
    assert run_python("import numpy\nprint(numpy.arange(4).sum())", limits).stdout == "6\n"
    # numpy imports ctypes at import time: without the preload that is refused
    assert run_python("import numpy", Limits(seconds=10, memory_mb=1024, site_packages=True)).status == "violation"
    # ctypes is then in memory, but calling through it (libc's getpid via pythonapi) is stopped
    result = run_python("import numpy, ctypes\nprint(ctypes.pythonapi.getpid())", limits)
    assert result.status == "violation" and "ctypes" in result.detail
    with pytest.raises(ValueError, match="site_packages"):
        Limits(preload=("numpy",))


def test_the_child_gets_its_limits_including_a_process_cap():
    code = "import resource\nprint(*(resource.getrlimit(getattr(resource, n))[0] for n in " \
           "('RLIMIT_AS', 'RLIMIT_FSIZE', 'RLIMIT_NOFILE', 'RLIMIT_NPROC', 'RLIMIT_CORE')))"
    out = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, timeout=10,
                         preexec_fn=_limit_child(TIGHT, 50, False)).stdout.split()
    assert list(map(int, out)) == [TIGHT.memory_mb * 2 ** 20, TIGHT.output_bytes, TIGHT.open_files, 50, 0]
