"""The server as a process: crash durability, clean shutdown, restart, and the CLI's error messages."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support import RawClient, ServerProcess, TwoBrokers, free_port, run
from tidemq.remoting.codes import RequestCode, ResponseCode
from tidemq.remoting.transport import RemotingError

pytestmark = pytest.mark.e2e


async def _drain_queue(c: RawClient, topic: str, queue_id: int) -> list[bytes]:
    return [m.body for m in await c.drain(topic, queue_id)]


def test_sigkill_during_sync_sends_loses_nothing_acknowledged(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", "--flush", "sync").start()
    acked: set[bytes] = set()

    async def produce() -> None:
        clients = [await RawClient.open(server.broker) for _ in range(4)]

        async def sender(n: int) -> None:
            for i in range(5000):
                body = f"{n}-{i}".encode()
                try:
                    r = await clients[n].send("Durable", body, queue_id=n)
                except (RemotingError, OSError):
                    return
                if r.code == ResponseCode.SUCCESS:
                    acked.add(body)

        tasks = [asyncio.create_task(sender(n)) for n in range(4)]
        deadline = time.monotonic() + 10
        while len(acked) < 300 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert server.proc is not None
        os.kill(server.proc.pid, signal.SIGKILL)  # mid-stream, while sends are in flight
        await asyncio.gather(*tasks, return_exceptions=True)

    run(produce())
    server.kill()
    assert len(acked) >= 300
    restarted = ServerProcess(tmp_path / "data")
    restarted.namesrv_port, restarted.broker_port = free_port(), free_port()
    restarted.start()
    try:

        async def read_back() -> set[bytes]:
            c = await RawClient.open(restarted.broker)
            found: set[bytes] = set()
            for q in range(4):
                found.update(await _drain_queue(c, "Durable", q))
            c.close()
            return found

        found = run(read_back())
        assert acked <= found, f"{len(acked - found)} acknowledged messages lost"
    finally:
        assert restarted.stop() == 0


def test_sigkill_keeps_every_acknowledged_key_findable_after_restart(tmp_path: Path) -> None:
    """The key index writes its entries only at the periodic flush, while consume-queue entries outlive
    a SIGKILL in the page cache: recovery must re-index from the index's own end, not the queue's."""
    server = ServerProcess(tmp_path / "data").start()

    async def produce() -> list[str]:
        c = await RawClient.open(server.broker)
        uniq = []
        for i in range(300):
            sent = await c.send("Keyed", b"%d" % i, keys=f"k-{i}", props={"UNIQ_KEY": f"U{i:031d}"})
            assert sent.code == ResponseCode.SUCCESS
            uniq.append(f"U{i:031d}")
        assert server.proc is not None
        os.kill(server.proc.pid, signal.SIGKILL)  # right after the last acknowledgement
        c.close()
        return uniq

    uniq = run(produce())
    server.kill()
    restarted = ServerProcess(tmp_path / "data")
    restarted.start()
    try:

        async def lookup() -> list[str]:
            c = await RawClient.open(restarted.broker)
            missing = []
            now = int(time.time() * 1000)
            query = {"topic": "Keyed", "maxNum": "4", "beginTimestamp": "0", "endTimestamp": str(now)}
            for i in range(300):
                for key in (f"k-{i}", uniq[i]):
                    found = await c.call(RequestCode.QUERY_MESSAGE, query | {"key": key})
                    if found.code != ResponseCode.SUCCESS:
                        missing.append(key)
            c.close()
            return missing

        missing = run(lookup())
        assert not missing, f"{len(missing)} keys not found after restart, e.g. {missing[:4]}"
    finally:
        assert restarted.stop() == 0


def test_sigterm_flushes_offsets_and_exits_zero(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data").start()

    async def before() -> None:
        c = await RawClient.open(server.broker)
        for i in range(10):
            await c.send("Restart", f"{i}".encode())
        await c.call(15, {"consumerGroup": "G", "topic": "Restart", "queueId": "0", "commitOffset": "7"})
        c.close()

    run(before())
    assert server.stop() == 0
    server.start()
    try:

        async def after() -> None:
            c = await RawClient.open(server.broker)
            assert await _drain_queue(c, "Restart", 0) == [f"{i}".encode() for i in range(10)]
            resp = await c.call(14, {"consumerGroup": "G", "topic": "Restart", "queueId": "0"})
            assert resp.ext_fields["offset"] == "7"
            r = await c.send("Restart", b"10")
            assert r.queue_offset == 10
            c.close()

        run(after())
    finally:
        assert server.stop() == 0


@pytest.mark.parametrize("command", ["server", "namesrv"])
def test_fatal_signal_leaves_every_threads_python_stack_in_the_log(tmp_path: Path, command: str) -> None:
    """A native crash (grpcio's C core) must say in the log what the server was doing: faulthandler."""
    server = ServerProcess(tmp_path / "data", command=command).start()
    assert server.proc is not None
    os.kill(server.proc.pid, signal.SIGSEGV)
    assert server.proc.wait(20) == -signal.SIGSEGV
    server.proc = None
    log = server.log_path.read_text(errors="replace")
    assert "Fatal Python error: Segmentation fault" in log, log[-2000:]
    crash = log[log.index("Fatal Python error") :]
    assert "most recent call first" in crash and 'File "' in crash, crash[:2000]
    # the main thread runs the event loop: its stack names it
    assert "asyncio" in crash, crash[:2000]


def _cli(*args: str, timeout: float = 20) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tidemq", *args], capture_output=True, text=True, timeout=timeout
    )


