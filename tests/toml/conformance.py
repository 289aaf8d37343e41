#!/usr/bin/env python3
"""Runs the toml-test cases (TOML 1.0) through toml-decode.

usage: conformance.py TOML_DECODE SUITE_DIR REFUSED_LIST

Each valid/X.toml must decode to the tagged JSON of valid/X.json; each
invalid/X.toml must be refused. The valid cases named in REFUSED_LIST hold
date-times, which the parser refuses by design: they must be refused with
the date-time message. Exits 77 (skipped) when SUITE_DIR does not exist.
"""
import json
import math
import os
import subprocess
import sys

DATETIME_MESSAGE = "date-times are not supported"


def scalar_equal(want, got):
    if want.get("type") != got.get("type"):
        return False
    wv, gv = want.get("value"), got.get("value")
    if want["type"] == "float":
        try:
            a, b = float(wv), float(gv)
        except (TypeError, ValueError):
            return False
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return a == b
    if want["type"] == "integer":
        try:
            return int(wv) == int(gv)
        except (TypeError, ValueError):
            return False
    return wv == gv


def is_tagged(x):
    return isinstance(x, dict) and set(x.keys()) == {"type", "value"} and isinstance(x["type"], str)


def equal(want, got, path="$"):
    """Returns None when equal, else a description of the first difference."""
    if is_tagged(want):
        if not is_tagged(got) or not scalar_equal(want, got):
            return f"{path}: want {json.dumps(want)}, got {json.dumps(got)}"
        return None
    if isinstance(want, dict):
        if not isinstance(got, dict) or is_tagged(got):
            return f"{path}: want a table, got {json.dumps(got)[:80]}"
        if set(want) != set(got):
            return f"{path}: keys differ: want {sorted(want)}, got {sorted(got)}"
        for k in want:
            d = equal(want[k], got[k], f"{path}.{k}")
            if d:
                return d
        return None
    if isinstance(want, list):
        if not isinstance(got, list) or len(want) != len(got):
            return f"{path}: want an array of {len(want)}, got {json.dumps(got)[:80]}"
        for i, (w, g) in enumerate(zip(want, got)):
            d = equal(w, g, f"{path}[{i}]")
            if d:
                return d
        return None
    return f"{path}: unexpected expected-value {json.dumps(want)[:80]}"


def run(decoder, path):
    with open(path, "rb") as f:
        text = f.read()
    p = subprocess.run([decoder], input=text, capture_output=True, timeout=30)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def main():
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    decoder, suite, refused_list = sys.argv[1:]
    if not os.path.isdir(suite):
        print(f"toml-test: suite directory {suite} not found, skipping")
        return 77
    with open(refused_list) as f:
        refused = {l.strip() for l in f if l.strip() and not l.startswith("#")}
    with open(os.path.join(suite, "files-toml-1.0.0")) as f:
        cases = [l.strip() for l in f if l.strip().endswith(".toml")]

    passed = failed = by_design = 0
    failures = []
    seen_refused = set()
    for case in cases:
        path = os.path.join(suite, case)
        rc, out, err = run(decoder, path)
        if case.startswith("invalid/"):
            if rc == 1 and err.strip():
                passed += 1
            else:
                failed += 1
                failures.append(f"{case}: not refused with an error (exit {rc})")
            continue
        if case in refused:
            seen_refused.add(case)
            if rc == 1 and DATETIME_MESSAGE in err:
                by_design += 1
            else:
                failed += 1
                failures.append(f"{case}: listed as refused by design, but got exit {rc}: {err.strip()}")
            continue
        if rc != 0:
            failed += 1
            failures.append(f"{case}: refused: {err.strip()}")
            continue
        with open(path[:-5] + ".json", encoding="utf-8") as f:
            want = json.load(f)
        try:
            got = json.loads(out)
        except ValueError as e:
            failed += 1
            failures.append(f"{case}: output is not JSON ({e})")
            continue
        diff = equal(want, got)
        if diff:
            failed += 1
            failures.append(f"{case}: {diff}")
        else:
            passed += 1

    for case in sorted(refused - seen_refused):
        failed += 1
        failures.append(f"{case}: listed in the refused list but not a valid case of the suite")
    for line in failures:
        print("FAIL " + line)
    print(f"toml-test: {passed} passed, {failed} failed, {by_design} refused by design")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
