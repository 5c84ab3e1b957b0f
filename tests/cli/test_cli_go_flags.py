"""``tidemq nsqd`` and ``tidemq nsqlookupd`` take the Go binaries' own flag spellings (issue 25, CLI polish):
a start script written for nsqd runs unchanged."""

from __future__ import annotations

from pathlib import Path

import click
import pytest

from tests.nsq_support import RawNsq
from tests.support import ServerProcess, unique
from tidemq.cli import main


def _parse(command: str, *args: str) -> dict[str, object]:
    cmd = main.get_command(click.Context(main), command)
    assert cmd is not None
    return dict(cmd.make_context(command, list(args)).params)


def test_go_spellings_map_onto_our_options() -> None:
    params = _parse(
        "nsqd",
        "-tcp-address=127.0.0.1:5150",
        "-http-address",
        "127.0.0.1:5151",
        "--data-path=/tmp/nsq-data",
        "-max-bytes-per-file",
        "1048576",
        "-mem-queue-size=77",
    )
    assert params["tcp_address"] == "127.0.0.1:5150" and params["http_address"] == "127.0.0.1:5151"
    assert params["data_dir"] == Path("/tmp/nsq-data") and params["segment_size"] == 1048576
    assert params["mem_queue_size"] == 77
    lookupd = _parse("nsqlookupd", "-tcp-address=127.0.0.1:5160", "-inactive-producer-timeout=10s")
    assert lookupd["tcp_address"] == "127.0.0.1:5160" and lookupd["inactive_producer_timeout"] == 10.0


def test_unknown_flags_and_bad_log_levels_are_still_refused() -> None:
    with pytest.raises(click.NoSuchOption):
        _parse("nsqd", "-no-such-flag=1")
    with pytest.raises(click.BadParameter, match="not one of"):
        _parse("nsqd", "--log-level=chatty")


class _GoStyleNsqd(ServerProcess):
    """``tidemq nsqd`` started with the arguments an nsqd start script would pass."""

    def args(self) -> list[str]:
        spelled = {"--tcp-address": "-tcp-address", "--data-dir": "-data-path"}
        return [spelled.get(a, a) for a in super().args()] + ["-log-level=debug"]


@pytest.mark.e2e
async def test_nsqd_started_with_go_flags_serves_and_stores_where_told(tmp_path: Path) -> None:
    nsqd = _GoStyleNsqd(tmp_path / "nsq-data", command="nsqd").start()
    try:
        client = await RawNsq.open(nsqd.nsqd)
        assert await client.pub(unique("go"), b"hello") == b"OK"
        client.close()
        assert any((tmp_path / "nsq-data").iterdir()), "-data-path holds the store"
    finally:
        assert nsqd.stop() == 0
    assert " DEBUG " in nsqd.log_path.read_text(), "-log-level=debug applies"
