"""The transaction service's scan position: how far the half and op queues are settled, so a start reads
only what lies past it (Java keeps the same two numbers as consumer offsets of the system group
CID_RMQ_SYS_TRANS; docs/protocols/rocketmq-messages.md#transactions).

The half position passes a half message once its transaction is decided, or once a newer copy of it (a
check's re-put) is stored; it stops at the newest copy of an open transaction, so an open one is always
read again at a start. The op position passes an op entry once no copy of its transaction is left at or
past the half position: nothing a start reads can need that decision any more.

This is the pure bookkeeping; the service decides what is open and when the positions are durable.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable


class TransactionScan:
    """The entries at or past each position, in queue order, with the transaction each belongs to (``None``
    for an entry that cannot be read: it never holds a position back)."""

    def __init__(self, half_position: int, op_position: int) -> None:
        self.half_position = half_position
        self.op_position = op_position
        self._halves: dict[int, str | None] = {}
        self._half_end = half_position
        self._ops: dict[int, str | None] = {}
        self._op_end = op_position
        #: Copies at or past the half position, per transaction.
        self._copies: Counter[str] = Counter()

    def half_stored(self, queue_offset: int, transaction_id: str | None) -> None:
        if queue_offset < self.half_position or queue_offset in self._halves:
            return
        self._halves[queue_offset] = transaction_id
        self._half_end = max(self._half_end, queue_offset + 1)
        if transaction_id is not None:
            self._copies[transaction_id] += 1

    def op_stored(self, queue_offset: int, transaction_id: str | None) -> None:
        if queue_offset < self.op_position or queue_offset in self._ops:
            return
        self._ops[queue_offset] = transaction_id
        self._op_end = max(self._op_end, queue_offset + 1)

    def next_half_position(self, is_open: Callable[[int, str], bool]) -> int:
        """The first half queue offset holding the newest copy of an open transaction, or the end of what
        was stored when none does. ``is_open(offset, transaction_id)`` says whether that copy is one."""
        for offset in range(self.half_position, self._half_end):
            tid = self._halves.get(offset)
            if tid is not None and is_open(offset, tid):
                return offset
        return self._half_end

    def advance(self, half_position: int) -> list[str]:
        """Move the half position to ``half_position`` (never back), then the op position over every op
        entry no longer needed; returns the transactions whose op entries were passed (forgettable)."""
        for offset in range(self.half_position, max(self.half_position, half_position)):
            tid = self._halves.pop(offset, None)
            if tid is not None:
                self._copies[tid] -= 1
                if self._copies[tid] <= 0:
                    del self._copies[tid]
        self.half_position = max(self.half_position, half_position)
        passed: list[str] = []
        while self.op_position < self._op_end:
            tid = self._ops.get(self.op_position)
            if tid is not None and tid in self._copies:
                break
            self._ops.pop(self.op_position, None)
            if tid is not None:
                passed.append(tid)
            self.op_position += 1
        return passed
