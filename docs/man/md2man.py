#!/usr/bin/env python3
"""Writes a manual page from a section of docs/cli.md: the '## NAME' section
(and, for the daemons, the shared '## Daemon options'), in roff.
Usage: md2man.py CLI.md NAME SECTION OUT [EXTRA-SECTION-TITLE ...]"""
import re
import sys


def sections(text):
    """The '## ' sections of the file: title -> lines."""
    out, title = {}, None
    for line in text.splitlines():
        if line.startswith("## "):
            title = line[3:].strip()
            out[title] = []
        elif title is not None:
            out[title].append(line)
    return out


def inline(s):
    s = s.replace("\\", "\\e")
    s = re.sub(r"`([^`]*)`", r"\\fB\1\\fR", s)
    s = re.sub(r"\*\*([^*]*)\*\*", r"\\fB\1\\fR", s)
    return s


def line_out(s):
    s = inline(s)
    return "\\&" + s if s.startswith((".", "'")) else s


def body(lines):
    out, para, i = [], [], 0

    def flush():
        if para:
            out.append(".PP")
            out.extend(line_out(p) for p in para)
            para.clear()

    while i < len(lines):
        l = lines[i]
        if l.startswith("### "):
            flush()
            out.append(".SH " + l[4:].strip().upper())
        elif l.startswith("```"):
            flush()
            out.append(".PP\n.nf")
            i += 1
            while i < len(lines) and not lines[i].startswith("```"):
                out.append(line_out(lines[i]))
                i += 1
            out.append(".fi")
        elif l.startswith("|"):
            flush()
            rows = []
            while i < len(lines) and lines[i].startswith("|"):
                cells = [c.strip() for c in lines[i].strip().strip("|").split("|")]
                if not all(re.fullmatch(r"-+", c) for c in cells):
                    rows.append(cells)
                i += 1
            for cells in rows[1:]:  # the first row is the header
                out.append(".TP\n" + line_out(cells[0]) + "\n" + line_out(" ".join(cells[1:])))
            continue
        elif not l.strip():
            flush()
        else:
            para.append(l.strip())
        i += 1
    flush()
    return out


def main():
    src, name, sec, dest = sys.argv[1:5]
    secs = sections(open(src).read())
    if name not in secs:
        sys.exit("md2man: no section '## %s' in %s" % (name, src))
    lines = secs[name]
    summary = next(l for l in lines if l.strip()).strip().rstrip(".")
    out = ['.TH "%s" "%s" "" "appliance" "Wafer-scale training appliance"' % (name.upper(), sec),
           ".SH NAME", "%s \\- %s" % (name, inline(summary[0].lower() + summary[1:]))]
    # the summary paragraph becomes NAME; the rest follows
    k = 0
    while k < len(lines) and not lines[k].strip():
        k += 1
    while k < len(lines) and lines[k].strip():
        k += 1
    out += body(lines[k:])
    for extra in sys.argv[5:]:
        out.append(".SH " + extra.upper())
        out += body(secs[extra])
    out.append(".SH SEE ALSO")
    out.append("appliance-submit(1), coordinator(8), memoryx(8), swarmx(8), worker(8), wse-node(8)")
    open(dest, "w").write("\n".join(out) + "\n")


main()
