"""A Spark standalone cluster for the tests: a master and workers started from the pip-installed PySpark
(``spark-class ...deploy.master.Master`` / ``...deploy.worker.Worker``) on 127.0.0.1, small memory, each in
its own process group so that a worker can be killed with its executors and their Python workers."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pyspark

from tests.support import free_port, wait_listening

SPARK_HOME = Path(pyspark.__file__).parent
START_TIMEOUT_S = 90.0


@dataclass
class SparkProcess:
    name: str
    proc: subprocess.Popen[bytes]
    log: Path

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill_group(self) -> None:
        """SIGKILL the process and everything it started (a worker's executors, their Python workers)."""
        if self.alive():
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        else:  # its children may outlive it
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)

    def tail(self, lines: int = 30) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


@dataclass
class SparkCluster:
    work: Path
    master_port: int = 0
    workers: list[SparkProcess] = field(default_factory=list)
    master: SparkProcess | None = None

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.master_port}"

    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "SPARK_HOME": str(SPARK_HOME),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_LOCAL_DIRS": str(self.work / "local"),
            "PYSPARK_PYTHON": sys.executable,
            "SPARK_NO_DAEMONIZE": "1",
        }

    def _spark_class(self, name: str, *args: str) -> SparkProcess:
        log = self.work / f"{name}.log"
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                [str(SPARK_HOME / "bin" / "spark-class"), *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.env(),
                start_new_session=True,
            )
        return SparkProcess(name, proc, log)

    def start(self, workers: int = 2) -> SparkCluster:
        self.work.mkdir(parents=True, exist_ok=True)
        self.master_port = free_port()
        self.master = self._spark_class(
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.master_port),
            "--webui-port",
            str(free_port()),
        )
        self._wait_port(self.master, self.master_port)
        for i in range(workers):
            self.start_worker(f"worker{i}")
        return self

    def start_worker(self, name: str) -> SparkProcess:
        port = free_port()
        worker = self._spark_class(
            name,
            "org.apache.spark.deploy.worker.Worker",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--webui-port",
            str(free_port()),
            "--cores",
            "1",
            "--memory",
            "1g",
            "--work-dir",
            str(self.work / name),
            self.url,
        )
        self.workers.append(worker)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline and worker.alive():
            if "Successfully registered with master" in worker.log.read_text(errors="replace"):
                return worker
            time.sleep(0.3)
        self.stop()
        raise AssertionError(f"Spark {name} did not register with the master:\n{worker.tail()}")

    def _wait_port(self, process: SparkProcess, port: int) -> None:
        if wait_listening(port, process.alive, START_TIMEOUT_S):
            return
        self.stop()
        raise AssertionError(f"Spark {process.name} did not listen on {port}:\n{process.tail()}")

    def stop(self) -> None:
        for worker in self.workers:
            worker.kill_group()
        if self.master is not None:
            self.master.kill_group()
