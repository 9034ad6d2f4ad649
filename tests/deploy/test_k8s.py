#!/usr/bin/env python3
"""The Kubernetes manifests (deploy/k8s), offline, printed as TAP: `kubectl kustomize` renders
the base and the example overlay, and validate_k8s.mjs checks every rendered object against its
schema (npm kubernetes-models and friends, installed here with `npm ci` from
package-lock.json) and that the objects fit together. Known-bad inputs must be rejected, so the
validator is shown to be able to fail.
"""

import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deploylib as dl  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
tap = dl.Tap()

BAD_DEPLOYMENT = """apiVersion: apps/v1
kind: Deployment
metadata: {name: bad}
spec:
  selector: {matchLabels: {a: b}}
  template:
    metadata: {labels: {a: b}}
    spec:
      containers: [{name: c, image: i, ports: [{containerPort: "8000"}]}]
"""
BAD_POOL = """apiVersion: inference.networking.k8s.io/v1
kind: InferencePool
metadata: {name: bad}
spec:
  selector: {matchLabels: {a: b}}
  endpointPickerRef: {name: epp}
"""


def run_validator(path, *extra):
    p = subprocess.run(["node", os.path.join(HERE, "validate_k8s.mjs"), path] + list(extra),
                       capture_output=True, text=True, cwd=HERE)
    lines = (p.stdout + p.stderr).splitlines()
    results = []
    for i, line in enumerate(lines):
        if line.startswith("ok ") or line.startswith("not ok "):
            detail = []
            for d in lines[i + 1:]:
                if not d.startswith("#"):
                    break
                detail.append(d[2:])
            results.append((line.startswith("ok "), line.split(" ", 2 if line[0] == "n" else 1)[-1],
                            "\n".join(detail)))
    return p.returncode, results, "\n".join(lines[-20:])


def main():
    if not shutil.which("kubectl"):
        tap.check(False, "kubectl is installed (scripts/install-deps.sh: kubernetes-client)")
        tap.finish()
    if not os.path.isdir(os.path.join(HERE, "node_modules", "kubernetes-models")):
        p = subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=HERE,
                           capture_output=True, text=True)
        if not tap.check(p.returncode == 0, "npm ci installs the schema models",
                         (p.stdout + p.stderr)[-2000:]):
            tap.finish()
    tmp = tempfile.mkdtemp(prefix="tl-k8s-")
    try:
        for name in ("base", "overlays/example"):
            src = os.path.join(dl.ROOT, "deploy", "k8s", name)
            p = subprocess.run(["kubectl", "kustomize", src], capture_output=True, text=True)
            out = os.path.join(tmp, name.replace("/", "_") + ".yaml")
            with open(out, "w") as f:
                f.write(p.stdout)
            if not tap.check(p.returncode == 0 and "kind: Deployment" in p.stdout,
                             "kubectl kustomize renders deploy/k8s/%s" % name, p.stderr[-2000:]):
                continue
            rc, results, tail = run_validator(out)
            if not tap.check(rc == 0 and len(results) >= 8,
                             "%s: the validator runs over every object" % name, tail):
                continue
            for good, what, detail in results:
                tap.check(good, "%s: %s" % (name, what), detail)
        # The validator can fail: schema errors, a broken InferencePool, a short grace period.
        for label, text in (("deployment", BAD_DEPLOYMENT), ("pool", BAD_POOL)):
            path = os.path.join(tmp, "bad_%s.yaml" % label)
            with open(path, "w") as f:
                f.write(text)
            _, results, tail = run_validator(path, "--expect-invalid")
            tap.check(results and results[0][0], "validator rejects a bad %s" % label,
                      tail)
        with open(os.path.join(tmp, "base.yaml")) as f:
            short = f.read().replace("terminationGracePeriodSeconds: 75",
                                     "terminationGracePeriodSeconds: 30")
        path = os.path.join(tmp, "short_grace.yaml")
        with open(path, "w") as f:
            f.write(short)
        _, results, tail = run_validator(path)
        fit = [r for r in results if r[1].startswith("the objects fit together")]
        tap.check(fit and not fit[0][0] and "terminationGracePeriodSeconds 30" in fit[0][2],
                  "validator rejects a grace period shorter than preStop + shutdown timeout",
                  tail)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    tap.finish()


if __name__ == "__main__":
    main()
