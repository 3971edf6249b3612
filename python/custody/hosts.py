"""Start ``custody serve`` processes on one machine, for demos and tests.

Production runs its hosts under its own supervisor, one per engine rank,
from configs like ``examples/prefill.yaml``; this module writes such a
config, starts the host, waits until its engine API answers and stops it
again, so that a test or ``make vllm-demo`` needs nothing but the custody
binary.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from typing import Any

from custody.client import Client
from custody.errors import CustodyError


def free_port() -> int:
    """A loopback TCP port free right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def socket_parent(state_dir: str, name: str) -> str:
    """Where a host makes its transports' sockets (Go's host.SocketParent):
    a host that was killed leaves it behind."""
    key = os.path.join(os.path.normpath(state_dir), "hosts", name)
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    return os.path.join(os.environ.get("TMPDIR") or "/tmp", f"custody-{os.getuid()}-{digest}")


@dataclass
class HostProcess:
    """One ``custody serve`` process.

    Attributes:
        name: the host's name.
        socket: its engine socket.
        address: its metadata endpoint (host:port), what peers connect to.
        log: the file its output goes to.

    Hosts trust each other when they share ``state_dir``.
    """

    name: str
    dir: str
    binary: str
    transport: str = "fake"
    params: dict[str, str] = field(default_factory=dict)
    cap_s: float = 120.0
    log_level: str = "warn"
    # Hosts that share a state directory trust each other (custody makes
    # one CA there for them); default: dir/state.
    state_dir: str = ""
    socket: str = ""
    address: str = ""
    log: str = ""
    proc: subprocess.Popen[bytes] | None = None
    # starts counts the processes started (restarts included).
    starts: int = 0

    def __post_init__(self) -> None:
        # Paths may come as pathlib.Path; the config is JSON.
        self.dir, self.binary = os.fspath(self.dir), os.fspath(self.binary)

    def config(self) -> dict[str, Any]:
        """The host's config (JSON is YAML)."""
        params = dict(self.params)
        if self.transport == "fake":
            params.setdefault("dir", self.dir)
        return {
            "name": self.name,
            "transport": {"name": self.transport, "params": params, "call_timeout": "5s"},
            "metadata": {"listen": self.address},
            "escalation": {"cap": f"{self.cap_s}s", "policy": "fence"},
            "engine": {"socket": self.socket},
            "log_level": self.log_level,
            "state_dir": self.state_dir or os.path.join(self.dir, "state"),
        }

    def start(self, timeout_s: float = 30.0) -> HostProcess:
        """Write the config, start the host and wait until its engine API
        answers; the same socket and metadata endpoint as before when it
        ran already."""
        assert self.proc is None or self.proc.poll() is not None, f"host {self.name} runs"
        os.makedirs(self.dir, exist_ok=True)
        self.socket = self.socket or os.path.join(self.dir, f"{self.name}.sock")
        self.address = self.address or f"127.0.0.1:{free_port()}"
        self.log = os.path.join(self.dir, f"{self.name}.log")
        cfg = os.path.join(self.dir, f"{self.name}.yaml")
        with open(cfg, "w") as f:
            json.dump(self.config(), f)
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [self.binary, "serve", "--config", cfg],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
            )
        self.starts += 1
        deadline = time.monotonic() + timeout_s
        with Client(self.socket) as c:
            while True:
                try:
                    c.status(timeout=1.0)
                    return self
                except CustodyError as e:
                    err = e
                if self.proc.poll() is not None:
                    raise RuntimeError(
                        f"host {self.name} exited at start with {self.proc.returncode}; "
                        f"see {self.log}:\n{self._log_tail()}"
                    )
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(
                        f"host {self.name} did not answer within {timeout_s} s ({err}); see {self.log}"
                    )
                time.sleep(0.02)  # a process coming up: nothing to wait on but its socket

    def _log_tail(self, n: int = 4000) -> str:
        with open(self.log, errors="replace") as f:
            return f.read()[-n:]

    def kill(self) -> None:
        """SIGKILL the host (its transport dies with it), and remove what it
        left of its transports' sockets."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
        shutil.rmtree(
            socket_parent(self.state_dir or os.path.join(self.dir, "state"), self.name),
            ignore_errors=True,
        )

    def restart(self) -> HostProcess:
        """SIGKILL the host and start it again: the same config, socket and
        metadata endpoint, a new process (a new incarnation)."""
        self.kill()
        return self.start()

    def stop(self, timeout_s: float = 30.0) -> int | None:
        """SIGTERM the host (it tears down in order) and wait; kill it
        past the timeout. Returns its exit status (None if it never ran)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(
            socket_parent(self.state_dir or os.path.join(self.dir, "state"), self.name),
            ignore_errors=True,
        )
        return self.proc.returncode