def test_port_in_use_is_a_clear_one_line_error(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = _cli(
            "server",
            "--data-dir",
            str(tmp_path / "d"),
            "--namesrv-port",
            str(port),
            "--broker-port",
            str(free_port()),
            "--no-nsq",
            "--no-lookupd",
        )
    assert result.returncode == 1
    assert "address already in use" in result.stderr and str(port) in result.stderr
    assert "Traceback" not in result.stderr


def test_unwritable_data_dir_and_bad_options(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    result = _cli(
        "server",
        "--data-dir",
        str(blocker / "sub"),
        "--namesrv-port",
        str(free_port()),
        "--broker-port",
        str(free_port()),
    )
    assert result.returncode == 1 and "not writable" in result.stderr and "Traceback" not in result.stderr
    bad = _cli("server", "--flush", "sometimes")
    assert bad.returncode == 2 and "sometimes" in bad.stderr
    bad_levels = _cli("server", "--delay-levels", "1x")
    assert bad_levels.returncode == 2 and "bad delay level" in bad_levels.stderr
    config = tmp_path / "bad.toml"
    config.write_text("no_such_setting = 1\n")
    bad_config = _cli("server", "--config", str(config))
    assert bad_config.returncode == 2 and "no_such_setting" in bad_config.stderr


def test_config_file_sets_options(tmp_path: Path) -> None:
    port = free_port()
    config = tmp_path / "tidemq.toml"
    config.write_text(f'namesrv-port = {port}\nbroker-name = "from-toml"\nflush = "sync"\n')
    server = ServerProcess(tmp_path / "data", "--config", str(config))
    server.namesrv_port = port
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tidemq",
            "server",
            "--config",
            str(config),
            "--data-dir",
            str(tmp_path / "data"),
            "--broker-port",
            str(server.broker_port),
            "--nsqd-tcp-port",
            str(server.nsqd_port),
            "--nsqd-http-port",
            str(server.nsqd_http_port),
            "--lookupd-tcp-port",
            str(server.lookupd_tcp_port),
            "--lookupd-http-port",
            str(server.lookupd_http_port),
            "--grpc-port",
            str(server.grpc_port),
            "--http-port",
            str(server.ops_port),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert f"namesrv 127.0.0.1:{port}" in line and "broker from-toml" in line
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(20) == 0


async def test_separate_name_server_with_two_brokers(two_brokers: TwoBrokers) -> None:
    namesrv, brokers = two_brokers.namesrv, two_brokers.brokers
    for b in brokers:
        c = await RawClient.open(b.broker)
        assert (await c.create_topic("Shared", 2)).code == ResponseCode.SUCCESS
        c.close()
    ns = await RawClient.open(namesrv.namesrv)
    route = await ns.route("Shared")
    assert route is not None
    assert sorted(q["brokerName"] for q in route["queueDatas"]) == ["broker-0", "broker-1"]
    addrs = {d["brokerName"]: d["brokerAddrs"]["0"] for d in route["brokerDatas"]}
    assert addrs == {"broker-0": brokers[0].broker, "broker-1": brokers[1].broker}
    ns.close()

    assert brokers[1].stop() == 0  # unregisters: its queues leave the route

    ns = await RawClient.open(namesrv.namesrv)
    route = await ns.route("Shared")
    assert route is not None and [q["brokerName"] for q in route["queueDatas"]] == ["broker-0"]
    ns.close()


async def test_topic_auto_creation_can_be_switched_off(tmp_path: Path) -> None:
    on = ServerProcess(tmp_path / "on").start()
    off = ServerProcess(tmp_path / "off", "--no-auto-create-topic").start()
    try:
        ns = await RawClient.open(on.namesrv)
        template = await ns.route("TBW102")  # producers fall back to this route for new topics
        assert template is not None and template["queueDatas"][0]["perm"] == 7
        ns.close()
        c = await RawClient.open(on.broker)
        created = await c.send("BornOnSend", b"x", queue_id=3)
        assert created.code == ResponseCode.SUCCESS
        c.close()
        ns = await RawClient.open(on.namesrv)
        route = await ns.route("BornOnSend")
        assert route is not None and route["queueDatas"][0]["writeQueueNums"] == 4
        assert route["queueDatas"][0]["perm"] == 6
        ns.close()
        c = await RawClient.open(off.broker)
        refused = await c.send("NotBorn", b"x")
        assert refused.code == ResponseCode.TOPIC_NOT_EXIST and "NotBorn" in (refused.remark or "")
        c.close()
        ns = await RawClient.open(off.namesrv)
        assert await ns.route("TBW102") is None
        ns.close()
    finally:
        assert on.stop() == 0
        assert off.stop() == 0


def test_restart_re_dispatches_delayed_messages_past_the_checkpoint(tmp_path: Path) -> None:
    """Recovery rebuilds the schedule queue too; a delayed message still arrives after a crash."""
    levels = ("--delay-levels", "1s 1s 1s")
    server = ServerProcess(tmp_path / "data", *levels).start()

    async def send() -> None:
        c = await RawClient.open(server.broker)
        assert (await c.send("DelayedCrash", b"later", props={"DELAY": "1"})).code == ResponseCode.SUCCESS
        c.close()

    run(send())
    server.kill()
    # As after a power loss that took the unsynced consume-queue pages: recovery must rebuild them.
    (tmp_path / "data" / "checkpoint.json").unlink(missing_ok=True)
    shutil.rmtree(tmp_path / "data" / "consumequeue" / "SCHEDULE_TOPIC_XXXX")
    server.start()
    try:

        async def receive() -> list[bytes]:
            c = await RawClient.open(server.broker)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                _, msgs = await c.pull("DelayedCrash", 0, 0)
                if msgs:
                    c.close()
                    return [m.body for m in msgs]
                await asyncio.sleep(0.2)
            c.close()
            return []

        assert run(receive()) == [b"later"]
    finally:
        assert server.stop() == 0
