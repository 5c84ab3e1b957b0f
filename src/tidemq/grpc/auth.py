"""The plain ACL on the gRPC endpoint (Java 5.0-5.2 proxy's AuthenticationInterceptor with ACL 1.0:
PlainAccessResource.parse for gRPC requests and PlainPermissionManager.validate).

A 5.x SDK with credentials signs every call the same way: ``x-mq-date-time`` (``yyyyMMdd'T'HHmmss'Z'``) and
``authorization: MQv2-HMAC-SHA1 Credential=<ak>, SignedHeaders=x-mq-date-time, Signature=<hex>``, the
signature being HMAC-SHA1 of the date-time text keyed by the secret key. As in Java, the date is not
checked against the clock (the SDKs send local time), global white addresses pass without headers, an
account's white address passes without a signature, and each request needs a permission on what it
touches (SendMessage: topic PUB; consumer RPCs: group and topic SUB; Telemetry settings: the publishing
topics PUB, the subscription's group and topics SUB). The permission rules themselves are the broker's
(acl_rules.check_account_perms), so a group is checked as its retry topic, where groupPerms apply.

Refusals are answered as a 5.3 proxy answers its auth failures, inside the response: UNAUTHORIZED (40100)
when the caller is not proven, FORBIDDEN (40300) when the account lacks the permission; a 5.1 proxy
closed the call with gRPC INTERNAL instead, which the SDKs retry as a network fault.

One server interceptor applies this to every RPC, so no handler has to remember it.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Callable, Sequence
from hashlib import sha1
from typing import Any

import grpc

from tidemq.acl import PUB, SUB, AclRules
from tidemq.broker.acl_rules import AclDenied, check_account_perms, group_resource
from tidemq.grpc.handlers import CheckingInterceptor, Context, Handler, checked_handler
from tidemq.grpc.proto import service_pb2 as spb
from tidemq.grpc.status import Code, GrpcStatusError, status

log = logging.getLogger(__name__)

AUTHORIZATION = "authorization"
DATE_TIME = "x-mq-date-time"
ALGORITHM = "MQv2-HMAC-SHA1"
#: Not an admin code: the gRPC requests need only resource permissions.
NO_CODE = 0


def sign(secret_key: str, date_time: str) -> str:
    """The SDKs' signature: hex HMAC-SHA1 of the date-time text keyed by the secret key."""
    return hmac.new(secret_key.encode(), date_time.encode(), sha1).hexdigest()


def parse_authorization(header: str) -> tuple[str, str]:
    """``(access key, hex signature)`` from an ``authorization`` header; GrpcStatusError UNAUTHORIZED when
    it is not the MQv2-HMAC-SHA1 form (Java's AuthorizationHeader)."""
    algorithm, _, rest = header.strip().partition(" ")
    if algorithm != ALGORITHM or not rest:
        raise GrpcStatusError(Code.UNAUTHORIZED, f"authorization header is incorrect: expected {ALGORITHM}")
    access_key = signature = None
    for part in rest.split(","):
        key, sep, value = part.strip().partition("=")
        if not sep:
            raise GrpcStatusError(
                Code.UNAUTHORIZED, f"authorization keyValues is incorrect: {part.strip()!r}"
            )
        if key == "Credential":
            access_key = value.split("/")[0]
        elif key == "Signature":
            signature = value
    if not access_key:
        raise GrpcStatusError(Code.UNAUTHORIZED, "No accessKey is configured")
    if signature is None:
        raise GrpcStatusError(
            Code.UNAUTHORIZED, f"no Signature in the authorization of accessKey={access_key}"
        )
    return access_key, signature


