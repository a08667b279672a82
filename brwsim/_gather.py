"""Gathering a round across processes: every process's segment of trees, added by all in process order.

In a run of several processes (:mod:`brwsim._processes`) each process
computes one segment of a round's trees; :func:`shared_round` exchanges the
segments and every process adds all of them in process order, i.e. in tree
order, so every process holds the running sums one process would have, bit
for bit. A process that got an interrupting signal says so with its segment,
and every process stops after the same round (:mod:`brwsim._interrupts`).
"""

from __future__ import annotations

from . import _interrupts as interrupts
from . import _processes as processes


def shared_round(sums, run, lo: int, hi: int, seg: int, bar):
    """This process's segment (trees lo .. hi - 1 of ``run``, :meth:`brwsim.estimate.Run.values`) exchanged
    with the others' and every segment added to ``sums`` (:class:`brwsim._sums.Sums`) in process order;
    ``(process, signal)`` of the first process that got an interrupting signal, else None."""
    mine = list(run.values(lo, hi, seg)) if hi > lo else []
    if interrupts.received() is not None and not interrupts.agreed():  # told with the segment: all stop after it
        mine.append((None, (processes.index(), interrupts.received()), None))
    stop = None
    for part in processes.gather(mine):
        for cols, v, acc in part:
            if cols is None:
                stop = stop or v
                continue
            sums.add(cols, v, acc)
            bar.update(v.shape[0] if cols else 0)
    return stop


__all__ = ["shared_round"]
