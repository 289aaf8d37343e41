#!/usr/bin/env python3
"""appliance-submit --plan --wafer-memory: the plan's answers without a
cluster, held to the footprint's own numbers: a wafer of exactly what a
replica needs fits and one byte less does not; the largest batch fits and
one more does not; the largest square input is an image size the model
takes; a model that is no image says so; a sample that fits no wafer is
refused with what would help, never a batch below 1.

Usage: offline_plan.py APPLIANCE_SUBMIT EXAMPLES_DIR"""
import json
import os
import subprocess
import sys
import tempfile

submit, examples = sys.argv[1], sys.argv[2]


def plan(job, wafer, *extra):
    out = subprocess.run([submit, "--plan", "--wafer-memory", str(wafer), *extra, job],
                         capture_output=True, text=True)
    assert out.returncode == 0, (out.returncode, out.stdout, out.stderr)
    return out.stdout


def plan_json(job, wafer, *extra):
    return json.loads(plan(job, wafer, "--json", *extra))


unet = os.path.join(examples, "unet.toml")
p = plan_json(unet, "20G")
assert p["input"] == "3x512x512" and p["replicas"] == 2 and p["batch_per_replica"] == 2, p
# a wafer that holds every output: none is computed again, and the mode
# picked needs more than the lean plan; a byte less, the plan is the lean
# one keeping every costly output and still fits; a byte less than that,
# the lean plan makes some large convolutions again too and still fits
assert p["keep_outputs"] and p["mode"] == "pipelined", p
keep = p["modes"][0]["bytes_per_replica"]
at = plan_json(unet, keep)
assert at["keep_outputs"] and at["fits"] and at["modes"][0]["bytes_per_replica"] == keep, at
below = plan_json(unet, keep - 1)
assert not below["keep_outputs"] and below["keep_costly"] and below["fits"], below
costly = below["modes"][0]["bytes_per_replica"]
assert costly < keep, (keep, below)
lighter = plan_json(unet, costly - 1)
assert not lighter["keep_outputs"] and not lighter["keep_costly"] and lighter["fits"], lighter
assert lighter["modes"][0]["bytes_per_replica"] < costly, (costly, lighter)
p["modes"][0] = lighter["modes"][0]
for m in p["modes"]:
    need = m["bytes_per_replica"]
    # exactly the need fits; a byte less, the mode the plan picks holds one
    # batch in flight rather than two (feed_credits 1) and needs that much
    # less, the other does not fit; a byte less than that, neither
    at = {x["mode"]: x for x in plan_json(unet, need)["modes"]}[m["mode"]]
    assert at["fits"], (m, at)
    short = plan_json(unet, need - 1)
    below = {x["mode"]: x for x in short["modes"]}[m["mode"]]
    if below["fits"]:
        assert short["mode"] == m["mode"] and short["feed_credits"] == 1, short
        one = below["bytes_per_replica"]
        assert one < need, (need, below)
        below = {x["mode"]: x for x in plan_json(unet, one - 1)["modes"]}[m["mode"]]
    assert not below["fits"], (m, below)
    # at a wafer of exactly the need, the largest batch is the job's share
    assert at["largest_batch"] == p["batch_per_replica"], at
    side = m["largest_square_input"]
    assert side > 512 and side % 16 == 0, m

# im2col's workspace grows with the wse-node's threads; the U-Net's largest
# is now that of a convolution of 16 channels and more on oneDNN's own
# layouts, which does not: an 8-channel U-Net's does
one = plan_json(unet, "20G")["modes"][1]["bytes_per_replica"]
four = plan_json(unet, "20G", "--threads", "4")["modes"][1]["bytes_per_replica"]
assert four == one, (one, four)
with tempfile.TemporaryDirectory() as d:
    narrow = os.path.join(d, "narrow.toml")
    with open(unet) as f, open(narrow, "w") as g:
        g.write(f.read().replace("filters = 16", "filters = 8").replace("filters = 32", "filters = 8")
                .replace("filters = 64", "filters = 8").replace("filters = 128", "filters = 8"))
    one = plan_json(narrow, "20G")["modes"][1]["bytes_per_replica"]
    four = plan_json(narrow, "20G", "--threads", "4")["modes"][1]["bytes_per_replica"]
    assert four > one, (one, four)

# text: the table and the mode auto picks
text = plan(unet, "20G")
assert "planned here, no cluster asked" in text, text
assert "mode auto: pipelined" in text, text
assert "enc1_conv1" in text and "8x512x512" in text, text

