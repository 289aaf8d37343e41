#!/usr/bin/env python3
"""The shape of the source tree, checked (docs/architecture.md, "Where things
are"):

- a daemon's folder (memoryx, swarmx, worker, coordinator, wse-node, client)
  includes only its own headers, common/'s and the generated protocol's: never
  a header of another daemon's folder;
- common/ includes no daemon's header, and each library of common/ only the
  headers of the libraries its meson.build declares it depends on;
- no two modules include each other, and no longer include cycle exists
  (a module is a .c file and its .h; a header with no .c of its own is an
  interface others implement and takes no part).

Usage: check_layout.py SOURCE_ROOT      checks the tree
       check_layout.py --self-test      shows that broken trees fail
"""
import os
import re
import sys
import tempfile

DAEMONS = ["memoryx", "swarmx", "worker", "coordinator", "wse-node", "client"]
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
DEP = re.compile(r"\b([a-z_]+)_dep\b")


def sources(root, top):
    for d, _, files in os.walk(os.path.join(root, top)):
        for f in sorted(files):
            if f.endswith((".c", ".h")):
                yield os.path.join(d, f)


def includes(path):
    with open(path, errors="replace") as f:
        return INCLUDE.findall(f.read())


def headers(root, tops):
    """header name -> the top folders (or common/<lib>) that hold one."""
    where = {}
    for top in tops:
        for p in sources(root, top):
            if p.endswith(".h"):
                rel = os.path.relpath(p, root).split(os.sep)
                owner = "/".join(rel[:2]) if rel[0] == "common" else rel[0]
                where.setdefault(os.path.basename(p), set()).add(owner)
    return where


def common_libs(root):
    """common/<lib> -> the common libraries its meson.build depends on."""
    libs = {}
    base = os.path.join(root, "common")
    for lib in sorted(os.listdir(base)):
        mb = os.path.join(base, lib, "meson.build")
        if os.path.isfile(mb):
            with open(mb) as f:
                libs[lib] = set(DEP.findall(f.read()))
    names = set(libs)
    deps = {lib: {d for d in ds if d in names and d != lib} for lib, ds in libs.items()}
    # a dependency's own dependencies come with it
    changed = True
    while changed:
        changed = False
        for lib in deps:
            more = set().union(*(deps[d] for d in deps[lib])) if deps[lib] else set()
            if not more <= deps[lib]:
                deps[lib] |= more
                changed = True
    return deps


def check(root):
    errors = []
    tops = [t for t in DAEMONS + ["common"] if os.path.isdir(os.path.join(root, t))]
    where = headers(root, tops)
    libdeps = common_libs(root) if "common" in tops else {}
    for top in tops:
        for p in sources(root, top):
            rel = os.path.relpath(p, root)
            parts = rel.split(os.sep)
            own = "/".join(parts[:2]) if top == "common" else top
            for inc in includes(p):
                name = os.path.basename(inc)
                if name.endswith(".pb-c.h") or name not in where:
                    continue  # generated, or a system/test header
                owners = where[name]
                if own in owners:
                    continue
                if top != "common":
                    others = sorted(o for o in owners if not o.startswith("common"))
                    if others and not any(o.startswith("common") for o in owners):
                        errors.append("%s includes %s of %s: a daemon's folder includes only its "
                                      "own headers and common/'s" % (rel, name, others[0]))
                    continue
                lib = parts[1]
                daemon = sorted(o for o in owners if not o.startswith("common"))
                if daemon and not any(o.startswith("common") for o in owners):
                    errors.append("%s includes %s of %s: common/ includes no daemon's header"
                                  % (rel, name, daemon[0]))
                    continue
                libs = sorted(o.split("/")[1] for o in owners if o.startswith("common/"))
                if libs and not any(l in libdeps.get(lib, set()) for l in libs):
                    errors.append("%s includes %s of common/%s, which common/%s/meson.build does "
                                  "not depend on" % (rel, name, libs[0], lib))
    errors += cycles(root, tops)
    return errors


