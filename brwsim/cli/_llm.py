"""``brwsim llm``: every measurement of the project on a real language model (docs/llm.md).

``brwsim llm --model NAME_OR_PATH --prompts SOURCE --n N --P LIST [--json]``

NAME_OR_PATH: ``smollm2-135m`` (shipped default), ``gemma3-270m``, a
transformers model directory, a ``.gguf`` file, or a saved-logits ``.npz``.
SOURCE: ``humaneval``, ``pydoc`` or a ``.jsonl`` file (comma-separated for
several); N prompts per task. Per task it prints mu, mu_2 and, per P, the
real oracle E[X] (mean over prompts, 95% CI), the i.i.d. surrogate, the
rigorous bounds and, labelled apart, the i.i.d.-only closed forms. This
module imports without torch: the extra is checked when run.
"""

from __future__ import annotations

import dataclasses
import sys

from .. import _interrupts as interrupts
from ..llm import require_llm
from ..llm.drafters import print_drafters
from ..llm.results import RunResult
from ..llm.run import RunOptions, run_llm
from ..speedup import drafter_names, model_names, prompt_names
from ._args import P_list, emit
from ._simulate import interrupted_by
from ._table import bound_cells, bound_groups, bound_header, bound_notes, fmt, group_header


def print_llm(r: RunResult, out=None) -> None:
    """The table of a real-model run, printed from its typed result."""
    out = out or sys.stdout
    st = r.settings
    T = st.get("temperature", 1.0)
    head = f"model {r.model} (vocab {r.vocab_size}), prompts {st['prompts']}, T = {T:g}"
    print(f"{head}, {st['convention']}", file=out)
    if st.get("interrupted"):
        print(f"(interrupted: {st['prompts_finished']} of {st['prompts_requested']} prompts finished)", file=out)
    nan = float("nan")
    for t in r.tasks:
        w = t.walks
        print(
            f"task {t.task}: {t.prompts} prompts, mu = {w.get('mu', nan):.4f} +- {w.get('mu_ci95', nan):.4f}, "
            f"mu_2 = {w.get('mu2', nan):.4f} +- {w.get('mu2_ci95', nan):.4f} (nats, along {w.get('walks', 0)} "
            "sampled continuations)",
            file=out,
        )
        groups = bound_groups([row.bounds for row in t.rows])
        head = f"{'P':>5} {'oracle':>9} {'+-95%':>7} {'surrogate':>9}"
        if groups:  # a line naming the bound columns' groups, where there are any
            print(group_header(len(head), groups), file=out)
        print(head + bound_header(groups), file=out)
        for row in t.rows:
            line = f"{row.P:>5} {fmt(row.mean)} {fmt(row.ci95, 7)} {fmt(row.surrogate)}"
            print(line + bound_cells(row.bounds, groups), file=out)
        for note in bound_notes(groups):
            print(note, file=out)
        print_drafters(t, out)
    tm = r.timing
    if tm is not None:
        per = tm.host_bytes_per_node
        moved = f"; {per / 1024:.1f} KiB per node from the model's device to the host" if per else ""
        print(
            f"model phase {tm.model_phase_seconds:.1f} s, {100 * (tm.forward_fraction or 0):.0f}% in forward "
            f"passes; load {tm.load_seconds:.1f} s; total {tm.total_seconds:.1f} s{moved}",
            file=out,
        )


def options(args) -> RunOptions:
    """The :class:`RunOptions` of ``brwsim llm``'s arguments (checked: one-line errors)."""
    names = [f.name for f in dataclasses.fields(RunOptions) if f.name not in ("P", "drafters")]
    kw = {k: getattr(args, k) for k in names}
    return RunOptions(P=tuple(P_list(args.P)), drafters=tuple(args.drafter or ()), **kw).checked()


def _cmd(args) -> int:
    opts = options(args)
    if not (args.model.startswith("file:") or args.model.lower().endswith(".npz")):
        require_llm()
    log = None if args.json else (lambda m: print(m, file=sys.stderr))
    res = run_llm(opts, log=log)
    d = res.to_dict()
    code = emit(args, d, lambda _: print_llm(res))
    if not d.get("interrupted"):
        return code
    sys.stdout.flush()
    sys.stderr.write(
        f"brwsim: interrupted{interrupted_by()} after {d['prompts_finished']} of {d['prompts_requested']} "
        "prompts: the results above are those of the finished prompts\n"
    )
    return interrupts.exit_status()


def add_parser(sub) -> None:
    s = sub.add_parser("llm", help="real-model token trees: mu, mu_2, real oracle E[X], i.i.d. surrogate, bounds")
    s.add_argument("--model", default="smollm2-135m", help=f"{model_names()}, a model dir, .gguf or .npz")
    s.add_argument("--prompts", default="humaneval", help=f"{prompt_names()} (comma-separated)")
    s.add_argument("--n", type=int, default=8, help="prompts per task (evenly spaced; default 8)")
    s.add_argument("--P", default="1,2,4,8,16,32,64", help="verifier budgets (default 1,2,4,...,64)")
    s.add_argument("--walks", type=int, default=16, help="sampled continuations per prompt (default 16)")
    s.add_argument("--depth", type=int, default=48, help="tokens per continuation (default 48)")
    s.add_argument("--seed", type=int, default=0, help="seed of the continuations and the surrogate (default 0)")
    s.add_argument("--trees", type=int, default=2000, help="i.i.d. surrogate trees (default 2000)")
    s.add_argument("--batch", type=int, default=4, help="tree nodes per oracle pass (default 4)")
    s.add_argument(
        "--prompt-batch",
        type=int,
        default=8,
        help="prompts measured together, their passes packed into one (default 8; 1: one at a time)",
    )
    s.add_argument("--dtype", default="float32", help="float32 (default) or bfloat16")
    s.add_argument("--threads", type=int, default=1, help="torch threads (default 1; see docs/llm.md)")
    s.add_argument(
        "--device", default="auto", help="torch device: auto (a GPU if torch sees one, else cpu), cpu, cuda[:N], mps"
    )
    s.add_argument("--max-prompt-tokens", type=int, default=384, help="keep the last N prompt tokens (default 384)")
    s.add_argument("--save-pool", default=None, help="directory to keep each task's surrogate pool .npz")
    s.add_argument("--record", default=None, help="save every log-prob row asked to this .npz (saved-logits file)")
    s.add_argument(
        "--drafter",
        action="append",
        default=None,
        help=f"a real drafter SPEC (repeatable): {drafter_names()} (docs/drafters.md)",
    )
    s.add_argument("--temperature", type=float, default=1.0, help="target and drafters at temperature T (default 1)")
    s.add_argument("--check-samples", type=int, default=200, help="speculative calls per prompt, direct check")
    s.add_argument("--heldout-tokens", type=int, default=256, help="held-out positions per drafter (default 256)")
    s.add_argument("--check-P", type=int, default=32, help="budget P of the direct check's tree (default 32)")
    s.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    s.set_defaults(func=_cmd)
