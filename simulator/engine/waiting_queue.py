"""The scheduler's waiting queue, with admission from its head in time independent of its length.

SGLang keeps ``Scheduler.waiting_queue`` as a Python list and rebuilds it after every prefill
batch (``_get_new_batch_prefill_raw``: the requests not in ``can_run_list``). Under an open loop
that outruns the server the queue holds most of the trace (about 950,000 requests of a
1,000,000-request Mooncake trace at 280 req/s against 15 served), and rebuilding it per batch
made a run quadratic in the trace. The admitted requests are always the queue's head, in order
(``PrefillAdder`` takes them in queue order and stops at the first it refuses), so removing them
from the front of a deque leaves the same queue as the rebuild, in O(admitted).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from itertools import islice
from typing import Any

from simulator.engine.server_state import ServerReq


class WaitingQueue(deque):
    """A deque of :class:`ServerReq` that also answers the list operations the scheduler uses:
    slices (read from the nearer end, so the head's 128 or the last arrivals cost only what they
    return) and a stable ``sort`` (LPM orders at most 128 requests)."""

    __slots__ = ()

    def __getitem__(self, index: Any) -> Any:
        if not isinstance(index, slice):
            return deque.__getitem__(self, index)
        n = len(self)
        start, stop, step = index.indices(n)
        if step != 1:
            return list(self)[index]
        if stop <= start:
            return []
        if n - start < stop:  # nearer the right end: walk back from it
            tail = list(islice(reversed(self), n - start))
            tail.reverse()
            return tail[: stop - start]
        return list(islice(self, start, stop))

    def sort(self, *, key: Callable[[ServerReq], Any] | None = None, reverse: bool = False) -> None:
        """``list.sort`` (stable) in place."""
        items = sorted(self, key=key, reverse=reverse)
        self.clear()
        self.extend(items)

    def pop(self, index: int = -1) -> ServerReq:
        """``list.pop``: the head and the tail in O(1), elsewhere by rotation."""
        if index in (0, -len(self)):
            return self.popleft()
        if index == -1:
            return deque.pop(self)
        item = deque.__getitem__(self, index)
        del self[index]
        return item

    def remove_admitted(self, admitted: Iterable[ServerReq]) -> None:
        """Drop a prefill batch's admitted requests (``waiting_queue = [x for x in waiting_queue
        if x not in can_run_list]``): popped from the head when they are its first requests in
        order, as admission takes them; otherwise filtered out of the whole queue."""
        admitted = list(admitted)
        n = len(admitted)
        if n <= len(self) and _is_head(admitted, self):
            popleft = self.popleft
            for _ in range(n):
                popleft()
            return
        taken = set(map(id, admitted))
        kept = [r for r in self if id(r) not in taken]
        self.clear()
        self.extend(kept)


def _is_head(admitted: list, queue: Iterable) -> bool:
    """Whether ``admitted`` is the start of ``queue``, element by element (identity)."""
    i = 0
    n = len(admitted)
    for r in queue:
        if i == n:
            break
        if admitted[i] is not r:
            return False
        i += 1
    return True
