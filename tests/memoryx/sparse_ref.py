#!/usr/bin/python3
"""The sparsity types' mask rules in numpy, held against what memoryx did.

    sparse_ref.py SPARSE_MASKS TYPE DIR

Runs SPARSE_MASKS (tests/memoryx/sparse_masks.c) for TYPE into DIR, then
checks every step it dumped against the rule written here on its own (for
gmp2, GMP with levels per pattern, each sparse tensor on its own level
schedule): the
first mask from the weights as made (random: a seeded splitmix64 score;
topk: magnitudes), the mask after each step (unchanged but at the
schedule's steps; GMP: the smallest magnitudes pruned to the scheduled
level; SET: the smallest dropped, as many regrown at random; RigL: regrown
where the dense gradient is largest), pruned weights exact zeros, regrown
weights zero, the momentum buffer zero wherever a weight is pruned or new.
Exits 77 (skipped) without numpy.
"""
import math
import os
import subprocess
import sys

try:
    import numpy as np
except ImportError:
    print("sparse_ref: numpy is missing (python3-numpy): skipped")
    sys.exit(77)

M64 = (1 << 64) - 1


def mix(x):
    """splitmix64's finaliser over uint64 arrays (wrapping)."""
    with np.errstate(over="ignore"):
        z = x + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def key(seed, tensor_id):
    return int(mix(np.array([(seed ^ (tensor_id << 32)) & M64], dtype=np.uint64))[0])


def random_scores(k, step, n):
    with np.errstate(over="ignore"):
        base = mix(np.array([(k + step) & M64], dtype=np.uint64))[0]
        h = mix(base + np.arange(n, dtype=np.uint64))
    return (h >> np.uint64(11)).astype(np.float64) * 2.0 ** -53


def keep_count(n, level):
    pruned = np.round(level * n)  # halves to even
    keep = n - int(pruned) if pruned < n else 0
    return max(keep, 1) if n > 0 else 0


def top(scores, candidates, k):
    """The k candidates (indices) of the largest score, ties to the lower index."""
    idx = np.asarray(candidates)
    order = np.lexsort((idx, -scores[idx]))
    return idx[order[:k]]


def hp_at(kind, init, final, gamma, minimum, half_period, step, hi, slope=0.0):
    if kind == "linear":
        v = init + slope * step
    elif kind == "exp":
        v = final + (init - final) * math.exp(-gamma * step)
    elif kind == "cosine":
        v = minimum + (init - minimum) * 0.5 * (1.0 + math.cos(math.pi * step / half_period))
    else:
        v = init
    return 0.0 if not v > 0 else min(v, hi)


def is_update(meta, step):
    freq, start, stop = int(meta["freq"]), int(meta["start"]), int(meta["stop"])
    if meta["type"] == "static" or step < 1 or step < start or (stop > 0 and step >= stop):
        return False
    return (step - start) % freq == 0


def main():
    global variant
    exe, variant, d = sys.argv[1:4]
    os.makedirs(d, exist_ok=True)
    subprocess.run([exe, variant, d], check=True)
    # fc1.weight in d; in gmp2, fc2.weight (its own level schedule) in d/t2
    dirs = [d] + ([os.path.join(d, "t2")] if variant == "gmp2" else [])
    rc = 0
    for td in dirs:
        rc |= check_tensor(td)
    return rc


