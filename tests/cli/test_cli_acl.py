"""The client commands against ``tidemq server --acl-file``: keys from options or the environment, both
or neither, and one ``Error:`` line when the broker refuses."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import ServerProcess, tidemq_cli, unique

pytestmark = pytest.mark.e2e

TOPIC = unique("CliAcl")
ACL = f"""\
accounts:
  - accessKey: cli-admin
    secretKey: cli-admin-secret
    admin: true
  - accessKey: cli-user
    secretKey: cli-user-secret
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - {TOPIC}=PUB|SUB
"""
USER = ["--access-key", "cli-user", "--secret-key", "cli-user-secret"]
_KEY_VARS = ("TIDEMQ_ACCESS_KEY", "TIDEMQ_SECRET_KEY", "ROCKETMQ_ACCESS_KEY", "ROCKETMQ_SECRET_KEY")


@pytest.fixture(scope="module")
def acl_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    folder = tmp_path_factory.mktemp("cli-acl")
    acl = folder / "plain_acl.yml"
    acl.write_text(ACL)
    proc = ServerProcess(folder / "data", "--acl-file", str(acl)).start()
    yield proc
    proc.stop()


def tidemq(
    *args: str, env: dict[str, str] | None = None, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """The command with no key variables from the test's own environment, plus ``env``."""
    base = {k: v for k, v in os.environ.items() if k not in _KEY_VARS}
    return tidemq_cli(*args, env=base | (env or {}), stdin=stdin)


def one_error(done: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1, done.stderr[-3000:]
    return errors[0]


def test_signed_commands_work_and_unsigned_ones_get_one_error_line(acl_server: ServerProcess) -> None:
    ns = ["--namesrv", acl_server.namesrv]
    admin_env = {"TIDEMQ_ACCESS_KEY": "cli-admin", "TIDEMQ_SECRET_KEY": "cli-admin-secret"}
    created = tidemq("topic", "create", TOPIC, "--queues", "2", *ns, env=admin_env)
    assert created.returncode == 0, created.stderr

    refused = tidemq("topic", "create", unique("CliAclNot"), *ns, *USER)
    assert refused.returncode == 1 and "NO_PERMISSION" in one_error(refused)

    sent = tidemq("produce", "-t", TOPIC, "-n", "4", "--keys", "acl-key", "--format", "json", *ns, *USER)
    assert sent.returncode == 0, sent.stderr
    assert len(sent.stdout.splitlines()) == 4

    unsigned = tidemq("produce", "-t", TOPIC, "-n", "1", *ns)
    assert unsigned.returncode == 1 and "NO_PERMISSION" in one_error(unsigned)
    forged = tidemq("produce", "-t", TOPIC, "-n", "1", *ns, "--access-key", "cli-user", "--secret-key", "x")
    assert forged.returncode == 1 and "Check signature failed" in one_error(forged)

    rocketmq_env = {"ROCKETMQ_ACCESS_KEY": "cli-user", "ROCKETMQ_SECRET_KEY": "cli-user-secret"}
    got = tidemq(
        "consume", "-t", TOPIC, "-g", unique("CliAclG"), "--from", "first", "-n", "4", "--timeout", "30",
        "--format", "json", *ns, env=rocketmq_env,
    )  # fmt: skip
    assert got.returncode == 0, got.stderr
    assert {json.loads(line)["keys"] for line in got.stdout.splitlines()} == {"acl-key"}

    unsigned_consume = tidemq(
        "consume", "-t", TOPIC, "-g", unique("CliAclG"), "-n", "1", "--timeout", "30", *ns
    )
    assert unsigned_consume.returncode == 1 and "NO_PERMISSION" in one_error(unsigned_consume)
    assert "consumed" not in unsigned_consume.stderr

    found = tidemq("message", "query", "--topic", TOPIC, "--key", "acl-key", *ns, *USER)
    assert found.returncode == 0 and len(found.stdout.splitlines()) == 4, found.stderr
    not_found = tidemq("message", "query", "--topic", TOPIC, "--key", "acl-key", *ns)
    assert not_found.returncode == 1 and "NO_PERMISSION" in one_error(not_found)


@pytest.mark.parametrize(
    "args, env, option",
    [
        (["topic", "list", "--access-key", "cli-user"], {}, "--secret-key"),
        (["produce", "-t", "T", "-n", "1", "--secret-key", "s"], {}, "--access-key"),
        (["consume", "-t", "T", "-g", "G"], {"TIDEMQ_ACCESS_KEY": "cli-user"}, "--secret-key"),
        (["message", "query", "--topic", "T", "--key", "k"], {"ROCKETMQ_SECRET_KEY": "s"}, "--access-key"),
    ],
)
def test_half_a_key_pair_is_one_line_naming_the_missing_option(
    args: list[str], env: dict[str, str], option: str, tmp_path: Path
) -> None:
    done = tidemq(*args, "--namesrv=127.0.0.1:1", env=env)
    assert done.returncode == 2, done.stderr[-3000:]
    assert option in one_error(done)
