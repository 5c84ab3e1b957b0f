"""Test support: real server processes on free loopback ports, a small raw remoting client, client scripts,
and the one home of polling (``eventually``, ``wait_for``) and topic creation (``create_topic``)."""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from tidemq.client import api
from tidemq.client.consumer.types import Subscription
from tidemq.record import BatchItem, MessageExt, encode_batch, encode_properties, iter_records
from tidemq.remoting import jsonx
from tidemq.remoting.codes import RequestCode, ResponseCode
from tidemq.remoting.command import RemotingCommand
from tidemq.remoting.frame import FrameDecoder
from tidemq.remoting.transport import RemotingConnection, connect

_handed_out: set[int] = set()


def free_port() -> int:
    """A port free now and not handed out before by this process (a server takes several at once)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port not in _handed_out:
            _handed_out.add(port)
            return port


class ServerProcess:
    """``tidemq server`` (or ``namesrv``/``broker``) as a child process, stopped by its own PID."""

    def __init__(self, data_dir: Path, *extra: str, command: str = "server") -> None:
        self.data_dir = data_dir
        self.command = command
        self.extra = list(extra)
        self.namesrv_port = free_port()
        self.broker_port = free_port()
        self.nsqd_port = free_port()
        self.nsqd_http_port = free_port()
        self.lookupd_tcp_port = free_port()
        self.lookupd_http_port = free_port()
        self.grpc_port = free_port()
        self.ops_port = free_port()  # the operations port (console, /metrics)
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = data_dir.parent / f"{data_dir.name}-{command}.log"
        #: What the server printed once ready ("tidemq ready: ...").
        self.ready_line = ""

    @property
    def namesrv(self) -> str:
        return f"127.0.0.1:{self.namesrv_port}"

    @property
    def nsqd(self) -> str:
        return f"127.0.0.1:{self.nsqd_port}"

    @property
    def nsqd_http(self) -> str:
        return f"127.0.0.1:{self.nsqd_http_port}"

    @property
    def lookupd_tcp(self) -> str:
        return f"127.0.0.1:{self.lookupd_tcp_port}"

    @property
    def lookupd_http(self) -> str:
        return f"127.0.0.1:{self.lookupd_http_port}"

    @property
    def grpc(self) -> str:
        """The RocketMQ 5.x gRPC endpoint (``tidemq server`` only)."""
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def http(self) -> str:
        """The HTTP operations port (``/metrics``; ``tidemq server`` only)."""
        return f"127.0.0.1:{self.ops_port}"

    @property
    def broker(self) -> str:
        return f"127.0.0.1:{self.broker_port}"

    def args(self) -> list[str]:
        args = [sys.executable, "-m", "tidemq", self.command]
        if self.command in ("server", "namesrv"):
            args += ["--namesrv-port", str(self.namesrv_port)]
        if self.command in ("server", "broker"):
            args += ["--broker-port", str(self.broker_port), "--data-dir", str(self.data_dir)]
        if self.command == "server":
            args += ["--nsqd-tcp-port", str(self.nsqd_port), "--nsqd-http-port", str(self.nsqd_http_port)]
            args += ["--lookupd-tcp-port", str(self.lookupd_tcp_port)]
            args += ["--lookupd-http-port", str(self.lookupd_http_port)]
            args += ["--grpc-port", str(self.grpc_port)]
            if "--no-http" not in self.extra:
                args += ["--http-port", str(self.ops_port)]
        if self.command == "nsqd":
            args += [
                "--tcp-address",
                self.nsqd,
                "--http-address",
                self.nsqd_http,
                "--data-dir",
                str(self.data_dir),
            ]
        return args + self.extra

    def start(self, timeout: float = 20.0) -> ServerProcess:
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child
        self.proc = subprocess.Popen(
            self.args(), stdout=subprocess.PIPE, stderr=log, env={**os.environ, "PYTHONUNBUFFERED": "1"}
        )
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if line.startswith(b"tidemq ready"):
                self.ready_line = line.decode(errors="replace").strip()
                return self
            if not line and self.proc.poll() is not None:
                break
        self.kill()
        raise RuntimeError(f"server did not start: {self.log_path.read_text(errors='replace')[-3000:]}")

    def stop(self, timeout: float = 20.0) -> int:
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            code = -9
        self.proc = None
        return code

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        self.proc = None


@dataclass
class TwoBrokers:
    """A name server and two brokers (``broker-0``, ``broker-1`` of cluster ``TwoBrokers``) as processes."""

    namesrv: ServerProcess
    brokers: list[ServerProcess]

    @classmethod
    def start(cls, folder: Path) -> TwoBrokers:
        namesrv = ServerProcess(folder / "ns", command="namesrv").start()
        brokers: list[ServerProcess] = []
        try:
            for i in range(2):
                broker = ServerProcess(
                    folder / f"b{i}",
                    "--namesrv",
                    namesrv.namesrv,
                    "--broker-name",
                    f"broker-{i}",
                    "--cluster",
                    "TwoBrokers",
                    command="broker",
                )
                brokers.append(broker.start())
        except BaseException:
            cls(namesrv, brokers).stop()
            raise
        return cls(namesrv, brokers)

    def stop(self) -> None:
        for broker in self.brokers:
            broker.stop()
        self.namesrv.stop()


def wait_listening(port: int, alive: Any, timeout: float) -> bool:
    """Whether something listens on 127.0.0.1:``port`` within ``timeout`` while ``alive()`` holds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and alive():
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return True
        time.sleep(0.2)
    return False


