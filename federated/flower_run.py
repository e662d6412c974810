"""The apps on Flower's own engines: an app directory, ``flwr run``, and a federation on loopback.

:func:`write_app` writes a Flower app directory: a ``pyproject.toml`` whose
``[tool.flwr.app.components]`` name an installed ServerApp and ClientApp and whose
``[tool.flwr.app.config]`` is the run config. ``flwr run`` packs that directory and submits
it to a SuperLink named in ``$FLWR_HOME/config.toml`` (Flower 1.42 talks HTTP to a
SuperLink on one ``--host``/``--port``). :class:`LocalFederation` starts a SuperLink on
127.0.0.1 with free ports, either with SuperNodes beside it (the deployment engine) or
in simulation mode (Flower's simulation engine, which needs Ray), and stops every process
it started when it exits; :class:`Federation` names a SuperLink that runs elsewhere.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import tomllib
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Self

from .tls import TLSFiles

APP_NAME = "edgekit-fl"
CONNECTION = "edgekit-local"
START_TIMEOUT_S = 60.0
# the line a streamed run's log ends with when its ServerApp failed (colour codes between the words)
APP_EXIT = re.compile(r"ERROR\b.*Exit Code: (\d+)")


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


def write_app(directory: str | Path, server_app: str, client_app: str, run_config: dict) -> Path:
    """A Flower app directory whose components are ``module:attribute`` references to installed apps."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    config = "\n".join(f"{key} = {_toml_value(value)}" for key, value in run_config.items())
    text = (f'[build-system]\nrequires = ["hatchling"]\nbuild-backend = "hatchling.build"\n\n'
            f'[project]\nname = "{APP_NAME}"\nversion = "1.0.0"\n'
            f'description = "edgekit federated training (apps installed with edgekit)"\n'
            f'license = "Apache-2.0"\ndependencies = []\n\n'
            f'[tool.flwr.app]\npublisher = "edgekit"\n\n'
            f'[tool.flwr.app.components]\nserverapp = "{server_app}"\nclientapp = "{client_app}"\n\n'
            f'[tool.flwr.app.config]\n{config}\n')
    tomllib.loads(text)  # a value that does not round-trip through TOML fails here, not inside flwr
    (directory / "pyproject.toml").write_text(text)
    return directory


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _binary(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise RuntimeError(f"{name} is not on PATH; it ships with flwr (pip install flwr==1.42.0)")
    return path


def _process_groups(roots: list[int]) -> set[int]:
    """The process groups of ``roots`` and of all their descendants, read from /proc (Linux; elsewhere
    the roots' own): the SuperLink starts its SuperExec, and so the ServerApp or the whole
    simulation, in a session of its own, which ending the SuperLink's group leaves running."""
    parent, group = {}, {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
        except OSError:  # the process ended meanwhile
            continue
        parent[int(stat.parent.name)], group[int(stat.parent.name)] = int(fields[1]), int(fields[2])
    found, todo = set(), list(roots)
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo += [child for child, of in parent.items() if of == pid]
    return set(roots) | {group[pid] for pid in found if pid in group}


def _signal_groups(groups: set[int], sig: int) -> None:
    for pgid in groups:
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:  # the whole group is gone
            pass


class Federation:
    """A SuperLink at ``address`` (``host:port``) to submit runs to, named in a private ``FLWR_HOME``.
    Use as a context manager; :meth:`flwr_run` submits an app."""

    def __init__(self, address: str, *, workdir: str | Path | None = None, root_certificates: str | Path | None = None):
        """``root_certificates``: the CA certificate (PEM) that ``flwr run`` verifies the SuperLink's
        TLS certificate against; None talks to it without TLS."""
        self.address = address
        self.root_certificates = Path(root_certificates).resolve() if root_certificates else None
        self._own_dir = workdir is None
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="edgekit-flwr-"))
        self.flwr_home = self.workdir / "flwr-home"

    def env(self) -> dict:
        return {**os.environ, "FLWR_HOME": str(self.flwr_home), "FLWR_DISABLE_UPDATE_CHECK": "1"}

    def __enter__(self) -> Self:
        self.flwr_home.mkdir(parents=True, exist_ok=True)
        security = (f'root-certificates = "{self.root_certificates}"' if self.root_certificates else "insecure = true")
        (self.flwr_home / "config.toml").write_text(
            f'[superlink]\ndefault = "{CONNECTION}"\n\n[superlink.{CONNECTION}]\n'
            f'address = "{self.address}"\n{security}\n')
        return self

    def __exit__(self, *exc) -> None:
        if self._own_dir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def flwr_run(self, app_dir: str | Path, *, timeout_s: float, federation_config: dict | None = None,
                 on_line: Callable[[str], None] | None = None) -> str:
        """Submit the app and stream its logs (each line to ``on_line``) until the run ends; the log
        text. RuntimeError when it fails or outlasts ``timeout_s``."""
        args = [_binary("flwr"), "run", str(app_dir), CONNECTION, "--stream"]
        for key, value in (federation_config or {}).items():
            args += ["--federation-config", f"{key}={_toml_value(value)}"]
        process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=self.env(),
                                   start_new_session=True)
        timer = threading.Timer(timeout_s, os.killpg, (process.pid, signal.SIGKILL))
        timer.start()
        lines = []
        try:
            for line in process.stdout:
                lines.append(line)
                if on_line is not None:
                    on_line(line)
            process.wait()
        finally:
            timer.cancel()
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        output = "".join(lines)
        if process.returncode == -signal.SIGKILL:
            raise RuntimeError(f"flwr run did not finish within {timeout_s:.0f} s:\n{output[-4000:]}")
        if process.returncode != 0:
            raise RuntimeError(f"flwr run failed (exit code {process.returncode}):\n{output[-4000:]}")
        failed = APP_EXIT.search(output)
        if failed is not None:  # flwr run --stream exits 0 when the ServerApp fails
            raise RuntimeError(f"the ServerApp failed (Flower exit code {failed.group(1)}):\n{output[-4000:]}")
        return output