def cycles(root, tops):
    """Include cycles between modules, each folder apart."""
    errors = []
    for top in tops:
        by_dir = {}
        for p in sources(root, top):
            by_dir.setdefault(os.path.dirname(p), []).append(p)
        for d, files in sorted(by_dir.items()):
            # an interface header with no .c of its own (dataset_reader.h)
            # declares what others implement: it cannot call back
            mods = {os.path.splitext(os.path.basename(p))[0] for p in files if p.endswith(".c")}
            edges = {m: set() for m in mods}
            for p in files:
                m = os.path.splitext(os.path.basename(p))[0]
                if m not in mods:
                    continue
                for inc in includes(p):
                    t = os.path.splitext(os.path.basename(inc))[0]
                    if t in mods and t != m and inc.endswith(".h"):
                        edges[m].add(t)
            for cyc in find_cycles(edges):
                errors.append("%s: modules include each other: %s" % (
                    os.path.relpath(d, root), " -> ".join(cyc + [cyc[0]])))
    return errors


def find_cycles(edges):
    """One cycle per strongly connected component of more than one module."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(path_in(sorted(comp), edges))

    for v in sorted(edges):
        if v not in index:
            strong(v)
    return out


def path_in(comp, edges):
    """A cycle through the first module of a component."""
    members = set(comp)
    start = comp[0]
    prev = {start: None}
    queue = [start]
    while queue:
        v = queue.pop(0)
        for w in sorted(edges[v] & members):
            if w == start:
                path = [v]
                while prev[path[-1]] is not None:
                    path.append(prev[path[-1]])
                return list(reversed(path))
            if w not in prev:
                prev[w] = v
                queue.append(w)
    return comp


def write(root, rel, text):
    p = os.path.join(root, rel)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    with open(p, "w") as f:
        f.write(text)


def self_test():
    """A good tree passes; each kind of break is caught and named."""
    with tempfile.TemporaryDirectory() as root:
        write(root, "common/base/meson.build", "base_dep = 1\n")
        write(root, "common/base/log.h", "")
        write(root, "common/wire/meson.build", "wire_lib = x(dependencies : [base_dep])\n")
        write(root, "common/wire/conn.h", '#include "log.h"\n')
        write(root, "wse-node/exec.h", '#include "conn.h"\n')
        write(root, "wse-node/exec.c", '#include "exec.h"\n#include "foo.pb-c.h"\n#include <stdio.h>\n')
        write(root, "coordinator/planner.c", '#include "conn.h"\n')
        assert check(root) == [], check(root)
        write(root, "coordinator/planner.c", '#include "exec.h"\n')
        e = check(root)
        assert len(e) == 1 and "coordinator/planner.c includes exec.h of wse-node" in e[0], e
        write(root, "coordinator/planner.c", "")
        write(root, "common/base/log.c", '#include "conn.h"\n')
        e = check(root)
        assert len(e) == 1 and "does not depend on" in e[0], e
        write(root, "common/base/log.c", '#include "exec.h"\n')
        e = check(root)
        assert len(e) == 1 and "common/ includes no daemon's header" in e[0], e
        write(root, "common/base/log.c", "")
        write(root, "wse-node/step.h", "")
        write(root, "wse-node/step.c", '#include "exec.h"\n')
        write(root, "wse-node/exec.c", '#include "step.h"\n')
        e = check(root)
        assert len(e) == 1 and "modules include each other: exec -> step -> exec" in e[0], e
    print("layout self-test: 5 trees checked")


def main():
    if sys.argv[1:] == ["--self-test"]:
        self_test()
        return 0
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    errors = check(sys.argv[1])
    for e in errors:
        print("layout: " + e, file=sys.stderr)
    if errors:
        return 1
    print("layout: the tree keeps its shape")
    return 0


if __name__ == "__main__":
    sys.exit(main())
