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
  interface others implement and takes no part);
- with the build directory: no two files of one library or program call each
  other, directly or round a longer loop, unless the loop is listed in
  call_loops.txt beside this script. A library or program is a daemon's
  folder, wse-node/kernels/ or a library of common/; file A calls file B when
  A's object uses an external symbol (nm: U) that B's object defines (T, D,
  B, R and the rarer global kinds). Every strongly connected component of
  more than one file fails, named with its files and, for each call in it,
  a symbol or two; so does a listed loop that no longer exists as listed.

Usage: check_layout.py SOURCE_ROOT [BUILD_DIR]   checks the tree (and, with
                                                 BUILD_DIR, its objects' calls)
       check_layout.py --self-test               shows that broken trees fail
"""
import json
import os
import re
import shlex
import shutil
import subprocess
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


def check(root, build=None, allowed_path=None, nm="nm"):
    """Every error of the tree at root; with build, of its objects' calls too."""
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
    if build is not None:
        errors += call_loops(root, build, allowed_path or ALLOWED, nm)
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
    return [path_in(comp, edges) for comp in components(edges)]


def components(edges):
    """The strongly connected components of more than one node, each sorted."""
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
                out.append(sorted(comp))

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


# --- calls between the files of one library or program ---------------------

# The allowed call loops, one a line (call_loops.txt says how).
ALLOWED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "call_loops.txt")
# nm -P kinds: a global definition (text, data, bss, read-only data, and the
# rarer weak, common, small and indirect ones), and an undefined use
DEFINES = set("TDBRWVCGSiu")
USES = set("U")
ALLOWED_LINE = re.compile(r"^([\w./-]+?)/?:\s+(\S.*?)\s+--\s+(\S.*)$")


def unit_of(rel):
    """The library or program a path (relative to the root) belongs to: a
    daemon's folder, wse-node/kernels or common/<lib>; None for the rest."""
    parts = rel.replace(os.sep, "/").split("/")
    if len(parts) > 2 and parts[0] == "common":
        return "common/" + parts[1]
    if len(parts) > 2 and parts[:2] == ["wse-node", "kernels"]:
        return "wse-node/kernels"
    if len(parts) > 1 and parts[0] in DAEMONS:
        return parts[0]
    return None


def read_allowed(path):
    """The allowed loops: (folder, files it must have, files it may have,
    reason) each; and the errors of the file."""
    allowed, errors = [], []
    if not os.path.exists(path):
        return allowed, errors
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            m = ALLOWED_LINE.match(line)
            words = m.group(2).split() if m else []
            must = frozenset(w for w in words if not w.startswith("["))
            may = frozenset(w[1:-1] for w in words if w.startswith("[") and w.endswith("]"))
            if not m or len(must) < 2 or len(must) + len(may) != len(words):
                errors.append("%s:%d: not 'folder: file.c file.c [file.c] -- reason': %s"
                              % (os.path.basename(path), n, line))
                continue
            allowed.append((m.group(1), must, may, m.group(3)))
    return allowed, errors


def loop_text(must, may):
    return " ".join(sorted(must) + ["[%s]" % f for f in sorted(may)])


def objects(root, build):
    """source (relative to root) -> its object files, for every target the
    folder of a library or program defines; and the errors (not built)."""
    info = os.path.join(build, "meson-info", "intro-targets.json")
    if not os.path.isfile(info):
        return {}, ["%s is no meson build directory (no meson-info/intro-targets.json)" % build]
    with open(info) as f:
        targets = json.load(f)
    root = os.path.realpath(root)
    out, errors = {}, []
    for t in targets:
        tdir = os.path.dirname(os.path.realpath(t["defined_in"]))
        unit = unit_of(os.path.relpath(os.path.realpath(t["defined_in"]), root))
        if unit is None or t["type"] not in ("executable", "static library", "shared library"):
            continue
        private = t["filename"][0] + ".p"  # meson's folder of the target's objects
        for group in t["target_sources"]:
            for src in group.get("sources", []):
                src = os.path.realpath(src)
                rel = os.path.relpath(src, root)
                if not src.endswith(".c") or unit_of(rel) != unit:
                    continue
                obj = os.path.join(private, os.path.relpath(src, tdir).replace(os.sep, "_") + ".o")
                if not os.path.isfile(obj):
                    errors.append("%s: no object %s: build first (ninja -C %s); under meson "
                                  "test, its target belongs in tests/layout/meson.build's "
                                  "layout_targets" % (rel, obj, build))
                    continue
                out.setdefault(rel, []).append(obj)
    return out, errors


