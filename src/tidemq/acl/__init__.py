"""The plain ACL's accounts, shared by every front-end that checks them
(docs/protocols/rocketmq-remoting.md#acl, docs/protocols/nsq-nsqd.md#auth-from-the-acl-file).

Java 4.9's ``plain_acl.yml``: reading the file, the accounts and their permission bits, white address
patterns, and the watcher that reloads the file when it changes. How a request proves who it is and which
permission it needs is each front-end's business (the broker's signature check, nsqd's AUTH), so this
package imports nothing of tidemq but ``aio`` (and may use ``record`` and ``address``).
"""

from tidemq.acl.accounts import (
    ANY,
    DENY,
    PUB,
    SUB,
    Account,
    AclRules,
    AclWatcher,
    check_permission,
    parse_perm,
    read_acl_file,
)
from tidemq.acl.file import AclFileError

__all__ = [
    "ANY",
    "DENY",
    "PUB",
    "SUB",
    "Account",
    "AclFileError",
    "AclRules",
    "AclWatcher",
    "check_permission",
    "parse_perm",
    "read_acl_file",
]
