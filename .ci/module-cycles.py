#!/usr/bin/env python3
"""Module cycles within each crate named on the command line.

A module depends on another when its code (not its comments or its
`#[cfg(test)] mod tests { .. }`, which sits at the end of a file by the
workspace's convention) names it through a `crate::`, `super::` or `self::`
path, in a `use` (groups expanded) or inline. A name the crate root
re-exports (`pub use log::PartitionLog;`) counts as the module it comes
from. The modules of each crate's `src/` (binaries under `src/bin/`
excluded) must form an acyclic graph: prints every strongly connected
component with its edges and exits 1 if there is one, else exits 0.

Reads source text only (no cargo, no rustc): fast and deterministic.
Usage: python3 .ci/module-cycles.py kafkalog manifest ...
"""
import os
import re
import sys
from collections import defaultdict


def modules(src):
    """Module path (tuple of names) -> file, for every .rs file under src."""
    mods = {}
    for dirpath, dirnames, filenames in os.walk(src):
        dirnames.sort()
        for f in sorted(filenames):
            if not f.endswith(".rs"):
                continue
            rel = os.path.relpath(os.path.join(dirpath, f), src)[:-3].split(os.sep)
            if rel[0] == "bin":
                continue
            if rel in (["lib"], ["main"]):
                path = ()
            elif rel[-1] == "mod":
                path = tuple(rel[:-1])
            else:
                path = tuple(rel)
            mods[path] = os.path.join(dirpath, f)
    return mods


TESTS = re.compile(r"#\[cfg\(test\)\]\s*(pub(\([a-z]+\))?\s+)?mod\s+\w+\s*\{")


def code(text):
    """The text without its test module, comments and string literals."""
    m = TESTS.search(text)
    if m:
        text = text[: m.start()]
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    lines = []
    for line in text.split("\n"):
        line = re.sub(r'"(\\.|[^"\\])*"', '""', line)
        lines.append(re.sub(r"//.*", "", line))
    return "\n".join(lines)


def expand(tree):
    """`a::{b, c::{d, e}}` -> ["a::b", "a::c::d", "a::c::e"]."""
    i = tree.find("{")
    if i < 0:
        return [tree.split(" as ")[0]]
    prefix, body = tree[:i], tree[i + 1 : tree.rfind("}")]
    parts, depth, cur = [], 0, ""
    for c in body:
        depth += c == "{"
        depth -= c == "}"
        if c == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += c
    parts.append(cur)
    out = []
    for p in filter(None, parts):
        out += [prefix.rstrip(":")] if p == "self" else expand(prefix + p)
    return out


def paths(text):
    found = []
    for m in re.finditer(r"\buse\s+([^;]+);", text):
        found += expand(re.sub(r"\s+", "", m.group(1)))
    found += re.findall(r"\b((?:crate|super|self)(?:::\w+)+)", text)
    return [p for p in found if p.split("::")[0] in ("crate", "super", "self")]


def target(path, here, mods, reexports):
    """The deepest known module a path names."""
    segs = path.split("::")
    if segs[0] == "crate":
        base, segs = (), segs[1:]
    elif segs[0] == "super":
        base = here
        while segs and segs[0] == "super":
            base, segs = base[:-1], segs[1:]
    else:
        base, segs = here, segs[1:]
    best = cur = base
    for s in segs:
        cur = cur + (s,)
        if cur not in mods:
            break
        best = cur
    if best == () and segs and segs[0] in reexports:
        best = reexports[segs[0]]
    return best


def graph(src):
    mods = modules(src)
    reexports = {}
    if () in mods:
        with open(mods[()]) as f:
            root = code(f.read())
        for m in re.finditer(r"\bpub\s+use\s+([^;]+);", root):
            for p in expand(re.sub(r"\s+", "", m.group(1))):
                segs = [s for s in p.split("::") if s != "crate"]
                if len(segs) >= 2 and (segs[0],) in mods:
                    reexports[segs[-1]] = (segs[0],)
    edges = defaultdict(set)
    for here, file in mods.items():
        if here == ():
            continue
        with open(file) as f:
            text = code(f.read())
        for p in paths(text):
            t = target(p, here, mods, reexports)
            if t not in ((), here):
                edges[here].add(t)
    return mods, edges


def cycles(nodes, edges):
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
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

    sys.setrecursionlimit(10000)
    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def name(m):
    return "::".join(m) or "crate"


def main(crates):
    found = False
    for crate in crates:
        mods, edges = graph(os.path.join(crate, "src"))
        for comp in cycles(mods.keys(), edges):
            found = True
            print(f"{crate}: module cycle: " + ", ".join(name(m) for m in comp))
            members = set(comp)
            for a in comp:
                for b in sorted(edges[a] & members):
                    print(f"    {name(a)} -> {name(b)}")
    return 1 if found else 0


if __name__ == "__main__":
    if len(sys.argv) < 2:
        print("usage: module-cycles.py CRATE_DIR...", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1:]))