class LocalFederation(Federation):
    """A SuperLink on 127.0.0.1 with free ports and, for the deployment engine, ``nodes`` SuperNodes
    (node ``i`` gets ``partition-id=i``); ``simulation=True`` starts the SuperLink's simulation
    runtime instead. With ``tls`` the SuperLink serves with its certificate and the SuperNodes and
    ``flwr run`` verify it against the CA. Every process it started is stopped when the context exits."""

    def __init__(self, nodes: int, *, simulation: bool = False, workdir: str | Path | None = None,
                 tls: TLSFiles | None = None):
        self.port = free_port()
        self.tls = tls.check() if tls is not None else None
        super().__init__(f"127.0.0.1:{self.port}", workdir=workdir, root_certificates=tls and tls.ca_cert)
        self.nodes, self.simulation = nodes, simulation
        self.processes: list[tuple[str, subprocess.Popen]] = []

    def env(self) -> dict:
        # Each SuperNode's SuperExec polls for work every second by default; on loopback a short
        # poll interval costs nothing and takes seconds off every exchange.
        return {**super().env(), "FLWR_SUPEREXEC_TASK_POLL_INTERVAL": "0.1"}

    def _start(self, name: str, args: list[str]) -> None:
        log = open(self.workdir / f"{name}.log", "wb")  # noqa: SIM115 (the process keeps its own handle)
        process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=self.env(),
                                   start_new_session=True)  # its own process group, stopped as one
        log.close()
        self.processes.append((name, process))

    def __enter__(self) -> Self:
        super().__enter__()
        try:
            link = [_binary("flower-superlink"), *self.server_security(), "--host", "127.0.0.1",
                    "--port", str(self.port), "--disable-runtime-dependency-installation"]
            self._start("superlink", link + (["--simulation"] if self.simulation else []))
            self._wait_healthy()
            if not self.simulation:
                for i in range(self.nodes):
                    self.start_supernode(f"supernode{i}", i)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
        super().__exit__(*exc)

    def server_security(self) -> list[str]:
        if self.tls is None:
            return ["--insecure"]
        return ["--ssl-ca-certfile", str(self.tls.ca_cert), "--ssl-certfile", str(self.tls.server_cert),
                "--ssl-keyfile", str(self.tls.server_key)]

    def start_supernode(self, name: str, partition: int, root_certificates: Path | None = None) -> None:
        """A SuperNode for ``partition``; it trusts ``root_certificates`` (default: the federation's CA)."""
        trust = root_certificates or (self.tls and self.tls.ca_cert)
        security = ["--root-certificates", str(trust)] if trust else ["--insecure"]
        self._start(name, [_binary("flower-supernode"), *security, "--superlink", self.address,
                           "--port", str(free_port()), "--node-config",
                           f"partition-id={partition} num-partitions={self.nodes}"])

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.processes[0][1].poll() is not None:
                raise RuntimeError(f"flower-superlink exited with code {self.processes[0][1].returncode}:\n"
                                   + self.log_tail("superlink"))
            try:
                scheme, context = ("https", ssl.create_default_context(cafile=str(self.tls.ca_cert))) if self.tls \
                    else ("http", None)
                with urllib.request.urlopen(f"{scheme}://{self.address}/health", timeout=1, context=context):
                    return
            except (urllib.error.URLError, OSError):
                time.sleep(0.2)
        raise RuntimeError(f"flower-superlink did not answer within {START_TIMEOUT_S:.0f} s:\n"
                           + self.log_tail("superlink"))

    def log_tail(self, name: str, lines: int = 30) -> str:
        path = self.workdir / f"{name}.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM the process groups of every started process and of their descendants, wait up
        to ``grace_s`` for the started ones, then SIGKILL whatever is left in those groups (a
        ServerApp outlives the SIGTERM that ends its SuperLink). ``grace_s=0``: SIGKILL at once,
        as a crash would end the federation."""
        groups = _process_groups([process.pid for _, process in self.processes if process.poll() is None])
        if grace_s > 0:
            _signal_groups(groups, signal.SIGTERM)
            deadline = time.monotonic() + grace_s
            for _, process in self.processes:
                try:
                    process.wait(timeout=max(deadline - time.monotonic(), 0.01))
                except subprocess.TimeoutExpired:
                    pass
        _signal_groups(groups, signal.SIGKILL)
        for _, process in self.processes:
            process.wait(timeout=10)
        self.processes = []

    def flwr_run(self, app_dir: str | Path, *, timeout_s: float, federation_config: dict | None = None,
                 on_line: Callable[[str], None] | None = None) -> str:
        try:
            return super().flwr_run(app_dir, timeout_s=timeout_s, federation_config=federation_config, on_line=on_line)
        except RuntimeError as err:
            raise RuntimeError(f"{err}\nSuperLink log:\n{self.log_tail('superlink')}") from err
