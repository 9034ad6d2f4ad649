// Validates rendered Kubernetes manifests (a multi-document YAML file, the output of
// `kubectl kustomize`) and prints "ok NAME" / "not ok NAME" lines (and "# ..." details):
//
//   - every object against its schema: the models of the npm packages kubernetes-models
//     (core kinds), @kubernetes-models/prometheus-operator (ServiceMonitor) and
//     @kubernetes-models/gateway-api (HTTPRoute). The InferencePool of the Gateway API Inference
//     Extension has no npm model yet: it is checked against the fields of its v1 CRD below;
//   - that the objects fit together: the Service, PDB, ServiceMonitor and InferencePool select
//     the Deployment's pods, ports match by name and number, the HPA scales the Deployment, the
//     probes use /health, and the termination grace period covers preStop plus the server's
//     --shutdown-timeout.
//
// usage: node validate_k8s.mjs RENDERED.yaml [--expect-invalid]
// With --expect-invalid the file is a known-bad object and the one line says whether it was
// rejected (the check that the validator can fail).
import { readFileSync } from "node:fs";
import { parseAllDocuments } from "yaml";
import * as core from "kubernetes-models/v1";
import * as apps from "kubernetes-models/apps/v1";
import * as policy from "kubernetes-models/policy/v1";
import * as autoscaling from "kubernetes-models/autoscaling/v2";
import * as monitoring from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1";
import * as gateway from "@kubernetes-models/gateway-api/gateway.networking.k8s.io/v1";

const MODELS = {
    v1: core,
    "apps/v1": apps,
    "policy/v1": policy,
    "autoscaling/v2": autoscaling,
    "monitoring.coreos.com/v1": monitoring,
    "gateway.networking.k8s.io/v1": gateway,
};

// The InferencePool (inference.networking.k8s.io/v1) fields, from the extension's CRD.
function checkInferencePool(o) {
    const errs = [];
    const s = o.spec || {};
    const known = new Set(["selector", "targetPorts", "endpointPickerRef"]);
    for (const k of Object.keys(s)) if (!known.has(k)) errs.push(`spec.${k}: unknown field`);
    const ml = (s.selector || {}).matchLabels;
    if (!ml || typeof ml !== "object" || !Object.keys(ml).length) errs.push("spec.selector.matchLabels: required, non-empty");
    else for (const [k, v] of Object.entries(ml)) if (typeof v !== "string") errs.push(`spec.selector.matchLabels.${k}: must be a string`);
    const tp = s.targetPorts;
    if (!Array.isArray(tp) || tp.length < 1 || tp.length > 8) errs.push("spec.targetPorts: 1 to 8 entries required");
    else tp.forEach((p, i) => {
        if (!Number.isInteger(p.number) || p.number < 1 || p.number > 65535) errs.push(`spec.targetPorts[${i}].number: 1..65535`);
    });
    const ep = s.endpointPickerRef;
    if (!ep || typeof ep.name !== "string" || !ep.name) errs.push("spec.endpointPickerRef.name: required");
    else {
        if (ep.kind !== undefined && ep.kind !== "Service" && !ep.group) errs.push("spec.endpointPickerRef: a kind other than Service needs a group");
        if (ep.port !== undefined && (!Number.isInteger(ep.port.number) || ep.port.number < 1 || ep.port.number > 65535)) errs.push("spec.endpointPickerRef.port.number: 1..65535");
        if ((ep.kind === undefined || ep.kind === "Service") && ep.port === undefined) errs.push("spec.endpointPickerRef.port: required for a Service");
        if (ep.failureMode !== undefined && !["FailOpen", "FailClose"].includes(ep.failureMode)) errs.push("spec.endpointPickerRef.failureMode: FailOpen or FailClose");
    }
    return errs;
}

function validateObject(o) {
    if (o.apiVersion === "inference.networking.k8s.io/v1" && o.kind === "InferencePool") return checkInferencePool(o);
    const mod = MODELS[o.apiVersion];
    const cls = mod && mod[o.kind];
    if (!cls) return [`no schema known for ${o.apiVersion} ${o.kind}`];
    try {
        new cls(o).validate();
        return [];
    } catch (e) {
        return [String(e.message || e)];
    }
}

const matches = (sel, labels) => sel && Object.entries(sel).every(([k, v]) => labels[k] === v);

