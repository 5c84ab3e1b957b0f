"""Which permission each RocketMQ request needs (Java 4.9's PlainAccessResource.parse and checkPerm).

Pure functions over a request and an account, so they are tested without a broker. A group is a
resource too, written as its retry topic (``%RETRY%group``) as Java does, which is how ``groupPerms``
and ``defaultGroupPerm`` apply to it.
"""

from __future__ import annotations

from typing import Any

from tidemq.acl import PUB, SUB, Account, check_permission
from tidemq.remoting import jsonx
from tidemq.remoting.codes import RequestCode
from tidemq.remoting.command import RemotingCommand
from tidemq.remoting.names import RETRY_PREFIX

#: Codes only an admin account may send (Java's Permission.ADMIN_CODE; 25 is UPDATE_BROKER_CONFIG).
ADMIN_CODES = frozenset(
    {
        RequestCode.UPDATE_AND_CREATE_TOPIC,
        25,
        RequestCode.DELETE_TOPIC_IN_BROKER,
        RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
        RequestCode.DELETE_SUBSCRIPTIONGROUP,
    }
)


class AclDenied(Exception):
    """A request the ACL refuses; the message is the remark, worded as Java's AclException."""


def group_resource(group: str) -> str:
    return RETRY_PREFIX + group


def describe(resource: str) -> str:
    """Java's printStr: ``group:G`` for a group's resource, ``topic:T`` otherwise."""
    if resource.startswith(RETRY_PREFIX):
        return f"group:{resource[len(RETRY_PREFIX) :]}"
    return f"topic:{resource}"


def _add(needed: dict[str, int], resource: str | None, perm: int) -> None:
    if resource:
        needed[resource] = needed.get(resource, 0) | perm


def _send(needed: dict[str, int], topic: str | None, group: str | None) -> None:
    # A consumer's fallback resend goes to its retry topic: that needs SUB on the group, not PUB.
    if topic and topic.startswith(RETRY_PREFIX):
        _add(needed, group_resource(group or ""), SUB)
    else:
        _add(needed, topic, PUB)


def needed_resources(request: RemotingCommand) -> dict[str, int]:
    """What ``request`` touches and the permission each needs (Java's PlainAccessResource.parse)."""
    ext = request.ext_fields
    needed: dict[str, int] = {}
    code = request.code
    group = ext.get("consumerGroup")
    if code == RequestCode.SEND_MESSAGE:
        _send(needed, ext.get("topic"), ext.get("producerGroup"))
    elif code in (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE):
        # Java 4.9 leaves batches unchecked; they carry either header, so both spellings are read.
        _send(needed, ext.get("b") or ext.get("topic"), ext.get("a") or ext.get("producerGroup"))
    elif code == RequestCode.CONSUMER_SEND_MSG_BACK:
        _add(needed, ext.get("originTopic"), PUB)
        _add(needed, group_resource(ext.get("group") or ""), SUB)
    elif code == RequestCode.PULL_MESSAGE:
        _add(needed, ext.get("topic"), SUB)
        _add(needed, group and group_resource(group), SUB)
    elif code == RequestCode.QUERY_MESSAGE:
        _add(needed, ext.get("topic"), SUB)
    elif code == RequestCode.HEART_BEAT and request.body:
        data: Any = jsonx.loads(bytes(request.body))
        for consumer in data.get("consumerDataSet") or []:
            _add(needed, group_resource(str(consumer.get("groupName") or "")), SUB)
            for sub in consumer.get("subscriptionDataSet") or []:
                _add(needed, str(sub.get("topic") or ""), SUB)
    elif code in (RequestCode.UNREGISTER_CLIENT, RequestCode.GET_CONSUMER_LIST_BY_GROUP):
        _add(needed, group and group_resource(group), SUB)
    elif code == RequestCode.UPDATE_CONSUMER_OFFSET:
        _add(needed, group and group_resource(group), SUB)
        _add(needed, ext.get("topic"), SUB)
    return needed


def check_account_perms(account: Account, code: int, needed: dict[str, int]) -> None:
    """Java's checkPerm: admin-only codes, then each resource against its own or the default permission."""
    if code in ADMIN_CODES and not account.admin:
        raise AclDenied(
            f"Need admin permission for request code={code}, but accessKey={account.access_key} is not"
        )
    if account.unrestricted:
        return
    for resource, perm in needed.items():
        if resource.startswith(RETRY_PREFIX):
            # One map in Java: a topicPerms entry spelled as the retry topic counts, groupPerms first.
            group = resource[len(RETRY_PREFIX) :]
            fallback = account.topic_perms.get(resource, account.default_group_perm)
            owned = account.group_perms.get(group, fallback)
        else:
            owned = account.topic_perm(resource)
        if not check_permission(perm, owned):
            # Java 4.9.8 words both cases (own entry, default) alike; the account is named here too.
            raise AclDenied(f"No default permission for {describe(resource)}, accessKey={account.access_key}")
