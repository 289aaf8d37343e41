#!/usr/bin/python3
"""The appliance's learning rates against torch.optim.lr_scheduler's: job
files with Model Zoo schedules whose PyTorch counterparts are exact, their
rates from build/bench/lr_print at chosen steps, and PyTorch's from the
scheduler stepped once per update (the rate an update uses is the group's
lr before it, so the first update is step 0 in both).

    lr_vs_torch.py [BUILD_DIR]

Prints one line per case and its largest relative difference; exits 1 if any
is over 1e-6. Needs Debian's python3-torch; never a test dependency."""
import os
import subprocess
import sys
import tempfile

import torch
from torch.optim import lr_scheduler as S

BUILD = sys.argv[1] if len(sys.argv) > 1 else "build"
STEPS = [0, 1, 2, 3, 7, 99, 100, 101, 399, 400, 401, 999, 1000, 1001, 2500, 4999]

HEAD = """[train_input]
num_classes = 3
[model]
input_shape = [6]
loss = "softmax_cross_entropy"
[[model.layers]]
name = "fc"
type = "dense"
units = 3
"""

# (name, [optimizer] keys, a function of an optimizer making torch's scheduler, base lr)
CASES = [
    ("Linear warm-up then Polynomial decay (as the U-Net's list)",
     """[[optimizer.learning_rate]]
scheduler = "Linear"
initial_learning_rate = 1.0e-5
end_learning_rate = 2.5e-4
total_iters = 400
[[optimizer.learning_rate]]
scheduler = "Polynomial"
initial_learning_rate = 2.5e-4
end_learning_rate = 0.0
total_iters = 1000
power = 2.0
""",
     lambda o: S.SequentialLR(o, [S.LinearLR(o, start_factor=0.04, end_factor=1.0, total_iters=400),
                                  S.PolynomialLR(o, total_iters=1000, power=2.0)],
                              milestones=[400]),
     2.5e-4),
    ("Exponential, total_iters 1 (torch's ExponentialLR)",
     'learning_rate = {scheduler = "ExponentialLR", initial_learning_rate = 0.1, '
     'total_iters = 1, decay_rate = 0.999}\n',
     lambda o: S.ExponentialLR(o, gamma=0.999), 0.1),
    ("Step",
     'learning_rate = {scheduler = "Step", initial_learning_rate = 0.1, step_size = 100, '
     'gamma = 0.5}\n',
     lambda o: S.StepLR(o, step_size=100, gamma=0.5), 0.1),
    ("MultiStep",
     'learning_rate = {scheduler = "MultiStep", initial_learning_rate = 0.1, gamma = 0.1, '
     'milestones = [100, 400, 1000]}\n',
     lambda o: S.MultiStepLR(o, milestones=[100, 400, 1000], gamma=0.1), 0.1),
    ("CosineAnnealing within T_max",
     'learning_rate = {scheduler = "CosineAnnealing", initial_learning_rate = 0.1, '
     'T_max = 5000, eta_min = 0.001}\n',
     lambda o: S.CosineAnnealingLR(o, T_max=5000, eta_min=0.001), 0.1),
    ("Constant then CosineAnnealing (a list)",
     'learning_rate = [{scheduler = "Constant", learning_rate = 0.1, total_iters = 100}, '
     '{scheduler = "CosineAnnealing", initial_learning_rate = 0.1, T_max = 4000}]\n',
     lambda o: S.SequentialLR(o, [S.ConstantLR(o, factor=1.0, total_iters=100),
                                  S.CosineAnnealingLR(o, T_max=4000)], milestones=[100]),
     0.1),
]


def torch_rates(make, base, steps):
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=base)
    sched = make(opt)
    out, want = {}, set(steps)
    for t in range(max(steps) + 1):
        if t in want:
            out[t] = opt.param_groups[0]["lr"]
        opt.step()
        sched.step()
    return out


def ours(keys, steps):
    with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as f:
        f.write(HEAD + "[optimizer]\n" + keys)
        name = f.name
    try:
        res = subprocess.run([os.path.join(BUILD, "bench", "lr_print"), name] +
                             [str(s) for s in steps], check=True, capture_output=True, text=True)
    finally:
        os.unlink(name)
    return {int(a): float(b) for a, b in (l.split() for l in res.stdout.splitlines())}


def main():
    worst_all = 0.0
    for name, keys, make, base in CASES:
        a, b = ours(keys, STEPS), torch_rates(make, base, STEPS)
        worst = max(abs(a[s] - b[s]) / max(abs(b[s]), 1e-30) if b[s] else abs(a[s])
                    for s in STEPS)
        worst_all = max(worst_all, worst)
        print(f"{name}: max relative difference {worst:.2e} over steps {STEPS[0]}..{STEPS[-1]}")
        if worst > 1e-6:
            for s in STEPS:
                print(f"  step {s}: appliance {a[s]:.9g}, torch {b[s]:.9g}")
    print("PASS" if worst_all <= 1e-6 else "FAIL")
    return 0 if worst_all <= 1e-6 else 1


if __name__ == "__main__":
    sys.exit(main())
