"""Fixtures shared by the NSQ tests: a real ``tidemq nsqlookupd`` and a test CA for TLS sessions."""

from __future__ import annotations

import ssl
from collections.abc import Iterator

import pytest
import trustme

from tests.nsq_support import LookupdProcess, trusting


@pytest.fixture(scope="module")
def lookupd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LookupdProcess]:
    """One real ``tidemq nsqlookupd`` process per test module; it must stop cleanly."""
    proc = LookupdProcess(tmp_path_factory.mktemp("lookupd") / "data").start()
    yield proc
    assert proc.stop() == 0


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
def client_tls(ca: trustme.CA) -> ssl.SSLContext:
    """A client context that trusts certificates issued by ``ca``."""
    return trusting(ca)
