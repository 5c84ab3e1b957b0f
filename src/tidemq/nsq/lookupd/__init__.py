"""An nsqlookupd-compatible discovery server (docs/protocols/nsq-lookupd.md): nsqd registers over TCP, clients
look up over HTTP.

Owns the registration database and both listeners. Imports only the shared NSQ codec at ``tidemq.nsq``
level (protocol, http); never ``nsq/nsqd/``, ``nsq/client/`` or ``store/``.
"""

from tidemq.nsq.lookupd.registry import PeerInfo, RegistrationDB
from tidemq.nsq.lookupd.server import LookupdConfig, Nsqlookupd

__all__ = ["LookupdConfig", "Nsqlookupd", "PeerInfo", "RegistrationDB"]
