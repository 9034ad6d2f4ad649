#!/usr/bin/env python3
"""deploy/Dockerfile without a Docker engine, printed as TAP:

  - the runtime stage installs every shared library the built binary needs: `dpkg -S` names
    the Debian package of each library; the packages of the libraries the ELF file names itself
    (NEEDED) must be in the runtime stage's apt-get install list, and those of every library
    `ldd` resolves (their own dependencies too) must be in that list's dependency closure
    (`apt-cache depends --recurse`); libc6 comes with the base image. Every listed package must
    exist in the archive, so a typo fails too;
  - both stages are Debian 12, the build stage runs scripts/install-deps.sh and make, the runtime
    stage runs as a non-root user with /models as a volume;
  - the HEALTHCHECK command itself, run here against a live server: 0 when healthy, non-zero
    when nothing listens.
"""

import json
import os
import re
import shlex
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deploylib as dl  # noqa: E402

tap = dl.Tap()
BASE_PROVIDED = {"libc6"}  # in every Debian image


def stages(text):
    """[(from_line, [instructions])] with continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n\s*", " ", "\n".join(
        ln for ln in text.splitlines() if not ln.lstrip().startswith("#")))
    out = []
    for line in joined.splitlines():
        line = line.strip()
        if not line:
            continue
        if line.upper().startswith("FROM "):
            out.append((line, []))
        elif out:
            out[-1][1].append(line)
    return out


def apt_packages(instructions):
    pkgs = set()
    for ins in instructions:
        if not ins.upper().startswith("RUN "):
            continue
        for cmd in re.split(r"&&|;", ins[4:]):
            words = shlex.split(cmd)
            if words[:2] == ["apt-get", "install"]:
                pkgs.update(w for w in words[2:] if not w.startswith("-"))
    return pkgs


def needed_packages(binary, direct_only=False):
    """{package: [library paths]} of every library ldd resolves for the binary (direct_only:
    only those named by the binary's own NEEDED entries)."""
    out = subprocess.run(["ldd", binary], capture_output=True, text=True, check=True).stdout
    direct = set(re.findall(r"\(NEEDED\).*\[(.*)\]", subprocess.run(
        ["readelf", "-d", binary], capture_output=True, text=True, check=True).stdout))
    need = {}
    for line in out.splitlines():
        m = re.search(r"^\s*(\S+)\s*=>\s*(/\S+)", line)
        if not m or (direct_only and m.group(1) not in direct):
            continue
        path = m.group(2)
        for cand in (path, os.path.realpath(path), path.replace("/lib/", "/usr/lib/", 1)):
            p = subprocess.run(["dpkg", "-S", cand], capture_output=True, text=True)
            if p.returncode == 0:
                pkg = p.stdout.split(":")[0].strip()
                need.setdefault(pkg, []).append(path)
                break
        else:
            need.setdefault("?unowned", []).append(path)
    return need


def missing(need, have):
    return {p: v for p, v in need.items() if p not in have and p not in BASE_PROVIDED}


def closure(pkgs):
    """The packages apt installs for `pkgs`: their Depends/PreDepends, recursively."""
    out = subprocess.run(["apt-cache", "depends", "--recurse", "--no-recommends", "--no-suggests",
                          "--no-conflicts", "--no-breaks", "--no-replaces", "--no-enhances"]
                         + sorted(pkgs), capture_output=True, text=True).stdout
    return {ln.strip() for ln in out.splitlines() if ln and not ln.startswith(" ")}


def main():
    with open(os.path.join(dl.ROOT, "deploy", "Dockerfile")) as f:
        st = stages(f.read())
    tap.check(len(st) == 2, "two stages", [s[0] for s in st])
    if len(st) != 2:
        tap.finish()
    (build_from, build), (run_from, run) = st
    tap.check(all(re.match(r"FROM debian:12(-slim)?\b", s[0]) for s in st),
              "both stages are Debian 12", [s[0] for s in st])
    tap.check(any("scripts/install-deps.sh" in i for i in build) and
              any(re.search(r"\bmake\b.*\ball\b", i) for i in build),
              "the build stage runs scripts/install-deps.sh and make", build)

    have = apt_packages(run)
    direct = needed_packages(dl.TL_BIN, direct_only=True)
    need = needed_packages(dl.TL_BIN)
    tap.note("packages of the libraries %s names: %s" % (os.path.basename(dl.TL_BIN),
                                                          sorted(direct)))
    tap.note("packages of all the libraries ldd resolves: %s" % sorted(need))
    tap.note("runtime stage installs: %s" % sorted(have))
    gap = missing(direct, have)
    tap.check(direct and not gap, "the runtime stage installs the package of every library the "
              "binary names (NEEDED)", "missing: %s" % gap)
    installed = closure(have)
    gap = missing(need, installed)
    tap.check(need and not gap, "with their dependencies, every library ldd resolves is installed",
              "missing: %s" % {p: v[:3] for p, v in gap.items()})
    # The check can fail: the same list without one of its libraries.
    drop = sorted(p for p in direct if p in have)[:1]
    tap.check(drop and missing(direct, have - set(drop)) != {},
              "control: dropping %s from the list is caught" % drop)
    unknown = [p for p in sorted(have)
               if subprocess.run(["apt-cache", "show", p], capture_output=True).returncode]
    tap.check(have and not unknown, "every runtime package exists in the Debian archive",
              unknown)
    build_only = [p for p in have if p.endswith("-dev") or p in ("build-essential", "gcc")]
    tap.check(not build_only, "the runtime stage has no build packages", build_only)

    user = [i.split()[1] for i in run if i.upper().startswith("USER ")]
    tap.check(user and user[-1].split(":")[0] not in ("0", "root"),
              "the runtime stage runs as a non-root user", user)
    tap.check(any(i.upper().startswith("VOLUME ") and "/models" in i for i in run),
              "/models is a volume")
    hc = [i for i in run if i.upper().startswith("HEALTHCHECK ")]
    tap.check(len(hc) == 1 and "/health" in hc[0], "one HEALTHCHECK, on /health", hc)
    if not hc:
        tap.finish()
    cmd = json.loads(hc[0][hc[0].index("CMD ") + 4:])
    c = dl.Cluster(1, gateway=False)
    try:
        why = c.start()
        if tap.check(not why, "a server starts for the HEALTHCHECK command", why):
            port = str(c.replicas[0].port)
            live = [a.replace("/8000", "/" + port) for a in cmd]
            rc_up = subprocess.run(live, capture_output=True, timeout=10).returncode
            dead = [a.replace("/8000", "/%d" % dl.free_port()) for a in cmd]
            rc_down = subprocess.run(dead, capture_output=True, timeout=10).returncode
            tap.check(rc_up == 0 and rc_down != 0,
                      "the HEALTHCHECK command: 0 on a healthy server, non-zero on a closed port",
                      "healthy -> %d, closed -> %d" % (rc_up, rc_down))
    finally:
        c.close()
    tap.finish()


if __name__ == "__main__":
    main()
