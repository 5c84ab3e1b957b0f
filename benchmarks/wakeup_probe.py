"""What a wake-up costs this machine: the CPU time of one unit of broker work done back to back, and done
right after the process slept, with no tidemq server in the way.

The unit is what a broker does first with every SEND: decode one 1 KiB SEND_MESSAGE frame and its typed
header. On a virtual machine, a process that blocks in the kernel (a sleep, an ``epoll_wait`` with
nothing ready) comes back to a colder CPU, and the same Python work then costs more. A paced workload
(the peers' W4: 5,000 single sends a second) wakes every process for each message, so its CPU per
message is this table's "after a sleep" figure, not the back-to-back one (docs/performance.md, W4).

    python benchmarks/wakeup_probe.py [--count 3000]
"""

from __future__ import annotations

import argparse
import os
import select
import time
from collections.abc import Callable

from tidemq.remoting.codes import RequestCode
from tidemq.remoting.command import RemotingCommand
from tidemq.remoting.frame import FrameDecoder, encode
from tidemq.remoting.headers import SendMessageRequestHeader


def send_frame() -> bytes:
    header = SendMessageRequestHeader(
        producer_group="PG",
        topic="TopicTest",
        default_topic="TBW102",
        default_topic_queue_nums=4,
        queue_id=1,
        sys_flag=0,
        born_timestamp=1_764_000_000_000,
        flag=0,
        properties="UNIQ_KEY\x017F0000010001B4AAC2A8\x02WAIT\x01true\x02",
        reconsume_times=0,
        unit_mode=False,
        batch=False,
    )
    return encode(RemotingCommand(RequestCode.SEND_MESSAGE, ext_fields=header.to_ext(), body=b"x" * 1024))


def unit_of_work(frame: bytes) -> Callable[[], None]:
    def decode() -> None:
        for cmd in FrameDecoder().feed(memoryview(frame)):
            assert isinstance(cmd, RemotingCommand)
            SendMessageRequestHeader.from_ext(cmd.ext_fields)

    return decode


def cpu_per_unit(work: Callable[[], None], before: Callable[[], None], count: int) -> float:
    """Mean thread CPU time of ``work`` in microseconds, each run preceded by ``before`` (not timed)."""
    total = 0.0
    for _ in range(count):
        before()
        started = time.thread_time()
        work()
        total += time.thread_time() - started
    return total / count * 1e6


def spin(seconds: float) -> Callable[[], None]:
    def run() -> None:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pass

    return run


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--count", type=int, default=3000, help="units per row")
    args = parser.parse_args()
    work = unit_of_work(send_frame())
    for _ in range(1000):
        work()  # imports, caches and specialisation out of the way
    read_end, write_end = os.pipe()
    poller = select.epoll()
    poller.register(read_end, select.EPOLLIN)  # never written: every poll times out
    rows: list[tuple[str, Callable[[], None]]] = [
        ("back to back", lambda: None),
        ("after a busy spin of 200 us (no sleep)", spin(200e-6)),
        ("after sleep(50 us)", lambda: time.sleep(50e-6)),
        ("after sleep(200 us)", lambda: time.sleep(200e-6)),
        ("after sleep(1 ms)", lambda: time.sleep(1e-3)),
        ("after epoll_wait timing out in 200 us", lambda: poller.poll(200e-6)),
    ]
    try:
        results = [(name, cpu_per_unit(work, before, args.count)) for name, before in rows]
    finally:
        poller.close()
        os.close(read_end)
        os.close(write_end)
    base = results[0][1]
    print(f"Decoding one 1 KiB SEND_MESSAGE frame and its header, {args.count:,} times per row:\n")
    print("| before each unit | CPU us per unit | vs back to back |")
    print("|---|---:|---:|")
    for name, micros in results:
        print(f"| {name} | {micros:.1f} | {micros / base:.2f}x |")


if __name__ == "__main__":
    main()