def symbols(objs, nm):
    """object -> the external symbols it defines, and those it uses."""
    out = {obj: (set(), set()) for obj in objs}
    if not objs:
        return out
    text = subprocess.run([nm, "-P", "-A"] + sorted(objs), check=True,
                          stdout=subprocess.PIPE, universal_newlines=True).stdout
    for line in text.splitlines():
        obj, _, rest = line.rpartition(": ")
        f = rest.split()
        if obj not in out or len(f) < 2:
            continue
        if f[1] in DEFINES:
            out[obj][0].add(f[0])
        elif f[1] in USES:
            out[obj][1].add(f[0])
    return out


def call_graphs(root, build, nm):
    """folder -> (file -> the files it calls, (file, file) -> the symbols),
    files named relative to their folder; and the errors."""
    objs, errors = objects(root, build)
    syms = symbols([obj for paths in objs.values() for obj in paths], nm)
    units = {}
    for rel, paths in objs.items():
        defines, uses = set(), set()
        for obj in paths:
            defines |= syms[obj][0]
            uses |= syms[obj][1]
        unit = unit_of(rel)
        name = os.path.relpath(rel, unit).replace(os.sep, "/")
        units.setdefault(unit, {})[name] = (defines, uses)
    graphs = {}
    for unit, files in units.items():
        where = {}
        for name, (defines, _) in files.items():
            for sym in defines:
                where.setdefault(sym, set()).add(name)
        edges, why = {name: set() for name in files}, {}
        for name, (_, uses) in files.items():
            for sym in uses:
                for other in where.get(sym, ()):
                    if other != name:
                        edges[name].add(other)
                        why.setdefault((name, other), set()).add(sym)
        graphs[unit] = (edges, why)
    return graphs, errors


def call_loops(root, build, allowed_path, nm="nm"):
    """Every call loop between the files of one library or program that the
    allowed list does not name, and every listed loop that is gone."""
    allowed, errors = read_allowed(allowed_path)
    listed = os.path.relpath(os.path.realpath(allowed_path), os.path.realpath(root))
    if listed.startswith(".."):
        listed = os.path.basename(allowed_path)
    graphs, more = call_graphs(root, build, nm)
    errors += more
    found = set()
    for unit in sorted(graphs):
        edges, why = graphs[unit]
        for comp in components(edges):
            files = set(comp)
            ok = [i for i, (u, must, may, _) in enumerate(allowed)
                  if u == unit and must <= files <= must | may]
            if ok:
                found.update(ok)
                continue
            lines = ["%s: files call each other: %s" % (unit, " ".join(comp))]
            for a in comp:
                for b in sorted(edges[a] & files):
                    syms = sorted(why[(a, b)])
                    lines.append("    %s -> %s: %s%s" % (
                        a, b, ", ".join(syms[:2]),
                        " and %d more" % (len(syms) - 2) if len(syms) > 2 else ""))
            near = sorted(loop_text(must, may) for (u, must, may, _) in allowed
                          if u == unit and (must | may) & files)
            if near:
                lines.append("    %s allows %s: %s: if this loop is what that one has become, "
                             "list these files there instead" % (listed, unit, "; ".join(near)))
            else:
                lines.append("    break the loop (or, if it must stay, list it in %s "
                             "with the reason)" % listed)
            errors.append("\n".join(lines))
    for i, (unit, must, may, reason) in enumerate(allowed):
        if i not in found:
            errors.append("%s: %s allows a loop that is gone: %s (%s): delete its line, or "
                          "name the files the loop has now" % (unit, listed, loop_text(must, may),
                                                              reason))
    return errors


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
    calls = self_test_calls()
    print("layout self-test: %d trees checked" % (5 + calls))


def compile_tree(root, build, target, folder, files):
    """Compiles files (name -> C text) of folder as meson would the target
    folder/meson.build defines, and writes the introspection that names them."""
    compiler = shlex.split(os.environ.get("CC", "")) or [shutil.which("cc") or shutil.which("gcc")]
    assert compiler[0], "the self-test compiles C: no cc (set CC)"
    info = os.path.join(build, "meson-info", "intro-targets.json")
    targets = []
    if os.path.exists(info):
        with open(info) as f:
            targets = [t for t in json.load(f) if t["name"] != target]
    out = os.path.join(build, folder, "lib%s.a" % target)
    os.makedirs(out + ".p", exist_ok=True)
    for name, text in files.items():
        write(root, os.path.join(folder, name), text)
        subprocess.run(compiler + ["-c", "-O2", "-o", os.path.join(out + ".p", name + ".o"),
                        os.path.join(root, folder, name)], check=True)
    targets.append({"name": target, "type": "static library",
                    "defined_in": os.path.join(root, folder, "meson.build"),
                    "filename": [out],
                    "target_sources": [{"language": "c", "sources": [
                        os.path.join(root, folder, name) for name in sorted(files)]}]})
    os.makedirs(os.path.dirname(info), exist_ok=True)
    with open(info, "w") as f:
        json.dump(targets, f)


