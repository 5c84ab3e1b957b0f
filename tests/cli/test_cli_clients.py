"""The client side of the ``tidemq`` command, run as a user would, against a real server."""

from __future__ import annotations

import json

import pytest

from tests.support import ServerProcess, tidemq_cli

pytestmark = pytest.mark.e2e

tidemq = tidemq_cli


def test_produce_consume_and_progress_round_trip(server: ServerProcess) -> None:
    ns = ["--namesrv", server.namesrv]
    created = tidemq("topic", "create", "CliTopic", "--queues", "2", *ns)
    assert created.returncode == 0 and "2 queues on broker-a" in created.stdout
    produced = tidemq(
        "produce",
        "-t",
        "CliTopic",
        "--tag",
        "T1",
        "--keys",
        "key-{i}",
        "--format",
        "json",
        *ns,
        stdin="alpha\nbeta\n\ngamma\n",
    )
    assert produced.returncode == 0, produced.stderr
    acks = [json.loads(line) for line in produced.stdout.splitlines()]
    assert len(acks) == 3 and all(a["topic"] == "CliTopic" and a["status"] == "SEND_OK" for a in acks)
    assert {a["queue"] for a in acks} <= {0, 1}
    synthetic = tidemq("produce", "-t", "CliTopic", "-n", "20", "--size", "16", *ns)
    assert synthetic.returncode == 0 and "sent 20 messages" in synthetic.stderr

    consumed = tidemq(
        "consume", "-t", "CliTopic", "-g", "CliGroup", "--from", "first", "-n", "10", "--format", "json", *ns
    )
    assert consumed.returncode == 0, consumed.stderr
    records = [json.loads(line) for line in consumed.stdout.splitlines()]
    assert len(records) == 10
    assert {"topic", "broker", "queue", "offset", "msg_id", "keys", "tags", "body", "reconsume_times"} <= set(
        records[0]
    )
    seen = {(r["queue"], r["offset"]) for r in records}
    assert len(seen) == 10

    progress = tidemq("group", "progress", "CliGroup", "--format", "json", *ns)
    rows = [json.loads(line) for line in progress.stdout.splitlines()]
    assert sum(r["consumer_offset"] for r in rows if r["topic"] == "CliTopic") == 10
    assert sum(r["lag"] for r in rows if r["topic"] == "CliTopic") == 13
    rest = tidemq("consume", "-t", "CliTopic", "-g", "CliGroup", "-n", "13", "--format", "json", *ns)
    assert len(rest.stdout.splitlines()) == 13
    assert not {(r["queue"], r["offset"]) for r in map(json.loads, rest.stdout.splitlines())} & seen, (
        "no message twice"
    )

    assert sorted(a["i"] for a in acks) == [0, 1, 2], "each ack names its input line"
    one = next(a for a in acks if a["i"] == 0)
    by_id = tidemq("message", "get", "--id", one["offset_msg_id"], *ns)
    assert by_id.returncode == 0 and json.loads(by_id.stdout)["body"] == "alpha"
    by_uniq = tidemq("message", "get", "--id", one["msg_id"], "--topic", "CliTopic", *ns)
    assert by_uniq.returncode == 0 and json.loads(by_uniq.stdout)["keys"] == "key-0"
    by_key = tidemq("message", "query", "--topic", "CliTopic", "--key", "key-2", *ns)
    assert json.loads(by_key.stdout.splitlines()[0])["body"] == "gamma"

    listing = tidemq("topic", "list", *ns)
    assert "CliTopic" in listing.stdout.split()
    route = json.loads(tidemq("topic", "route", "CliTopic", *ns).stdout)
    assert route["queues"][0]["write"] == 2
    stats = tidemq("topic", "stats", "CliTopic", *ns)
    assert "broker-a" in stats.stdout and len(stats.stdout.splitlines()) == 3


def test_clear_errors(server: ServerProcess) -> None:
    unreachable = tidemq("produce", "-t", "T", "-n", "1", "--namesrv", "127.0.0.1:1")
    assert unreachable.returncode == 1 and "name server unreachable" in unreachable.stderr
    assert "Traceback" not in unreachable.stderr
    missing = tidemq("topic", "route", "NoSuchTopicAtAll", "--namesrv", server.namesrv)
    assert missing.returncode == 1 and "does not exist" in missing.stderr
    bad_id = tidemq("message", "get", "--id", "not-an-id", "--namesrv", server.namesrv)
    assert bad_id.returncode == 1 and "--topic" in bad_id.stderr
    timeout = tidemq(
        "consume", "-t", "EmptyTopic", "-g", "G", "-n", "1", "--timeout", "1", "--namesrv", server.namesrv
    )
    assert timeout.returncode == 2
