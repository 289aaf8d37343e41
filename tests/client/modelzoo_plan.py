#!/usr/bin/env python3
"""The Model Zoo's U-Net configurations (tests/client/modelzoo/, written
out as the Model Zoo has them) planned offline for a CS-2's memory
(appliance-submit --plan --wafer-memory 40G): each 2D one plans, its
weights as many as PyTorch's modules have (tests/model/
modelzoo_unet_tensors.txt, from bench/modelzoo/unet_reference.py), and
the 3D one plans its volumes through the same template.

Usage: modelzoo_plan.py APPLIANCE_SUBMIT CONFIG_DIR REFERENCE"""
import json
import os
import re
import subprocess
import tempfile
import sys

submit, configs, reference = sys.argv[1], sys.argv[2], sys.argv[3]

params = {}
with open(reference) as f:
    for line in f:
        m = re.match(r"(\w+): (\d+) tensors, (\d+) parameters", line)
        if m:
            params[m.group(1)] = int(m.group(3))

# config file -> (its reference, the input, what the plan says of 40 GiB,
# whether its rows are taken as depth: the 7168 x 7168 gray image fits a
# CS-2's memory only so)
expect = {
    "params_cityscapes.yaml": ("cityscapes", "3x256x512", True, False),
    "params_severstal_binary.yaml": ("severstal", "1x256x256", True, False),
    "params_inria_aerial_5120_RGB.yaml": ("inria_5120_rgb", "3x5120x5120", True, False),
    "params_inria_aerial_7168.yaml": ("inria_7168", "1x7168x7168", True, True),
}
for name, (ref, shape, fits, rows) in expect.items():
    out = subprocess.run([submit, "--plan", "--wafer-memory", "40G", "--spill-room", "0", "--json",
                          os.path.join(configs, name)], capture_output=True, text=True)
    assert out.returncode == 0, (name, out.returncode, out.stderr)
    p = json.loads(out.stdout)
    assert p["input"] == shape and p["fits"] == fits and p["rows_as_depth"] == rows, (name, p)
    # memoryx holds each weight with Adam's two moments (Pipelined), and
    # its gradient too (Weight Streaming), in float32; batch norm's running
    # statistics beside them
    per = 12 if p["mode"] == "pipelined" else 16
    extra = p["memoryx_bytes"] - per * params[ref]
    assert extra == 0 or (name == "params_severstal_binary.yaml" and 0 < extra < 32768), \
        (name, p["mode"], p["memoryx_bytes"], params[ref])
    print("ok: %s plans: %s, %s, %d weights as PyTorch's U-Net%s" %
          (name, shape, p["mode"], params[ref], " (rows as depth)" if rows else ""))
    text = subprocess.run([submit, "--plan", "--wafer-memory", "40G", "--spill-room", "0",
                           os.path.join(configs, name)], capture_output=True, text=True).stdout
    assert "encoder.unet_blocks.0.layers.0.conv" in text and "final_conv.conv" in text, text

# the 3D one: SKM-TEA's volumes through the same template (use_conv3d), on
# a wafer of 16 GiB (the whole volume plans at about 23 in mixed precision)
out = subprocess.run([submit, "--plan", "--wafer-memory", "16G", "--spill-room", "0", "--json",
                      os.path.join(configs, "params_skm_tea.yaml")], capture_output=True, text=True)
assert out.returncode == 0, (out.returncode, out.stdout, out.stderr)
p = json.loads(out.stdout)
assert p["input"] == "1x160x512x512" and not p["fits"], p
text = subprocess.run([submit, "--plan", "--wafer-memory", "16G", "--spill-room", "0",
                       os.path.join(configs, "params_skm_tea.yaml")], capture_output=True,
                      text=True).stdout
assert "conv3d" in text and "conv_transpose3d" in text and \
    "encoder.unet_blocks.1.layers.0.norm_layer.instancenorm" in text, text
# the largest volume of the job's own aspect (160:512:512) that fits a
# 16 GiB wafer: sides in the job's proportions, each a multiple of the
# model's downsampling (8), and it plans as fitting while the next larger
# of that aspect does not
skm = os.path.join(configs, "params_skm_tea.yaml")
with open(skm) as f:
    skm_text = f.read()


def plan_volume(d, h, w):
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(skm_text.replace("image_shape: [160, 512, 512]", "image_shape: [%d, %d, %d]" % (d, h, w)))
    try:
        o = subprocess.run([submit, "--plan", "--wafer-memory", "16G", "--spill-room", "0",
                            "--json", f.name],
                           capture_output=True, text=True)
        assert o.returncode == 0, (o.returncode, o.stdout, o.stderr)
        return json.loads(o.stdout)
    finally:
        os.unlink(f.name)


for m in p["modes"]:
    c, d, h, w = (int(x) for x in m["largest_aspect_input"].split("x"))
    assert c == 1 and h == w and d % 8 == 0 and h % 8 == 0, m
    assert abs(d / h - 160 / 512) <= 8 / h, m
    assert d * h * w >= 0.6 * m["largest_cube_input"] ** 3, m  # not far from the cube's voxels
    at = {x["mode"]: x for x in plan_volume(d, h, w)["modes"]}[m["mode"]]
    assert at["fits"], (m, at)
    # the next larger of the aspect: depth one step more, the others in proportion
    d2 = d + 8
    h2 = int((d2 * 512 / 160) / 8 + 0.5) * 8
    more = {x["mode"]: x for x in plan_volume(d2, h2, h2)["modes"]}[m["mode"]]
    assert not more["fits"], (m, more)
assert "largest input of the job's aspect in " in text, text
print("ok: params_skm_tea.yaml plans: 1x160x512x512 volumes, %s (more than a 16 GiB wafer "
      "holds: the plan says what would fit)" % p["mode"])

# with room to spill the bfloat16 copies (each wse-node's --spill-dir), the
# whole volume fits the same 16 GiB wafer by spilling them, and so does the
# Inria 7168 gray image (rows as depth) a 22 GiB one; without, neither
for name, wafer in (("params_skm_tea.yaml", "16G"), ("params_inria_aerial_7168.yaml", "22G")):
    got = {}
    for room in ("0", "64G"):
        o = subprocess.run([submit, "--plan", "--wafer-memory", wafer, "--spill-room", room,
                            "--json", os.path.join(configs, name)], capture_output=True, text=True)
        assert o.returncode == 0, (name, room, o.returncode, o.stderr)
        got[room] = json.loads(o.stdout)
    assert not got["0"]["fits"] and got["0"]["spill_bytes"] == 0, (name, got["0"])
    assert got["64G"]["fits"] and got["64G"]["spill_bytes"] > 0, (name, got["64G"])
    need = {m["mode"]: m["bytes_per_replica"] for m in got["64G"]["modes"]}[got["64G"]["mode"]]
    print("ok: %s fits %s by spilling %.1f GiB of bfloat16 copies: %.1f GiB a replica" %
          (name, wafer, got["64G"]["spill_bytes"] / 2**30, need / 2**30))
