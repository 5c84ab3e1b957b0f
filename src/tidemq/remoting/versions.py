"""RocketMQ version codes and their names: a remoting header's ``version`` (and a consumer connection's,
a broker runtime's) is an index into Java's ``MQVersion.Version`` enum, which rocketmq-dashboard shows by
name (``V4_9_8``). The enum is regular enough to generate: 3.0.0's pre-releases, then a ``_SNAPSHOT`` and
a release for every patch of 3.0.1..3.0.15, 3.1.x, 3.2.x, 3.3.1..3.9.9 (no .0 patch) and 4.0.0..5.9.9."""

from __future__ import annotations

HIGHER_VERSION = "HIGHER_VERSION"


def _names() -> tuple[str, ...]:
    betas = [f"BETA{n}" for n in range(1, 6)]
    for n in range(6, 10):
        betas += [f"BETA{n}_SNAPSHOT", f"BETA{n}"]
    names = [f"V3_0_0_{s}" for s in ("SNAPSHOT", "ALPHA1", *betas, "FINAL")]
    releases = [(3, 0, p) for p in range(1, 16)]
    releases += [(3, minor, p) for minor in (1, 2) for p in range(10)]
    releases += [(3, minor, p) for minor in range(3, 10) for p in range(1, 10)]
    releases += [(major, minor, p) for major in (4, 5) for minor in range(10) for p in range(10)]
    for major, minor, patch in releases:
        names += [f"V{major}_{minor}_{patch}_SNAPSHOT", f"V{major}_{minor}_{patch}"]
    return (*names, HIGHER_VERSION)


NAMES = _names()


def version_name(code: int) -> str:
    """``MQVersion.getVersionDesc``: the name of a version code; a code past the table is the newest
    name (HIGHER_VERSION), a negative one has none (its number is shown as is)."""
    if code < 0:
        return str(code)
    return NAMES[min(code, len(NAMES) - 1)]


def version_code(name: str) -> int:
    """The code of a version name (``V5_3_3`` -> 479), for clients that announce a version."""
    return NAMES.index(name)
