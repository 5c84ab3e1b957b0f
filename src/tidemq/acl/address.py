"""White remote address patterns of the plain ACL (Java's RemoteAddressStrategyFactory).

A pattern is one of: empty (matches nothing), ``*`` (everything), an exact IPv4 address, a list in braces
(``192.168.0.{1,2}``), segments with ``*`` or ranges (``192.168.1.*``, ``192.168.1.1-5``), or, beyond
Java 4.9, a CIDR block (``10.0.0.0/8``). Bad patterns raise ValueError naming the pattern.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable

AddressMatcher = Callable[[str], bool]


def _octet(text: str, pattern: str) -> int:
    if not text.isdigit() or int(text) > 255:
        raise ValueError(f"bad white remote address {pattern!r}: {text!r} is not 0-255")
    return int(text)


def _segment(text: str, pattern: str) -> tuple[int, int]:
    """The inclusive range a segment allows."""
    if text == "*":
        return 0, 255
    low, sep, high = text.partition("-")
    if sep:
        a, b = _octet(low, pattern), _octet(high, pattern)
        if a > b:
            raise ValueError(f"bad white remote address {pattern!r}: range {text!r} is empty")
        return a, b
    value = _octet(text, pattern)
    return value, value


def _ipv4(address: str) -> list[int] | None:
    parts = address.split(".")
    if len(parts) != 4 or not all(p.isdigit() and int(p) <= 255 for p in parts):
        return None
    return [int(p) for p in parts]


def address_matcher(pattern: str) -> AddressMatcher:
    """Compile one pattern; see the module docstring."""
    pattern = pattern.strip()
    if not pattern:
        return lambda address: False
    if pattern in ("*", "*.*.*.*", "*:*:*:*:*:*:*:*"):
        return lambda address: True
    if "/" in pattern:
        try:
            network = ipaddress.ip_network(pattern, strict=False)
        except ValueError as exc:
            raise ValueError(f"bad white remote address {pattern!r}: {exc}") from None

        def in_network(address: str) -> bool:
            try:
                return ipaddress.ip_address(address) in network
            except ValueError:
                return False

        return in_network
    if "{" in pattern:
        prefix, _, rest = pattern.partition("{")
        if not rest.endswith("}") or not prefix.endswith("."):
            raise ValueError(f"bad white remote address {pattern!r}: expected e.g. 192.168.0.{{1,2}}")
        choices = {prefix + item.strip() for item in rest[:-1].split(",")}
        for choice in choices:
            if _ipv4(choice) is None:
                raise ValueError(f"bad white remote address {pattern!r}: {choice!r} is not an address")
        return choices.__contains__
    segments = pattern.split(".")
    if len(segments) != 4:
        try:
            exact = str(ipaddress.ip_address(pattern))
        except ValueError:
            raise ValueError(f"bad white remote address {pattern!r}") from None
        return lambda address: address == exact
    ranges = [_segment(s, pattern) for s in segments]

    def in_ranges(address: str) -> bool:
        octets = _ipv4(address)
        return octets is not None and all(lo <= o <= hi for o, (lo, hi) in zip(octets, ranges, strict=True))

    return in_ranges