# not an image
q = plan_json(os.path.join(examples, "quickstart.toml"), "1G")
assert all(m["largest_square_input"] == -1 for m in q["modes"]), q
assert "not an image" in plan(os.path.join(examples, "quickstart.toml"), "1G")
# memoryx: 132 weights with plain SGD; auto picks Pipelined, whose gradients
# never reach memoryx: 528 bytes, what memoryx itself reports holding for
# this job
assert q["modes"][0]["mode"] == "pipelined" and "mode auto: pipelined" in plan(os.path.join(examples, "quickstart.toml"), "1G"), q
assert (q["memoryx_shards"], q["memoryx_bytes"], q["memoryx_bytes_per_shard"]) == (1, 528, 528), q
assert "memoryx: the weights (528 B) and their optimizer state take 528 B, at most 528 B on each of 1 shard(s)" in plan(os.path.join(examples, "quickstart.toml"), "1G")

# a sparse model: memoryx holds a static mask's tensor compact, its kept
# elements alone with a bit an element of mask and a rank every 4096
# elements (the classifier's 128 weights, not its bias: 13 kept, 16 bytes
# of bits and two 8-byte ranks), and a mask that changes (gmp) or dense
# streams as a byte an element beside the dense tensor; the plan counts it
def sparse_plan(section):
    with open(os.path.join(examples, "quickstart.toml")) as f:
        text = f.read() + '\n[sparsity]\n' + section
    with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as f:
        f.write(text)
    out = plan_json(f.name, "1G")
    os.unlink(f.name)
    return out
sq = sparse_plan('type = "static"\nsparsity = 0.9\n')
assert sq["mode"] == "weight_streaming", sq  # a sparse model trains in Weight Streaming
dense_ws = 132 * 4 * 2  # weights and their gradients, plain SGD (no state)
compact = (4 + 13) * 4 * 2 + 16 + 16
assert (sq["memoryx_bytes"], sq["memoryx_bytes_per_shard"]) == (compact, compact), sq
for section in ('type = "static"\nsparsity = 0.9\ncompressed_streams = false\n',
                'type = "gmp"\nsparsity = 0.9\nschedule = {freq = 2, stop = 6}\n'):
    sq = sparse_plan(section)
    assert (sq["memoryx_bytes"], sq["memoryx_bytes_per_shard"]) == (dense_ws + 128, dense_ws + 128), (section, sq)

# a wafer too small for one sample: what would help, no batch below 1
small = plan(unet, "1M")
assert "does not fit one sample of 3x512x512: it needs a larger wafer (--wafer-memory)" in small, small
assert "batch_size" not in small.split("memory of a replica")[0], small

# one sample per replica that does not fit in float32 but would with
# bfloat16 activations: the plan offers them, with their need, which is what
# the same job with activation_dtype = "bfloat16" plans
with open(unet) as f:
    text = f.read().replace("batch_size = 4", "batch_size = 2", 1)
jobs = {}
for name, t in (("full", text),
                ("half", text.replace('loss = "bce_dice"', 'loss = "bce_dice"\nactivation_dtype = "bfloat16"', 1))):
    with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as f:
        f.write(t)
    jobs[name] = f.name
need = {n: {m["mode"]: m["bytes_per_replica"] for m in plan_json(j, "20G")["modes"]} for n, j in jobs.items()}
assert plan_json(jobs["full"], "20G")["batch_per_replica"] == 1
assert need["half"]["weight_streaming"] < need["full"]["weight_streaming"], need
between = plan(jobs["full"], (need["half"]["weight_streaming"] + need["full"]["weight_streaming"]) // 2)
assert ', or [model] activation_dtype = "bfloat16" (needs ' in between, between
text_half = plan(jobs["half"], "20G")
assert "kept bf16" in text_half and "recomputed" in text_half, text_half
for j in jobs.values():
    os.unlink(j)

# a job file with an error names its place; --wafer-memory goes with --plan
with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as f:
    f.write("[runconfig]\nmax_step = 3\n")
bad = subprocess.run([submit, "--plan", "--wafer-memory", "1G", f.name], capture_output=True, text=True)
os.unlink(f.name)
assert bad.returncode == 3 and ':2:1: unknown key "max_step" in [runconfig]' in bad.stderr, bad
use = subprocess.run([submit, "--wafer-memory", "1G", unet], capture_output=True, text=True)
assert use.returncode == 2 and "--wafer-memory goes with --plan" in use.stderr, use
print("offline plan: ok")
