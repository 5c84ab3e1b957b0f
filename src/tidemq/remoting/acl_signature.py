"""Plain-ACL request signing (docs/protocols/rocketmq-remoting.md#acl), shared by clients and the broker.

Both sides must build the signed content the same way, so it lives here, below both: the values of every
``extFields`` entry but ``Signature``, ordered by key, then the body; the signature is
Base64(HMAC-SHA1(secret key, content)), as Java's AclUtils/AclSigner compute it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping

from tidemq.remoting.command import RemotingCommand

#: extFields names of Java's SessionCredentials.
ACCESS_KEY = "AccessKey"
SECRET_KEY = "SecretKey"
SIGNATURE = "Signature"
SECURITY_TOKEN = "SecurityToken"
#: Java's MixAll.UNIQUE_MSG_QUERY_FLAG: added by the broker side after signing, so never signed.
UNIQUE_MSG_QUERY_FLAG = "_UNIQUE_KEY_QUERY"


def _java_order(key: str) -> list[int]:
    """Java's String.compareTo orders by UTF-16 code units, which differs from code points above U+FFFF."""
    data = key.encode("utf-16-be", "surrogatepass")
    return [int.from_bytes(data[i : i + 2], "big") for i in range(0, len(data), 2)]


def signed_content(ext_fields: Mapping[str, str], body: bytes | bytearray | memoryview) -> bytes:
    """What a signature covers: the values of ``ext_fields`` but the signature, by key, then the body."""
    keys = sorted(
        (k for k in ext_fields if k not in (SIGNATURE, UNIQUE_MSG_QUERY_FLAG)),
        key=_java_order,
    )
    return "".join(ext_fields[k] for k in keys).encode() + bytes(body)


def calc_signature(content: bytes, secret_key: str) -> str:
    """Java's AclUtils.calSignature: Base64 of HMAC-SHA1 keyed with the secret key's UTF-8 bytes."""
    digest = hmac.new(secret_key.encode(), content, hashlib.sha1).digest()
    return base64.b64encode(digest).decode("ascii")


def sign_request(
    request: RemotingCommand, access_key: str, secret_key: str, security_token: str | None = None
) -> None:
    """Add ``AccessKey`` (and ``SecurityToken``) and the ``Signature`` over them, as AclClientRPCHook does."""
    request.ext_fields[ACCESS_KEY] = access_key
    if security_token:
        request.ext_fields[SECURITY_TOKEN] = security_token
    request.ext_fields.pop(SIGNATURE, None)
    content = signed_content(request.ext_fields, request.body)
    request.ext_fields[SIGNATURE] = calc_signature(content, secret_key)