function consistency(objs) {
    const errs = [];
    const one = (kind) => objs.find((o) => o.kind === kind);
    const dep = one("Deployment");
    if (!dep) return ["no Deployment"];
    const pod = dep.spec.template;
    const labels = pod.metadata.labels || {};
    const c = pod.spec.containers[0];
    const ports = c.ports || [];
    const svc = one("Service");
    if (!svc || !matches(svc.spec.selector, labels)) errs.push("the Service does not select the Deployment's pods");
    for (const p of (svc && svc.spec.ports) || []) {
        if (!ports.some((q) => q.name === p.targetPort || q.containerPort === p.targetPort)) errs.push(`Service port ${p.name}: targetPort ${p.targetPort} is no container port`);
    }
    const pdb = one("PodDisruptionBudget");
    if (!pdb || !matches(pdb.spec.selector.matchLabels, labels)) errs.push("the PodDisruptionBudget does not select the pods");
    const hpa = one("HorizontalPodAutoscaler");
    if (!hpa || hpa.spec.scaleTargetRef.kind !== "Deployment" || hpa.spec.scaleTargetRef.name !== dep.metadata.name) errs.push("the HPA does not scale the Deployment");
    const hpaMetric = hpa && hpa.spec.metrics.find((m) => m.type === "Pods");
    if (!hpaMetric || hpaMetric.pods.metric.name !== "tokenloom_num_requests_waiting") errs.push("the HPA does not scale on tokenloom_num_requests_waiting per pod");
    const rules = objs.find((o) => o.kind === "ConfigMap" && o.data && o.data["config.yaml"]);
    if (!rules || !rules.data["config.yaml"].includes("tokenloom:num_requests_waiting")) errs.push("no Prometheus Adapter rule for tokenloom:num_requests_waiting");
    const sm = one("ServiceMonitor");
    if (!sm || !svc || !matches(sm.spec.selector.matchLabels, svc.metadata.labels || {})) errs.push("the ServiceMonitor does not select the Service");
    else if (!sm.spec.endpoints.every((e) => svc.spec.ports.some((p) => p.name === e.port) && e.path === "/metrics")) errs.push("the ServiceMonitor scrapes no Service port's /metrics");
    const pool = one("InferencePool");
    if (!pool || !matches(pool.spec.selector.matchLabels, labels)) errs.push("the InferencePool does not select the pods");
    else if (!pool.spec.targetPorts.every((t) => ports.some((q) => q.containerPort === t.number))) errs.push("the InferencePool's target port is no container port");
    for (const probe of ["startupProbe", "readinessProbe", "livenessProbe"]) {
        const p = c[probe];
        if (!p || !p.httpGet || p.httpGet.path !== "/health") errs.push(`${probe}: not an HTTP GET of /health`);
    }
    const args = c.args || [];
    const sd = args.map((a) => /^--shutdown-timeout=(\d+)$/.exec(a)).find(Boolean);
    const stop = ((c.lifecycle || {}).preStop || {}).exec;
    const sleep = stop && stop.command[0] === "sleep" ? Number(stop.command[1]) : 0;
    if (!sd) errs.push("the args set no --shutdown-timeout=S");
    else if (!(pod.spec.terminationGracePeriodSeconds >= sleep + Number(sd[1]) + 5)) errs.push(`terminationGracePeriodSeconds ${pod.spec.terminationGracePeriodSeconds} < preStop ${sleep} + shutdown ${sd[1]} + 5`);
    if (!(c.volumeMounts || []).some((m) => m.mountPath === "/models")) errs.push("no volume at /models");
    if (!args.some((a) => a.startsWith("--model=/models/"))) errs.push("the model is not read from /models");
    if (!c.resources || !c.resources.requests || !c.resources.limits) errs.push("no resource requests and limits");
    return errs;
}

const [file, mode] = process.argv.slice(2);
const docs = parseAllDocuments(readFileSync(file, "utf8")).map((d) => d.toJS()).filter(Boolean);
if (mode === "--expect-invalid") {
    const errs = docs.flatMap(validateObject);
    console.log(`${errs.length ? "ok" : "not ok"} a known-bad object is rejected (${docs[0].kind})`);
    for (const e of errs) console.log(`# ${e.slice(0, 300)}`);
    process.exit(0);
}
console.log(`# ${docs.length} objects: ${docs.map((o) => o.kind).join(", ")}`);
for (const o of docs) {
    const errs = validateObject(o);
    console.log(`${errs.length ? "not ok" : "ok"} ${o.kind} ${o.metadata.name} is valid ${o.apiVersion}`);
    for (const e of errs) console.log(`# ${e.slice(0, 500)}`);
}
const errs = consistency(docs);
console.log(`${errs.length ? "not ok" : "ok"} the objects fit together (selectors, ports, probes, grace period, HPA metric)`);
for (const e of errs) console.log(`# ${e}`);