async def eventually(
    check: Callable[[], Any],
    timeout: float = 10.0,
    what: str = "condition",
    *,
    interval: float = 0.05,
    in_thread: bool = False,
) -> Any:
    """Poll ``check`` until it returns something truthy, and return that; fail after ``timeout`` seconds.

    ``check`` may be a plain function or a coroutine function. A blocking check (HTTP with urllib, a
    subprocess) takes ``in_thread=True`` so the event loop goes on serving the test's connections."""
    deadline = time.monotonic() + timeout
    while True:
        value = await asyncio.to_thread(check) if in_thread else check()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not met within {timeout} s (last: {value!r})")
        await asyncio.sleep(interval)


def wait_for(
    check: Callable[[], Any], timeout: float = 10.0, what: str = "condition", *, interval: float = 0.05
) -> Any:
    """:func:`eventually` for tests without an event loop (processes, threads): blocks between polls."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not met within {timeout} s (last: {value!r})")
        time.sleep(interval)


async def create_topic(broker: str, topic: str, queues: int = 4, *, routed_by: str | None = None) -> None:
    """Create ``topic`` on the broker at ``broker``; with ``routed_by`` (a name server), also wait until
    that name server routes it, for clients that fail a send at once on TOPIC_NOT_EXIST."""
    c = await RawClient.open(broker)
    try:
        resp = await c.create_topic(topic, queues)
        assert resp.code == ResponseCode.SUCCESS, (resp.code, resp.remark)
    finally:
        c.close()
    if routed_by is None:
        return
    n = await RawClient.open(routed_by)

    async def routed() -> dict[str, Any] | None:
        route = await n.route(topic)
        return route if route and route.get("queueDatas") else None

    try:
        await eventually(routed, what=f"a route for {topic}", interval=0.1)
    finally:
        n.close()


@dataclass
class Sent:
    code: int
    remark: str | None
    msg_id: str
    queue_id: int
    queue_offset: int


class RawClient:
    """Speaks the remoting protocol directly, request by request, the way a real client would."""

    def __init__(self, conn: RemotingConnection, client_id: str = "127.0.0.1@test") -> None:
        self.conn = conn
        self.client_id = client_id
        self.received: list[RemotingCommand] = []

    @classmethod
    async def open(cls, addr: str, client_id: str = "127.0.0.1@test") -> RawClient:
        host, port = addr.rsplit(":", 1)
        holder: list[RawClient] = []

        def on_request(conn: RemotingConnection, req: RemotingCommand) -> RemotingCommand | None:
            holder[0].received.append(req)
            return None

        client = cls(await connect(host, int(port), on_request), client_id)
        holder.append(client)
        return client

    def close(self) -> None:
        self.conn.close()

    async def call(
        self,
        code: int,
        ext: dict[str, str] | None = None,
        body: bytes = b"",
        timeout: float = 5.0,
        version: int = 409,
    ) -> RemotingCommand:
        return await self.conn.invoke(
            RemotingCommand(code, ext_fields=ext or {}, body=body, version=version), timeout
        )

    async def send(
        self,
        topic: str,
        body: bytes,
        *,
        tags: str | None = None,
        keys: str | None = None,
        queue_id: int = 0,
        props: dict[str, str] | None = None,
        code: int = RequestCode.SEND_MESSAGE_V2,
        reconsume_times: int | None = None,
        max_reconsume_times: int | None = None,
    ) -> Sent:
        properties = dict(props or {})
        if tags:
            properties["TAGS"] = tags
        if keys:
            properties["KEYS"] = keys
        header = api.send_header(
            topic,
            queue_id=queue_id,
            properties=encode_properties(properties),
            producer_group="PG",
            reconsume_times=reconsume_times,
            max_reconsume_times=max_reconsume_times,
        )
        ext = header.to_compact_ext() if code != RequestCode.SEND_MESSAGE else header.to_ext()
        resp = await self.call(code, ext, body)
        return self._sent(resp)

    async def send_batch(self, topic: str, bodies: list[bytes], queue_id: int = 0) -> Sent:
        header = api.send_header(
            topic, queue_id=queue_id, properties="WAIT\x01true", producer_group="PG", batch=True
        )
        items = [
            BatchItem(0, b, encode_properties({"UNIQ_KEY": f"U{i:031d}", "KEYS": f"bk{i}"}))
            for i, b in enumerate(bodies)
        ]
        return self._sent(await self.conn.invoke(api.send_request(header, encode_batch(items)), 5.0))

    @staticmethod
    def _sent(resp: RemotingCommand) -> Sent:
        ext = resp.ext_fields
        return Sent(
            resp.code,
            resp.remark,
            ext.get("msgId", ""),
            int(ext.get("queueId", -1)),
            int(ext.get("queueOffset", -1)),
        )

    async def pull(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        *,
        group: str = "CG",
        max_nums: int = 32,
        expression: str | None = "*",
        suspend_ms: int = 0,
        commit_offset: int = 0,
        timeout: float = 5.0,
    ) -> tuple[RemotingCommand, list[MessageExt]]:
        header = api.pull_header(
            group,
            topic,
            queue_id,
            offset,
            max_nums=max_nums,
            expression=expression,
            suspend_ms=suspend_ms,
            commit_offset=commit_offset,
        )
        resp = await self.call(RequestCode.PULL_MESSAGE, header.to_ext(), timeout=timeout)
        msgs = list(iter_records(resp.body)) if resp.code == ResponseCode.SUCCESS else []
        return resp, msgs

    async def drain(
        self, topic: str, queue_id: int, *, group: str = "CG", max_pulls: int = 1000
    ) -> list[MessageExt]:
        """Every message of one queue from offset 0, pulled until the broker has nothing more."""
        out: list[MessageExt] = []
        offset = 0
        for _ in range(max_pulls):
            resp, msgs = await self.pull(topic, queue_id, offset, group=group)
            if not msgs:
                return out
            out += msgs
            offset = int(resp.ext_fields["nextBeginOffset"])
        raise AssertionError(f"{topic}/{queue_id} did not drain in {max_pulls} pulls")

    async def heartbeat(
        self, group: str, topics: dict[str, str], model: str = "CLUSTERING"
    ) -> RemotingCommand:
        subs = [Subscription.parse(topic, expr).to_json(topic) for topic, expr in topics.items()]
        body = {
            "clientID": self.client_id,
            "producerDataSet": [],
            "consumerDataSet": [
                {
                    "groupName": group,
                    "consumeType": "CONSUME_PASSIVELY",
                    "messageModel": model,
                    "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
                    "unitMode": False,
                    "subscriptionDataSet": subs,
                }
            ],
        }
        return await self.call(RequestCode.HEART_BEAT, body=orjson.dumps(body))

    async def route(self, topic: str) -> dict[str, Any] | None:
        resp = await self.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
        return jsonx.loads(resp.body) if resp.code == ResponseCode.SUCCESS else None

    async def create_topic(self, topic: str, queues: int = 4, perm: int = 6) -> RemotingCommand:
        return await self.conn.invoke(api.create_topic_request(topic, queues, perm), 5.0)


def tidemq_cli(
    *args: str,
    stdin: str | None = None,
    timeout: float = 60,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """The ``tidemq`` command as a user runs it, to its end."""
    return subprocess.run(
        [sys.executable, "-m", "tidemq", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=cwd,
        check=False,
    )


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


def server_log(server: ServerProcess) -> str:
    try:
        return server.log_path.read_text(errors="replace")[-4000:]
    except OSError:
        return "(no server log)"


# A client script's own --timeout (exit 2) fires first; the subprocess timeout is the hard backstop.
HARD_MARGIN = 15


@dataclass
class ScriptRun:
    rc: int
    records: list[dict[str, Any]]
    stderr: str
    argv: list[str]

    def describe(self) -> str:
        tail = self.stderr[-4000:]
        last = "\n".join(json.dumps(r) for r in self.records[-20:])
        return (
            f"`{' '.join(self.argv[1:])}` exited {self.rc}, {len(self.records)} records, the last:\n{last}\n"
            f"stderr:\n{tail}"
        )


def run_script(argv: list[str], timeout: int, cwd: Path | None = None, **options: object) -> ScriptRun:
    """Run an interop client script to completion; ``fail_first=3`` becomes ``--fail-first 3``.

    The scripts print JSON lines only on stdout (logs go to stderr) and take ``--timeout`` seconds.
    """
    argv = [*argv, "--timeout", str(timeout)]
    for name, value in options.items():
        argv += ["--" + name.replace("_", "-"), str(value)]
    try:
        proc = subprocess.run(
            argv, cwd=cwd, capture_output=True, text=True, timeout=timeout + HARD_MARGIN, check=False
        )
    except subprocess.TimeoutExpired as exc:  # subprocess.run kills the child before raising
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        err = exc.stderr.decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        raise AssertionError(
            f"`{' '.join(argv[1:])}` hung past the hard timeout;"
            f" stdout:\n{out[-2000:]}\nstderr:\n{err[-4000:]}"
        ) from None
    records = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    return ScriptRun(proc.returncode, records, proc.stderr, argv)


def hold_fsync(monkeypatch: Any, timeout: float = 10.0) -> tuple[threading.Event, threading.Event]:
    """Make every ``os.fsync`` in this process wait until the second event is set; the first is set once
    an fsync is waiting. For tests of what happens while a flush is under way (undone with the patch)."""
    inside, release = threading.Event(), threading.Event()
    real_fsync = os.fsync

    def held_fsync(fd: int) -> None:
        inside.set()
        release.wait(timeout)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", held_fsync)
    return inside, release


async def tally_answers(reader: asyncio.StreamReader, answers: dict[int, int]) -> None:
    """Count the remoting answers arriving on a raw socket by response code, until it closes (the abuse
    tests pipeline thousands of requests without a client to match them)."""
    decoder = FrameDecoder()
    while data := await reader.read(256 * 1024):
        for cmd in decoder.feed(memoryview(data)):
            assert isinstance(cmd, RemotingCommand)
            answers[cmd.code] = answers.get(cmd.code, 0) + 1
