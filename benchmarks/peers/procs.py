"""Processes: brokers under test (started as plain children, measured as a process tree from /proc, stopped
by PID) and the client children that run one producer or consumer each (CPU from ``os.wait4``)."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, Any

from bench_common import CLK_TCK, HOST, free_port, log_tail, proc_stat

RUN = Path(__file__).resolve().parent / "run.py"
CHILD_SLACK = 30.0  # beyond a child's own caps before it counts as hung


# --- /proc -----------------------------------------------------------------------------------------------


def tree(roots: list[int]) -> list[int]:
    """``roots`` and all their descendants alive now."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                children.setdefault(int(proc_stat(int(entry.name))[1]), []).append(int(entry.name))
    found: list[int] = []
    todo = [r for r in roots if Path(f"/proc/{r}").exists()]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def tree_cpu(roots: list[int]) -> float:
    """utime + stime (+ those of reaped children, so a short-lived helper still counts) of the tree."""
    total = 0
    for pid in tree(roots):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = proc_stat(pid)
            total += sum(int(fields[i]) for i in (11, 12, 13, 14))  # proc(5) fields 14-17
    return total / CLK_TCK


def tree_hwm_mib(roots: list[int]) -> float:
    """The sum of every tree member's VmHWM (an upper bound of the tree's peak RSS)."""
    total_kib = 0
    for pid in tree(roots):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    total_kib += int(line.split()[1])
    return total_kib / 1024


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex((HOST, port)) == 0


def reset_hwm(roots: list[int]) -> bool:
    """Reset the peak RSS of every tree member (``echo 5 > /proc/PID/clear_refs``); False if not allowed."""
    ok = True
    for pid in tree(roots):
        try:
            Path(f"/proc/{pid}/clear_refs").write_text("5")
        except OSError:
            ok = False
    return ok


# --- brokers ---------------------------------------------------------------------------------------------


class Broker:
    """One broker under test as a child process in its own session, with its data in a temp dir."""

    system = ""
    durability = "async"  # "async" or "sync" (see the report's durability classes)
    start_timeout = 60.0

    def __init__(self, label: str) -> None:
        self.label = label
        self.workdir = Path(tempfile.mkdtemp(prefix=f"peers-{label.replace(' ', '-')}-"))
        self.log_path = self.workdir / "broker.log"
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.helpers: list[subprocess.Popen[bytes]] = []  # started before the broker (e.g. epmd)

    # what a peer defines
    def command(self) -> list[str]:
        raise NotImplementedError

    def env(self) -> dict[str, str]:
        return dict(os.environ)

    def settings(self) -> str:
        raise NotImplementedError

    def target(self) -> dict[str, Any]:
        return {"host": HOST, "port": self.port}

    def ready(self) -> bool:
        raise NotImplementedError

    def before_start(self) -> None:
        pass

    # lifecycle
    def spawn(self, args: list[str]) -> subprocess.Popen[bytes]:
        with open(self.log_path, "ab") as log:
            return subprocess.Popen(
                args, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir,
                env=self.env(), start_new_session=True,
            )  # fmt: skip

    def start(self) -> None:
        self.before_start()
        self.proc = self.spawn(self.command())
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            with contextlib.suppress(Exception):
                if self.ready():
                    return
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"{self.label} did not start within {self.start_timeout:.0f} s: {self.log_tail()}")

    def roots(self) -> list[int]:
        procs = [self.proc, *self.helpers] if self.proc else self.helpers
        return [p.pid for p in procs if p.poll() is None]

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM the broker, then SIGKILL whatever of its tree (and its helpers) is left, by PID."""
        members = tree(self.roots())
        for proc in [self.proc, *reversed(self.helpers)]:
            if proc is None:
                continue
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        for pid in members:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        self.proc, self.helpers = None, []

    def log_tail(self, chars: int = 2000) -> str:
        return log_tail(self.log_path, chars)

    def cleanup(self) -> None:
        shutil.rmtree(self.workdir, ignore_errors=True)


# --- client children -------------------------------------------------------------------------------------


class Child:
    """``run.py --client SPEC``: one producer or consumer in its own process (its own GIL)."""

    def __init__(self, spec: dict[str, Any], log_dir: Path) -> None:
        self.spec = spec
        self.log_path = log_dir / f"{spec['role']}-{spec['name']}-{spec['group'] or 'p'}.log"
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, str(RUN), "--client", json.dumps(spec)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
            )  # fmt: skip
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.cpu = 0.0
        assert self.proc.stdout is not None
        threading.Thread(target=self._read, args=(self.proc.stdout,), daemon=True).start()

    def _read(self, stream: IO[bytes]) -> None:
        for raw in stream:
            self.lines.put(raw.decode(errors="replace").strip())
        self.lines.put(None)

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                break
            if line is None:
                raise RuntimeError(f"{self.spec['role']} child exited before ready: {self.log_tail()}")
            if json.loads(line).get("ready"):
                return
        self.kill()
        raise RuntimeError(f"{self.spec['role']} child not ready after {timeout:.0f} s: {self.log_tail()}")

    def tell(self, acked: int) -> None:
        """The producer's acknowledged count: the consumer expects no more than that."""
        assert self.proc.stdin is not None
        with contextlib.suppress(BrokenPipeError, OSError):
            self.proc.stdin.write(f"{acked}\n".encode())
            self.proc.stdin.close()

    def finish(self) -> dict[str, Any]:
        """Wait (bounded by the spec's caps) and return its JSON answer; its CPU lands in ``self.cpu``."""
        timeout = float(self.spec["cap"]) + float(self.spec.get("drain", 0)) + CHILD_SLACK
        deadline = time.monotonic() + timeout
        with contextlib.suppress(OSError):
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        hung = False
        while True:
            pid, status, usage = os.wait4(self.proc.pid, os.WNOHANG)
            if pid:
                self.proc.returncode = os.waitstatus_to_exitcode(status)
                self.cpu = usage.ru_utime + usage.ru_stime
                break
            if time.monotonic() >= deadline and not hung:
                hung = True
                self.proc.kill()  # this child's own PID
            time.sleep(0.02)
        answer: dict[str, Any] = {}
        while (line := self.lines.get(timeout=10)) is not None:
            if line.startswith("{"):
                answer = json.loads(line)
        if hung:
            raise RuntimeError(f"{self.spec['role']} child hung for {timeout:.0f} s: {self.log_tail()}")
        if "error" in answer:
            raise RuntimeError(f"{self.spec['role']} child failed: {answer['error']}")
        if self.proc.returncode != 0:
            code = self.proc.returncode
            raise RuntimeError(f"{self.spec['role']} child exited with {code}: {self.log_tail()}")
        return answer

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def log_tail(self, chars: int = 800) -> str:
        return log_tail(self.log_path, chars).strip().replace("\n", " / ")
