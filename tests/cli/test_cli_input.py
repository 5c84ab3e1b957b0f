"""The client commands given what users type: both kinds of message id, malformed and unreachable
addresses, unknown groups, non-UTF-8 bodies, many matches. One clear line and the right exit status."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

from tests.support import ServerProcess, unique

pytestmark = pytest.mark.e2e


def tidemq(*args: str, stdin: str | bytes | None = None) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "tidemq", *args],
        input=stdin.encode() if isinstance(stdin, str) else stdin,
        capture_output=True,
        timeout=60,
    )
    return subprocess.CompletedProcess(
        done.args, done.returncode, done.stdout.decode(errors="replace"), done.stderr.decode(errors="replace")
    )


def one_line_error(done: subprocess.CompletedProcess[str]) -> str:
    """The single ``Error:`` line of a failed command, after checking there is no traceback."""
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1, done.stderr[-3000:]
    return errors[0]


def test_message_get_takes_the_msg_id_produce_printed(server: ServerProcess) -> None:
    topic = unique("CliIds")
    ns = ["--namesrv", server.namesrv]
    produced = tidemq("produce", "-t", topic, "--format", "json", *ns, stdin="alpha\nbeta\n")
    assert produced.returncode == 0, produced.stderr
    alpha = next(json.loads(line) for line in produced.stdout.splitlines() if json.loads(line)["i"] == 0)

    without_topic = tidemq("message", "get", "--id", alpha["msg_id"], *ns)
    assert without_topic.returncode == 1
    assert "--topic" in one_line_error(without_topic), "a unique key needs its topic, and the error says so"

    by_unique_key = tidemq("message", "get", "--id", alpha["msg_id"], "--topic", topic, *ns)
    assert by_unique_key.returncode == 0, by_unique_key.stderr
    assert json.loads(by_unique_key.stdout)["body"] == "alpha"

    for args in (["--id", alpha["offset_msg_id"]], ["--id", alpha["offset_msg_id"], "--topic", topic]):
        by_offset_id = tidemq("message", "get", *args, *ns)
        assert by_offset_id.returncode == 0, by_offset_id.stderr
        assert json.loads(by_offset_id.stdout)["body"] == "alpha"

    broker_but_no_message = alpha["offset_msg_id"][:16] + "00000000FFFFFF00"
    missing = tidemq("message", "get", "--id", broker_but_no_message, *ns)
    assert missing.returncode == 1 and "no message at commit-log offset" in one_line_error(missing)
    unknown_key = tidemq("message", "get", "--id", "0" * 32, "--topic", topic, *ns)
    assert unknown_key.returncode == 1 and "no message with id" in one_line_error(unknown_key)


NOWHERE = ["--namesrv=127.0.0.1:1"]  # a command past its checks must not reach a default port


@pytest.mark.parametrize(
    "args, option",
    [
        (["consume", "-t", "T", "-g", "G", "-n", "1", "--namesrv", "nonsense"], "--namesrv"),
        (["consume", "-t", "T", "-g", "G", "--namesrv", "127.0.0.1:99999"], "--namesrv"),
        (["produce", "-t", "T", "-n", "1", "--namesrv", "127.0.0.1:"], "--namesrv"),
        (["topic", "list", "--namesrv", "nonsense"], "--namesrv"),
        (["group", "progress", "G", "--namesrv", "a:1;b"], "--namesrv"),
        (["nsq", "tail", "--topic", "t", "--nsqd-tcp-address", "garbage"], "--nsqd-tcp-address"),
        (["nsq", "tail", "--topic", "t", "--nsqd-tcp-address", "127.0.0.1:70000"], "--nsqd-tcp-address"),
        (["nsq", "tail", "--topic", "t", "--lookupd-http-address", "garbage"], "--lookupd-http-address"),
        (["nsq", "publish", "--topic", "t", "--nsqd-tcp-address", "garbage"], "--nsqd-tcp-address"),
        (["server", "--listen", "999.1.1.1", "--namesrv-port", "0", "--data-dir", "{tmp}"], "--listen"),
        (["consume", "-t", "T", "-g", "G", "--from=timestamp", "--timestamp=2024", *NOWHERE], "--timestamp"),
        (["consume", "-t", "T", "-g", "G", "--timestamp", "20240101000000", *NOWHERE], "--timestamp"),
        (["produce", "-t", "no spaces", "-n", "1", *NOWHERE], "--topic"),
    ],
)
def test_malformed_input_is_one_line_naming_the_option(
    args: list[str], option: str, tmp_path: pathlib.Path
) -> None:
    done = tidemq(*(arg.replace("{tmp}", str(tmp_path / "data")) for arg in args))
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    error = next(line for line in done.stderr.splitlines() if line.startswith("Error: "))
    assert option in error, done.stderr


def test_an_unreachable_name_server_is_an_error_not_zero_messages() -> None:
    done = tidemq("consume", "-t", "T", "-g", "G", "-n", "1", "--timeout", "10", "--namesrv", "127.0.0.1:1")
    assert done.returncode == 1
    assert "name server unreachable" in one_line_error(done)
    assert "consumed" not in done.stderr


def test_group_progress_of_an_unknown_group_says_so(server: ServerProcess) -> None:
    ns = ["--namesrv", server.namesrv]
    for args in (["NoSuchGroupAtAll"], ["NoSuchGroupAtAll", "--topic", "TBW102"]):
        done = tidemq("group", "progress", *args, *ns)
        assert done.returncode == 1 and done.stdout == ""
        assert "has no committed offsets" in one_line_error(done)


def test_consume_prints_bodies_as_text_escaping_only_what_is_not_utf8(server: ServerProcess) -> None:
    topic, ns = unique("CliText"), ["--namesrv", server.namesrv]
    bodies = "h\u00e9llo w\u00f6rld\n".encode() + b"raw \xff\xfe end\n"
    sent = tidemq("produce", "-t", topic, *ns, stdin=bodies)
    assert sent.returncode == 0, sent.stderr
    group = unique("G")
    got = tidemq("consume", "-t", topic, "-g", group, "--from", "first", "-n", "2", "--timeout", "30", *ns)
    assert got.returncode == 0, got.stderr
    lines = sorted(got.stdout.splitlines())
    assert any(line.endswith(" h\u00e9llo w\u00f6rld") for line in lines), lines
    assert any(line.endswith(" raw \\xff\\xfe end") for line in lines), lines
    assert "b'" not in got.stdout


def test_message_query_max_and_the_notice_when_cut(server: ServerProcess) -> None:
    topic, ns = unique("CliMany"), ["--namesrv", server.namesrv]
    assert tidemq("produce", "-t", topic, "--keys", "same", "-n", "40", "--size", "4", *ns).returncode == 0
    everything = tidemq("message", "query", "--topic", topic, "--key", "same", *ns)
    assert everything.returncode == 0 and len(everything.stdout.splitlines()) == 40, "not cut at 32"
    assert "more than" not in everything.stderr
    cut = tidemq("message", "query", "--topic", topic, "--key", "same", "--max", "5", *ns)
    assert cut.returncode == 0 and len(cut.stdout.splitlines()) == 5
    assert "more than 5 messages" in cut.stderr


def test_help_texts() -> None:
    for command in (["message", "get"], ["message", "query"]):
        text = tidemq(*command, "--help").stdout
        assert "Print" in text.split("Options:")[0], text
    assert "('\\n')" not in tidemq("nsq", "publish", "--help").stdout
    consume = " ".join(tidemq("consume", "--help").stdout.split())
    assert "still in the broker's memory (under 40% of RAM" in consume
    assert "SIGTERM" in consume and "exits 0" in consume
