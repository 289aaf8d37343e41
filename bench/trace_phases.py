#!/usr/bin/python3
"""The weight broadcast and the gradient reduction of each training step,
from the traces of the daemons (their --trace files).

  trace_phases.py MEMORYX_TRACE WSE_NODE_TRACE...

For each step of the training pass (not the evaluation passes):
  broadcast: from the first forward weight chunk memoryx sends to the last
             forward weight chunk the last wse-node receives;
  reduce:    from the moment the last wse-node starts sending its gradients
             to the last reduced gradient chunk memoryx receives.
Both start when the last party can start, so neither counts compute. Prints
one line per step:
  step S broadcast_s B broadcast_bytes N reduce_s R reduce_bytes M
The times are seconds; the bytes are those of one copy (what memoryx sent,
what it received). Only the last job of each trace counts (the events after
its last job_start). Exits 1 with a message when a trace is missing a part.
"""
import sys


def read(path):
    """The events of one trace: (t_us, dir, msg, peer, step, tensor, offset, count, pass, eval)."""
    events = []
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            if line.startswith("#") or not line.strip():
                continue
            p = line.split()
            if len(p) != 10:
                sys.exit("%s:%d: expected 10 columns, found %d" % (path, lineno, len(p)))
            events.append((int(p[0]), p[1], p[2], p[3], int(p[4]), int(p[5]), int(p[6]), int(p[7]),
                           p[8], int(p[9])))
    starts = [i for i, e in enumerate(events) if e[2] == "job_start" and e[1] == "in"]
    return events[starts[-1]:] if starts else events


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__)
    mx = read(argv[1])
    nodes = [(path, read(path)) for path in argv[2:]]
    steps = sorted({e[4] for e in mx if e[2] == "weight_chunk" and e[1] == "out" and e[8] == "forward"
                    and e[9] == 0})
    if not steps:
        sys.exit("%s: memoryx sent no forward weight chunk" % argv[1])
    for s in steps:
        fwd_out = [e for e in mx if e[1] == "out" and e[2] == "weight_chunk" and e[4] == s
                   and e[8] == "forward" and e[9] == 0]
        grad_in = [e for e in mx if e[1] == "in" and e[2] == "grad_chunk" and e[4] == s]
        last_in, first_grad = [], []
        for path, ev in nodes:
            w = [e[0] for e in ev if e[1] == "in" and e[2] == "weight_chunk" and e[4] == s
                 and e[8] == "forward" and e[9] == 0]
            g = [e[0] for e in ev if e[1] == "out" and e[2] == "grad_chunk" and e[4] == s]
            if not w or not g:
                sys.exit("%s: step %d has no %s" % (path, s, "forward weights" if not w else "gradients"))
            last_in.append(max(w))
            first_grad.append(min(g))
        if not grad_in:
            sys.exit("%s: step %d: memoryx received no gradients" % (argv[1], s))
        bcast = (max(last_in) - min(e[0] for e in fwd_out)) / 1e6
        reduce = (max(e[0] for e in grad_in) - max(first_grad)) / 1e6
        print("step %d broadcast_s %.6f broadcast_bytes %d reduce_s %.6f reduce_bytes %d" %
              (s, bcast, 4 * sum(e[7] for e in fwd_out), reduce, 4 * sum(e[7] for e in grad_in)))


if __name__ == "__main__":
    main(sys.argv)