def self_test_calls():
    """Files that call each other round a loop fail, named with the symbols
    of each call; a broken or allowed loop passes; a listed loop that is gone
    fails. Returns how many trees it checked."""
    loop = {
        "a.c": "int b(int);\nint a(int x) { return x ? b(x - 1) : 0; }\n",
        "b.c": "int c(int);\nextern int table[];\nint b(int x) { return c(x) + table[x & 1]; }\n",
        "c.c": "int a(int);\nint table[2] = {1, 2};\nint c(int x) { return a(x); }\n",
    }
    with tempfile.TemporaryDirectory() as root:
        build = os.path.join(root, "build")
        allowed = os.path.join(root, "call_loops.txt")
        # a.c calls b.c, b.c calls c.c (c and its table), c.c calls a.c back
        compile_tree(root, build, "wse_node", "wse-node", loop)
        # another library's calls make no loop with this one's: x.c calls
        # a.c of the wse-node, whose a.c does not call x.c
        compile_tree(root, build, "base", "common/base",
                     {"x.c": "int a(int);\nint x(int v);\nint x(int v) { return a(v); }\n"})
        e = check(root, build, allowed)
        assert len(e) == 1 and e[0].startswith("wse-node: files call each other: a.c b.c c.c"), e
        for line in ["a.c -> b.c: b\n", "b.c -> c.c: c, table\n", "c.c -> a.c: a\n",
                     "break the loop"]:
            assert line in e[0], (line, e)
        # allowed, with its reason: passes
        write(root, "call_loops.txt", "# the loop\nwse-node: c.c a.c b.c -- a test's loop\n")
        e = check(root, build, allowed)
        assert e == [], e
        # allowed with one file too few: the loop fails and says which line
        # is near, and that line's loop is gone
        write(root, "call_loops.txt", "wse-node: a.c b.c -- a test's loop\n")
        e = check(root, build, allowed)
        assert len(e) == 2 and "call_loops.txt allows wse-node: a.c b.c" in e[0], e
        assert "call_loops.txt allows a loop that is gone: a.c b.c (a test's loop)" in e[1], e
        # a file in brackets may be in the loop or not
        write(root, "call_loops.txt", "wse-node: a.c b.c [c.c] -- a test's loop\n")
        e = check(root, build, allowed)
        assert e == [], e
        # broken (c.c calls a.c no more): no loop, and the allowed one is gone
        compile_tree(root, build, "wse_node", "wse-node", dict(loop, **{
            "c.c": "int table[2] = {1, 2};\nint c(int x);\nint c(int x) { return x; }\n"}))
        e = check(root, build, allowed)
        assert len(e) == 1 and "call_loops.txt allows a loop that is gone" in e[0], e
        write(root, "call_loops.txt", "")
        e = check(root, build, allowed)
        assert e == [], e
        # two files that call each other, the shortest loop
        compile_tree(root, build, "wse_node", "wse-node", dict(loop, **{
            "b.c": "int a(int);\nint b(int x);\nint b(int x) { return a(x); }\n"}))
        e = check(root, build, allowed)
        assert len(e) == 1 and "wse-node: files call each other: a.c b.c\n" in e[0], e
        # an object not built is named
        os.remove(os.path.join(build, "wse-node", "libwse_node.a.p", "a.c.o"))
        e = check(root, build, allowed)
        assert len(e) == 1 and "wse-node/a.c: no object" in e[0], e
    return 7


def main():
    if sys.argv[1:] == ["--self-test"]:
        self_test()
        return 0
    if len(sys.argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        return 2
    build = sys.argv[2] if len(sys.argv) == 3 else None
    errors = check(sys.argv[1], build, nm=os.environ.get("NM", "nm"))
    for e in errors:
        print("layout: " + e, file=sys.stderr)
    if errors:
        return 1
    print("layout: the tree keeps its shape")
    return 0


if __name__ == "__main__":
    sys.exit(main())
