#!/usr/bin/python3
"""The PyTorch twin of a job file: the same layers, loss, batch and threads,
trained on random data in one process, to compare the appliance with.

    torch_twin.py JOB.toml [--side N] [--batch B] [--threads T] [--steps S] [--bf16]

Prints one JSON object: the median step time (after a first step that warms
up), the peak resident memory of the process (ru_maxrss) and what was run.
Needs Debian's python3-torch; it is never a dependency of the appliance."""
import argparse
import json
import resource
import sys
import time
import tomllib

import torch
import torch.nn as nn
import torch.nn.functional as F


def pair(v, default):
    if v is None:
        v = default
    return (v, v) if isinstance(v, int) else tuple(v)


class Twin(nn.Module):
    """The [model] layers as a graph: each layer reads the previous one,
    or the layers its `inputs` names ("input": the model input)."""

    def __init__(self, model):
        super().__init__()
        self.layers = []
        self.mods = nn.ModuleDict()
        shape = {"input": list(model["input_shape"])}
        prev = "input"
        for spec in model["layers"]:
            name, kind = spec["name"], spec["type"]
            ins = spec.get("inputs", [prev])
            cin = shape[ins[0]][0]
            s = list(shape[ins[0]])
            mod = None
            if kind == "conv2d":
                k = pair(spec.get("kernel_size"), 3)
                st = pair(spec.get("stride"), 1)
                dil = pair(spec.get("dilation"), 1)
                pad = spec.get("padding", 0)
                if pad == "same":
                    pad = ((k[0] - 1) * dil[0] // 2, (k[1] - 1) * dil[1] // 2)
                pad = pair(pad, 0)
                mod = nn.Conv2d(cin, spec["filters"], k, st, pad, dil, bias=spec.get("bias", True))
                s = [spec["filters"], (s[1] + 2 * pad[0] - dil[0] * (k[0] - 1) - 1) // st[0] + 1,
                     (s[2] + 2 * pad[1] - dil[1] * (k[1] - 1) - 1) // st[1] + 1]
            elif kind == "conv_transpose2d":
                k = pair(spec.get("kernel_size"), 2)
                st = pair(spec.get("stride"), 1)
                pad = pair(spec.get("padding", 0), 0)
                op = pair(spec.get("output_padding", 0), 0)
                mod = nn.ConvTranspose2d(cin, spec["filters"], k, st, pad, op,
                                         bias=spec.get("bias", True))
                s = [spec["filters"], (s[1] - 1) * st[0] - 2 * pad[0] + k[0] + op[0],
                     (s[2] - 1) * st[1] - 2 * pad[1] + k[1] + op[1]]
            elif kind == "batch_norm":
                mod = nn.BatchNorm2d(cin, eps=spec.get("eps", 1e-5),
                                     momentum=spec.get("momentum", 0.1))
            elif kind == "group_norm":
                mod = nn.GroupNorm(spec["groups"], cin, eps=spec.get("eps", 1e-5))
            elif kind in ("max_pool2d", "avg_pool2d"):
                k = pair(spec.get("kernel_size"), 2)
                st = pair(spec.get("stride"), k)
                pad = pair(spec.get("padding", 0), 0)
                mod = (nn.MaxPool2d if kind == "max_pool2d" else nn.AvgPool2d)(k, st, pad)
                s = [s[0], (s[1] + 2 * pad[0] - k[0]) // st[0] + 1,
                     (s[2] + 2 * pad[1] - k[1]) // st[1] + 1]
            elif kind == "upsample":
                f = spec.get("scale_factor", 2)
                mod = nn.Upsample(scale_factor=f, mode=spec.get("mode", "nearest"))
                s = [s[0], s[1] * f, s[2] * f]
            elif kind == "concat":
                s = [sum(shape[i][0] for i in ins)] + s[1:]
            elif kind == "dense":
                mod = nn.Linear(cin if len(s) == 1 else s[0] * s[1] * s[2], spec["units"],
                                bias=spec.get("bias", True))
                s = [spec["units"]]
            elif kind == "flatten":
                s = [s[0] * s[1] * s[2]] if len(s) == 3 else s
            elif kind == "relu":
                mod = nn.ReLU()
            elif kind == "leaky_relu":
                mod = nn.LeakyReLU(spec.get("negative_slope", 0.01))
            elif kind == "gelu":
                mod = nn.GELU()
            elif kind == "sigmoid":
                mod = nn.Sigmoid()
            elif kind == "tanh":
                mod = nn.Tanh()
            elif kind == "dropout":
                mod = nn.Dropout(spec.get("rate", 0.5))
            elif kind != "add":
                sys.exit("torch_twin: layer type %s is not known here" % kind)
            if mod is not None:
                self.mods[name] = mod
            self.layers.append((name, kind, ins))
            shape[name] = s
            prev = name

    def forward(self, x):
        out = {"input": x}
        y = x
        for name, kind, ins in self.layers:
            a = out[ins[0]]
            if kind == "concat":
                y = torch.cat([out[i] for i in ins], dim=1)
            elif kind == "add":
                y = a + out[ins[1]]
            elif kind == "flatten":
                y = torch.flatten(a, 1)
            else:
                y = self.mods[name](a)
            out[name] = y
        return y


def loss_of(kind, logits, labels):
    if kind == "softmax_cross_entropy":
        return F.cross_entropy(logits, labels)
    if kind == "pixel_softmax_cross_entropy":
        return F.cross_entropy(logits, labels)
    t = labels.float().reshape(logits.shape)
    bce = F.binary_cross_entropy_with_logits(logits, t)
    p = torch.sigmoid(logits).flatten(1)
    t = t.flatten(1)
    dice = (1 - (2 * (p * t).sum(1) + 1) / (p.sum(1) + t.sum(1) + 1)).mean()
    return {"bce_with_logits": bce, "dice": dice}.get(kind, bce + dice)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("job")
    ap.add_argument("--side", type=int)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--bf16", action="store_true",
                    help="forward pass and loss under CPU autocast to bfloat16 (mixed precision)")
    a = ap.parse_args()
    with open(a.job, "rb") as f:
        job = tomllib.load(f)
    model = job["model"]
    if a.side:
        model["input_shape"] = [model["input_shape"][0], a.side, a.side]
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    net = Twin(model)
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    c = model["input_shape"]
    x = torch.randint(0, 256, [a.batch] + c, dtype=torch.uint8).float() / 255
    with torch.no_grad():
        out = net(x[:1])
    loss_kind = model.get("loss", "softmax_cross_entropy")
    if loss_kind == "softmax_cross_entropy":
        y = torch.randint(0, out.shape[1], [a.batch])
    elif loss_kind == "pixel_softmax_cross_entropy":
        y = torch.randint(0, out.shape[1], [a.batch] + list(out.shape[2:]))
    else:
        y = torch.randint(0, 2, [a.batch] + list(out.shape[1:]))
    del out
    times = []
    for _ in range(a.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.bf16):
            out = net(x)
        loss = loss_of(loss_kind, out.float(), y)
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
    warm = sorted(times[1:] or times)
    print(json.dumps({"side": c[1], "batch": a.batch, "threads": a.threads, "steps": a.steps,
                      "step_sec": warm[len(warm) // 2], "mean_step_sec": sum(warm) / len(warm),
                      "first_step_sec": times[0],
                      "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                      "torch": torch.__version__, "bf16": a.bf16, "loss": float(loss)}))


if __name__ == "__main__":
    main()