def check_tensor(d):
    typ = {"rigl16": "rigl", "gmp2": "gmp", "static_fanin": "static",
           "static_dense": "static"}.get(variant, variant)
    meta = dict(line.split(" ", 1) for line in open(os.path.join(d, "meta.txt")).read().splitlines())
    n = int(meta["n"])
    k = key(int(meta["seed"]), int(meta["tensor_id"]))
    f32 = lambda name: np.fromfile(os.path.join(d, name), dtype=np.float32)
    u8 = lambda name: np.fromfile(os.path.join(d, name), dtype=np.uint8)
    lv = dict(kind=meta["level_kind"], init=float(meta["level_init"]), final=float(meta["level_final"]),
              gamma=float(meta["level_gamma"]), minimum=0.0, half_period=1.0,
              slope=float(meta["level_slope"]))
    df = dict(kind=meta["drop_kind"], init=float(meta["drop_init"]), final=0.0, gamma=0.0,
              minimum=0.0, half_period=float(meta["drop_half_period"]))
    failures = []

    def check(ok, what):
        if not ok:
            failures.append(what)

    # the first mask
    w0 = f32("w0.f32")
    level0 = hp_at(step=0, hi=0.999999, **lv) if typ == "gmp" else float(meta["level"])
    score = np.abs(w0.astype(np.float64)) if meta["init"] == "topk" else random_scores(k, 0, n)
    mask = np.zeros(n, dtype=np.uint8)
    mask[top(score, np.arange(n), keep_count(n, level0))] = 1
    m0 = u8("m0.u8")
    check(np.array_equal(mask, m0), "step 0: the first mask differs (%d positions)"
          % int(np.sum(mask != m0)))
    # the weights with the first mask: pruned ones zero; with init_scale
    # fan_in each row's kept ones times sqrt(row length / kept in the row)
    wi = f32("wi.f32")
    expect = np.where(m0 == 1, w0, np.float32(0))
    if meta["init_scale"] == "fan_in":
        rows = int(meta["rows"])
        e2, m2 = expect.reshape(rows, -1), m0.reshape(rows, -1)
        for r in range(rows):
            kept_r = int(m2[r].sum())
            if 0 < kept_r < m2.shape[1]:
                e2[r] *= np.float32(math.sqrt(m2.shape[1] / kept_r))
        check(not np.array_equal(expect, np.where(m0 == 1, w0, np.float32(0))),
              "init_scale fan_in: no row was scaled")
    check(np.array_equal(expect, wi), "step 0: the weights with the first mask differ from the "
          "rule (%d positions)" % int(np.sum(expect != wi)))
    updates = 0
    for s in range(1, int(meta["steps"]) + 1):
        pre, g, m, w, b = f32("pre%d.f32" % s), f32("g%d.f32" % s), u8("m%d.u8" % s), \
            f32("w%d.f32" % s), f32("b%d.f32" % s)
        prev = mask
        check(np.all(pre[prev == 0] == 0), "step %d: a pruned weight moved in the update" % s)
        new = prev.copy()
        stay = prev.copy()  # kept and not new: their weights are the update's
        if is_update(meta, s):
            updates += 1
            wa = np.abs(pre.astype(np.float64))
            kept = np.flatnonzero(prev)
            new = np.zeros(n, dtype=np.uint8)
            if typ == "gmp":
                keep = keep_count(n, hp_at(step=s, hi=0.999999, **lv))
                sc = np.where(prev == 1, wa, -1.0)
                new[top(sc, np.arange(n), keep)] = 1
                stay = new.copy()
            else:
                frac = hp_at(step=s, hi=1.0, **df)
                drop = min(int(np.round(frac * len(kept))), len(kept))
                new[top(wa, kept, len(kept) - drop)] = 1
                stay = new.copy()
                cand = np.flatnonzero(new == 0)
                sc = np.abs(g.astype(np.float64)) if typ == "rigl" else random_scores(k, s, n)
                new[top(sc, cand, drop)] = 1
                check(drop > 0, "step %d: nothing dropped (fraction %g of %d)" % (s, frac, len(kept)))
        check(np.array_equal(new, m), "step %d: the mask differs from the rule (%d positions)"
              % (s, int(np.sum(new != m))))
        expect_w = np.where(stay == 1, pre, np.float32(0))
        check(np.array_equal(expect_w, w), "step %d: weights differ from the update masked "
              "(%d positions)" % (s, int(np.sum(expect_w != w))))
        check(np.all(b[stay == 0] == 0), "step %d: momentum of a pruned or regrown weight is "
              "not zero" % s)
        check(np.all(w[m == 0] == 0), "step %d: a pruned weight is not an exact zero" % s)
        if typ != "gmp":
            check(int(m.sum()) == keep_count(n, float(meta["level"])),
                  "step %d: %d kept, the level keeps %d" % (s, int(m.sum()),
                                                             keep_count(n, float(meta["level"]))))
        if typ != "static" and is_update(meta, s) and typ != "gmp":
            check(not np.array_equal(prev, m), "step %d: an update step left the mask as it was" % s)
        mask = m
    want_updates = {"static": 0, "gmp": 3, "set": 3, "rigl": 5}[typ]
    check(updates == want_updates, "%d mask updates, the schedule has %d" % (updates, want_updates))
    for f in failures:
        print("FAIL %s: %s" % (variant, f))
    if failures:
        return 1
    # the last mask keeps what the tensor's own schedule keeps at the last
    # update step (GMP)
    if typ == "gmp":
        last = max(s for s in range(1, int(meta["steps"]) + 1) if is_update(meta, s))
        want = keep_count(n, hp_at(step=last, hi=0.999999, **lv))
        check(int(mask.sum()) == want, "%d kept at the end, the level of step %d keeps %d"
              % (int(mask.sum()), last, want))
    print("ok %s (tensor %s, %s level): %d steps, %d mask updates, %d of %d kept at the end"
          % (variant, meta["tensor_id"], meta["level_kind"], int(meta["steps"]), updates,
             int(mask.sum()), n))
    return 0


if __name__ == "__main__":
    sys.exit(main())
