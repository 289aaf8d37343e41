#!/usr/bin/python3
"""The kernels' ssce_dice and multilabel_bce (bench/seg_loss_dump) against
the same losses written in PyTorch from the Model Zoo's definitions
(DiceCELoss with weights 0.5 and 0.5; nn.BCEWithLogitsLoss against one-hot
labels), on random logits: the batch-mean loss and its gradient.

    seg_loss_vs_torch.py BUILD/bench/seg_loss_dump

Prints one line per case with the relative differences. Needs Debian's
python3-torch; it is never a dependency of the appliance."""
import struct
import subprocess
import sys

import torch
import torch.nn.functional as F


def ssce_dice(x, y, include_background):
    c = x.shape[1]
    ce = F.cross_entropy(x, y)
    p = torch.softmax(x, dim=1)
    t = F.one_hot(y, c).permute(0, 3, 1, 2).to(x.dtype)
    if not include_background:
        keep = torch.ones(1, c, 1, 1, dtype=x.dtype)
        keep[0, 0] = 0
        p, t = p * keep, t * keep
    inter = (p * t).sum(dim=(2, 3))
    dice = 2 * inter / (t.sum(dim=(2, 3)) + p.sum(dim=(2, 3)) + 1e-6)
    corr = 1.0 if include_background else c / (c - 1)
    return 0.5 * ce + 0.5 * (1 - corr * dice.mean())


def multilabel_bce(x, y, _):
    t = F.one_hot(y, x.shape[1]).permute(0, 3, 1, 2).to(x.dtype)
    return F.binary_cross_entropy_with_logits(x, t)


def kernels(exe, kind, x, y, incl):
    n, c, h, w = x.shape
    data = struct.pack("6i", kind, n, c, h, w, int(incl))
    data += x.to(torch.float32).contiguous().numpy().tobytes()
    data += y.to(torch.int32).contiguous().numpy().tobytes()
    out = subprocess.run([exe], input=data, capture_output=True, check=True).stdout
    loss = struct.unpack("d", out[:8])[0]
    g = torch.frombuffer(bytearray(out[8:]), dtype=torch.float32).reshape(n, c, h, w)
    return loss, g


def main():
    exe = sys.argv[1]
    torch.manual_seed(7)
    worst = 0.0
    for kind, name, fn in ((0, "ssce_dice", ssce_dice), (1, "multilabel_bce", multilabel_bce)):
        for n, c, h, w in ((2, 2, 8, 8), (4, 3, 16, 12), (3, 6, 32, 32), (2, 4, 64, 48)):
            for incl in ((False, True) if kind == 0 else (False,)):
                x32 = (torch.randn(n, c, h, w) * 2).to(torch.float32)
                y = torch.randint(0, c, (n, h, w))
                y[:, 0, :c] = torch.arange(c)  # every class in every sample
                loss_k, g_k = kernels(exe, kind, x32, y, incl)
                row = [f"{name:15s} n={n} C={c} {h}x{w}"]
                if kind == 0:
                    row.append(f"include_background={'true ' if incl else 'false'}")
                for dt in (torch.float64, torch.float32):
                    x = x32.to(dt).requires_grad_()
                    loss_t = fn(x, y, incl)
                    loss_t.backward()
                    dl = abs(loss_k - loss_t.item()) / abs(loss_t.item())
                    gt = x.grad.to(torch.float64)
                    dg = ((g_k.to(torch.float64) - gt).abs().max() / gt.abs().max()).item()
                    if dt == torch.float64:
                        worst = max(worst, dl, dg)
                    row.append(f"torch {str(dt)[6:]}: loss {loss_t.item():.9f} "
                               f"(kernels {loss_k:.9f}, rel {dl:.1e}) grad rel {dg:.1e}")
                print("  ".join(row))
    print(f"worst relative difference from float64 PyTorch: {worst:.2e}")
    return 0 if worst < 1e-5 else 1


if __name__ == "__main__":
    sys.exit(main())
