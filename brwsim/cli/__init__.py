"""The ``brwsim`` command: ``simulate``, ``laws``, ``llm``, ``reproduce``.

``brwsim simulate --law SPEC --P LIST --trees N --seed S [--batch B] [--json]``
prints a readable table, or with ``--json`` exactly one JSON object (see
:meth:`brwsim.SimulationResult.to_dict`). Bad input: one line on stderr, exit
status 2. Each subcommand lives in its own module with ``add_parser``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys

from .. import _interrupts as interrupts
from .. import _processes as processes
from .._cache import enable_compilation_cache
from .._devices import one_cpu_device_per_core, shape_independent_numerics
from .._lowering import unrolled_threefry
from ..errors import BrwsimError
from . import _laws, _llm, _plan, _reproduce, _simulate

SUBCOMMANDS = (_simulate, _reproduce, _llm, _laws, _plan)


@contextlib.contextmanager
def _quiet_unless_main():
    """In a multi-process run only process 0 prints results (errors still go to every process's stderr)."""
    if processes.is_main():
        yield
        return
    with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):
        yield


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, status 2, no usage dump
        sys.stderr.write(f"{self.prog}: error: {message} (see {self.prog} --help)\n")
        sys.exit(2)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="brwsim", description="Monte Carlo speed-of-light for speculative decoding trees.")
    g = p.add_argument_group("one run over several processes or hosts (docs/scaling.md, 'Many processes')")
    g.add_argument("--coordinator", default=None, help="HOST:PORT of process 0 (or BRWSIM_COORDINATOR)")
    g.add_argument("--num-processes", type=int, default=None, help="processes in the run (or BRWSIM_NUM_PROCESSES)")
    g.add_argument("--process-id", type=int, default=None, help="this process, 0 .. N-1 (or BRWSIM_PROCESS_ID)")
    g.add_argument("--distributed", choices=["auto"], default=None, help="auto: JAX reads the cluster (SLURM...)")
    g.add_argument(
        "--join-timeout", type=int, default=processes.JOIN_S, help="seconds to wait for every process to join"
    )
    g.add_argument(
        "--heartbeat-timeout",
        type=int,
        default=processes.HEARTBEAT_S,
        help="a process silent this many seconds has failed: the others stop with one line naming it",
    )
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=_Parser)
    for module in SUBCOMMANDS:
        module.add_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    one_cpu_device_per_core()
    shape_independent_numerics()
    args = build_parser().parse_args(argv)
    with interrupts.installed():  # SIGTERM and SIGHUP stop a command as Ctrl-C does
        code = _run(args)
        if interrupts.received() is None:
            if code == 0:
                processes.succeeded()  # its peers do not read its ended heartbeats as a fault
        else:
            code = interrupts.exit_status() if code in (0, 130) else code  # never 0 after a signal
            if processes.several() and not interrupts.agreed():
                # this process stopped alone: JAX's exit would wait for the others, which wait for it; they
                # stop when it is gone, as after a fault
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
    return code


def _run(args) -> int:
    try:
        enable_compilation_cache()  # a second call of the command does not compile again
        processes.start(
            args.coordinator,
            args.num_processes,
            args.process_id,
            auto=args.distributed == "auto",
            timeout=args.join_timeout,
            heartbeat=args.heartbeat_timeout,
        )
        interrupts.install()  # again: JAX's distributed runtime sets a SIGTERM handler that swallows the signal
        with unrolled_threefry(), _quiet_unless_main():  # the whole run: same random bits, faster on CPU
            return args.func(args)
    except BrwsimError as e:
        sys.stderr.write(f"brwsim: error: {e}\n")
        return 2
    except KeyboardInterrupt:
        sig = interrupts.received()
        sys.stderr.write(f"brwsim: interrupted{'' if sig is None else ' by ' + interrupts.name(sig)} before "
                         "anything finished\n")  # fmt: skip
        return interrupts.exit_status()


__all__ = ["build_parser", "main"]
