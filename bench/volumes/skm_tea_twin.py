#!/usr/bin/env python3
"""PyTorch twin of the Model Zoo's 3D U-Net with the SKM-TEA config's layers
(tests/client/modelzoo/params_skm_tea.yaml: encoder 32-64-128 and a
256 bottleneck, decoder 128-64-32, two 3x3x3 convolutions a block without
bias, strided-convolution downscaling in the first convolution of encoder
blocks 1 and 2 and of the bottleneck, group_instance norm (a group per
channel), ReLU, 2x2x2 transposed convolutions up, skip concatenation, a
1x1x1 head of 5 classes, ssce_dice, AdamW), trained on one random volume
of SIDE^3 (or D H W) at batch 1 for the benchmark bench/volumes.sh.
Prints one JSON line: the median step time after the first, the peak RSS,
the parameter count. Never a dependency of the build or CI.

    /usr/bin/python3 bench/volumes/skm_tea_twin.py --side 128 [--bf16] [--steps 3] [--threads 2]
"""
import argparse
import json
import resource
import time

import torch
import torch.nn.functional as F
from torch import nn

ENC, BOTTLE, DEC, CLASSES = [32, 64, 128], 256, [128, 64, 32], 5


class GroupNorm32(nn.GroupNorm):
    """Group norm in float32 under autocast too (PyTorch 1.13's CPU autocast
    hands it bfloat16 inputs with float32 weights, which it refuses), its
    output in its input's type."""

    def forward(self, x):
        return super().forward(x.float()).to(x.dtype)


def cna(cin, cout, stride):
    return [nn.Conv3d(cin, cout, 3, stride, 1, bias=False), GroupNorm32(cout, cout), nn.ReLU()]


def block(cin, cout, down):
    return nn.Sequential(*cna(cin, cout, 2 if down else 1), *cna(cout, cout, 1))


class UNet3D(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.ModuleList()
        cin = 1
        for i, f in enumerate(ENC):
            self.enc.append(block(cin, f, i > 0))
            cin = f
        self.bottleneck = block(cin, BOTTLE, True)
        self.up = nn.ModuleList()
        self.dec = nn.ModuleList()
        cin = BOTTLE
        for f, skip in zip(DEC, reversed(ENC)):
            self.up.append(nn.ConvTranspose3d(cin, f, 2, 2, bias=False))
            self.dec.append(block(f + skip, f, False))
            cin = f
        self.head = nn.Conv3d(cin, CLASSES, 1, bias=False)

    def forward(self, x):
        skips = []
        for b in self.enc:
            x = b(x)
            skips.append(x)
        x = self.bottleneck(x)
        for up, dec, s in zip(self.up, self.dec, reversed(skips)):
            x = dec(torch.cat([up(x), s], 1))
        return self.head(x)


def ssce_dice(logits, labels):
    """Softmax cross-entropy plus the soft Dice of the non-background
    classes (the Model Zoo's ssce_dice)."""
    ce = F.cross_entropy(logits, labels)
    p = torch.softmax(logits, 1).flatten(2)[:, 1:]
    t = F.one_hot(labels, CLASSES).movedim(-1, 1).flatten(2)[:, 1:].float()
    dice = 1 - (2 * (p * t).sum(2) + 1) / (p.sum(2) + t.sum(2) + 1)
    return ce + dice.mean()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--side", type=int, default=128)
    ap.add_argument("--shape", type=int, nargs=3, help="D H W instead of a cube")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--bf16", action="store_true", help="forward and loss under CPU autocast")
    a = ap.parse_args()
    shape = a.shape or [a.side] * 3
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    net = UNet3D()
    opt = torch.optim.AdamW(net.parameters(), lr=5e-4, weight_decay=0.0)
    x = torch.randn([1, 1] + shape)
    y = torch.randint(0, CLASSES, [1] + shape)
    times = []
    for _ in range(a.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.bf16):
            out = net(x)
        loss = ssce_dice(out.float(), y)
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
    warm = sorted(times[1:] or times)
    print(json.dumps({"shape": shape, "voxels": shape[0] * shape[1] * shape[2],
                      "steps": a.steps, "threads": a.threads, "bf16": a.bf16,
                      "step_sec": warm[len(warm) // 2], "first_step_sec": times[0],
                      "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                      "params": sum(p.numel() for p in net.parameters()),
                      "torch": torch.__version__, "loss": float(loss)}))


if __name__ == "__main__":
    main()