def needed_resources(method: str, request: Any) -> dict[str, int]:
    """What a request touches and the permission each needs (Java's PlainAccessResource.parse for gRPC,
    with ChangeInvisibleDuration checked like AckMessage)."""
    needed: dict[str, int] = {}

    def add(resource: str, perm: int) -> None:
        if resource:
            needed[resource] = needed.get(resource, 0) | perm

    def group(name: str) -> None:
        if name:
            add(group_resource(name), SUB)

    if isinstance(request, spb.SendMessageRequest):
        for msg in request.messages:
            add(msg.topic.name, PUB)
    elif isinstance(request, spb.EndTransactionRequest):
        add(request.topic.name, PUB)
    elif isinstance(request, spb.HeartbeatRequest):
        if request.HasField("group"):
            group(request.group.name)
    elif isinstance(request, spb.ReceiveMessageRequest):
        group(request.group.name)
        add(request.message_queue.topic.name, SUB)
    elif isinstance(
        request,
        spb.AckMessageRequest
        | spb.ChangeInvisibleDurationRequest
        | spb.ForwardMessageToDeadLetterQueueRequest,
    ):
        group(request.group.name)
        add(request.topic.name, SUB)
    elif isinstance(request, spb.TelemetryCommand) and request.HasField("settings"):
        settings = request.settings
        if settings.HasField("publishing"):
            for topic in settings.publishing.topics:
                add(topic.name, PUB)
        if settings.HasField("subscription"):
            group(settings.subscription.group.name)
            for entry in settings.subscription.subscriptions:
                add(entry.topic.name, SUB)
    return needed


def peer_ip(peer: str) -> str:
    """The address of grpc's ``ipv4:1.2.3.4:5`` / ``ipv6:[::1]:5`` peer, as white lists match it."""
    _, _, address = peer.partition(":")
    host = address.rpartition(":")[0].strip("[]")
    return host[7:] if host.startswith("::ffff:") else host


def validate(rules: AclRules, metadata: dict[str, str], ip: str, method: str, request: Any) -> None:
    """Raise GrpcStatusError (UNAUTHORIZED / FORBIDDEN) unless the request may pass."""
    if rules.globally_white(ip):
        return
    header, date_time = metadata.get(AUTHORIZATION), metadata.get(DATE_TIME)
    if not header or not date_time:
        raise GrpcStatusError(
            Code.UNAUTHORIZED, f"{method} needs the {AUTHORIZATION} and {DATE_TIME} headers: ACL is on"
        )
    access_key, signature = parse_authorization(header)
    account = rules.accounts.get(access_key)
    if account is None:
        raise GrpcStatusError(Code.UNAUTHORIZED, f"No acl config for {access_key}")
    if account.white_address(ip):
        return
    if not hmac.compare_digest(signature.lower(), sign(account.secret_key, date_time)):
        raise GrpcStatusError(Code.UNAUTHORIZED, f"Check signature failed for accessKey={access_key}")
    try:
        check_account_perms(account, NO_CODE, needed_resources(method, request))
    except AclDenied as exc:
        raise GrpcStatusError(Code.FORBIDDEN, f"{method}: {exc}") from None


Rules = Callable[[], AclRules]


class AclInterceptor(CheckingInterceptor):
    """Checks every call against the rules in force; a refusal is the RPC's own response with the status
    (for Telemetry, a command with it, and the stream ends)."""

    def __init__(self, rules: Rules) -> None:
        self.rules = rules

    def wrap(self, handler: Handler, method: str, details: grpc.HandlerCallDetails) -> Handler:
        metadata = _metadata(details.invocation_metadata)
        answer = getattr(spb, f"{method}Response", spb.TelemetryCommand)

        async def refusal(request: Any, context: Context) -> Any:
            try:
                validate(self.rules(), metadata, peer_ip(context.peer() or ""), method, request)
            except GrpcStatusError as exc:
                log.warning("acl: refused %s from %s: %s", method, context.peer(), exc.message)
                return answer(status=status(exc.code, exc.message))
            return None

        return checked_handler(handler, refusal)


def _metadata(pairs: Sequence[tuple[str, str | bytes]] | None) -> dict[str, str]:
    return {k: v for k, v in pairs or () if isinstance(v, str)}
