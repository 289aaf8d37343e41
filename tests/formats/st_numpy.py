#!/usr/bin/env python3
"""Reads a checkpoint written by our writer with nothing but json and numpy,
and writes one numpy's way that st-compare must accept as equal.

Usage: st_numpy.py TEST_SAFETENSORS_EXE ST_COMPARE_EXE
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np

DTYPES = {"F32": "<f4", "F64": "<f8", "I64": "<i8", "I32": "<i4"}


def load(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    assert n % 8 == 0, f"header length {n} is not padded to 8"
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    meta = header.pop("__metadata__", {})
    data = raw[8 + n:]
    tensors = {}
    for name, t in header.items():
        begin, end = t["data_offsets"]
        a = np.frombuffer(data[begin:end], dtype=DTYPES[t["dtype"]])
        tensors[name] = a.reshape(t["shape"])
    return tensors, meta


def save(path, tensors, meta):
    """The layout another writer might choose: metadata first, names sorted."""
    header = {"__metadata__": meta}
    blobs, off = [], 0
    for name in sorted(tensors):
        a = np.asarray(tensors[name])  # tobytes() is C order
        dt = {v: k for k, v in DTYPES.items()}[a.dtype.str]
        b = a.tobytes()
        header[name] = {"dtype": dt, "shape": list(a.shape),
                        "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    text = json.dumps(header).encode("utf-8")
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def main():
    exe, compare = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory() as d:
        ours = os.path.join(d, "ours.safetensors")
        subprocess.run([exe, "--write-sample", ours], check=True)
        t, meta = load(ours)
        assert list(t) == ["layer1.weight", "layer1.bias", "step"], list(t)
        w = np.arange(6, dtype=np.float32).reshape(2, 3) * np.float32(0.5) - np.float32(1)
        np.testing.assert_array_equal(t["layer1.weight"], w)
        b = np.float32(1) / np.arange(3, 6, dtype=np.float32)
        np.testing.assert_array_equal(t["layer1.bias"], b)
        assert t["step"].shape == () and t["step"].dtype == np.int64 and int(t["step"]) == 42
        assert meta == {"format": "pt", "step": "42"}, meta

        theirs = os.path.join(d, "theirs.safetensors")
        save(theirs, t, meta)
        r = subprocess.run([compare, ours, theirs], capture_output=True, text=True)
        assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
        assert "layer1.weight rel=0.000000e+00 maxabs=0.000000e+00" in r.stdout, r.stdout

        t2 = dict(t)
        t2["layer1.bias"] = t["layer1.bias"] * np.float32(1.001)
        save(theirs, t2, meta)
        r = subprocess.run([compare, ours, theirs], capture_output=True, text=True)
        assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
        r = subprocess.run([compare, "--rtol", "1e-2", ours, theirs], capture_output=True,
                           text=True)
        assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)

        # --moved: the bias's difference (1e-3 of it) against how far it
        # moved from an initial checkpoint: 1e-3 / 0.1 of the move, a
        # hundredth; the weight and the step did not move and are equal
        init = os.path.join(d, "init.safetensors")
        t0 = dict(t)
        t0["layer1.bias"] = t["layer1.bias"] * np.float32(0.9)
        save(init, t0, meta)
        r = subprocess.run([compare, "--rtol", "2e-2", "--moved", init, ours, theirs],
                           capture_output=True, text=True)
        assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
        line = [x for x in r.stdout.splitlines() if x.startswith("layer1.bias ")][0]
        rel = float(line.split("rel=")[1].split()[0])
        assert abs(rel - 1e-2) < 1e-3, line
        assert "moved=" in line, line
        r = subprocess.run([compare, "--rtol", "5e-3", "--moved", init, ours, theirs],
                           capture_output=True, text=True)
        assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
        t0["extra"] = np.zeros(1, dtype=np.float32)
        del t0["layer1.weight"]
        save(init, t0, meta)
        r = subprocess.run([compare, "--moved", init, ours, theirs], capture_output=True,
                           text=True)
        assert r.returncode == 1 and '"layer1.weight" is not in' in r.stderr, r.stderr

        del t2["step"]
        save(theirs, t2, meta)
        r = subprocess.run([compare, ours, theirs], capture_output=True, text=True)
        assert r.returncode == 1 and "\"step\" is in" in r.stderr, (r.returncode, r.stderr)

        r = subprocess.run([compare, ours, os.path.join(d, "missing")], capture_output=True,
                           text=True)
        assert r.returncode == 2 and "No such file" in r.stderr, (r.returncode, r.stderr)
    print("ok")


if __name__ == "__main__":
    main()
