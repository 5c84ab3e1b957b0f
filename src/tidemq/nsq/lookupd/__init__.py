"""An nsqlookupd-compatible discovery server (docs/protocols/nsq-lookupd.md): nsqd registers over TCP, clients
look up over HTTP."""

from tidemq.nsq.lookupd.registry import PeerInfo, RegistrationDB
from tidemq.nsq.lookupd.server import LookupdConfig, Nsqlookupd

__all__ = ["LookupdConfig", "Nsqlookupd", "PeerInfo", "RegistrationDB"]
