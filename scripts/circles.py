#!/usr/bin/env python3
"""Lists the circles among a folder's files, read from the built objects: file A calls file B
when A's object file leaves undefined (nm "U") a symbol B's object defines ("T", "D", "R", "B").
A circle is a strongly connected group of two or more files. Calls only: names shared through
headers (types, macros, static inline functions) draw no arrow, unlike a reading of the sources.

Usage: python3 scripts/circles.py [BUILD] [FOLDER ...]   (after `make`; default build, every
folder of src/). Exit code 1 when a circle is found.
"""
import glob
import os
import subprocess
import sys


def symbols(obj):
    defined, undefined = set(), set()
    for line in subprocess.run(["nm", obj], capture_output=True, text=True).stdout.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] in "TDRB":
            defined.add(parts[2])
        elif len(parts) == 2 and parts[0] == "U":
            undefined.add(parts[1])
    return defined, undefined


def circles(objs):
    table = {o: symbols(o) for o in objs}
    owner = {s: o for o, (d, _) in table.items() for s in d}
    calls = {o: {owner[s] for s in u if s in owner and owner[s] != o}
             for o, (_, u) in table.items()}
    index, low, stack, on, found, n = {}, {}, [], set(), [], [0]

    def visit(v):  # Tarjan's strongly connected components
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in calls[v]:
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
                found.append(sorted(comp))

    for v in objs:
        if v not in index:
            visit(v)
    return found, calls


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    folders = sys.argv[2:] or sorted({os.path.dirname(p)[len(build) + 1:]
                                      for p in glob.glob(build + "/src/**/*.o", recursive=True)})
    bad = 0
    for folder in folders:
        objs = sorted(glob.glob(os.path.join(build, folder, "*.o")))
        found, calls = circles(objs)
        for comp in found:
            bad += 1
            names = [os.path.basename(c)[:-2] for c in comp]
            print("%s: %s" % (folder, " <-> ".join(names)))
            for a in comp:
                for b in sorted(calls[a] & set(comp)):
                    print("    %s -> %s" % (os.path.basename(a)[:-2], os.path.basename(b)[:-2]))
    if not bad:
        print("no circles")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
