// Validates Kubernetes manifests: every document against the Kubernetes API
// schemas of the npm package kubernetes-models (types, required fields,
// enums, formats), then what ddprun needs of an indexed Job (see
// deploy/k8s/ddprun-job.yaml). Unknown field names are not caught: the
// models' schemas allow them.
// Usage: node check-k8s.mjs NODE_MODULES_DIR FILE.yaml...
import { createRequire } from 'node:module';
import { readFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import path from 'node:path';

const [modules, ...files] = process.argv.slice(2);
const require = createRequire(path.join(modules, 'x.js'));
const yaml = require('js-yaml');
const model = async (group) => import(pathToFileURL(path.join(modules, 'kubernetes-models', group, 'index.js')).href);
const groups = { 'v1': 'v1', 'batch/v1': 'batch/v1', 'apps/v1': 'apps/v1' };

let errors = 0;
const fail = (file, msg) => { console.log(`${file}: ${msg}`); errors++; };

for (const file of files) {
  const docs = yaml.loadAll(readFileSync(file, 'utf8')).filter((d) => d);
  const services = new Map();
  const jobs = [];
  let sawJob = false;
  for (const doc of docs) {
    const what = `${doc.kind} ${doc.metadata?.name}`;
    if (doc.kind === 'Job') sawJob = true;
    const group = groups[doc.apiVersion];
    if (!group) { fail(file, `${what}: apiVersion ${doc.apiVersion} is not one this check knows`); continue; }
    const Model = (await model(group))[doc.kind];
    if (!Model) { fail(file, `${what}: no kind ${doc.kind} in ${doc.apiVersion}`); continue; }
    try {
      new Model(doc).validate();
    } catch (e) {
      fail(file, `${what}: ${e.message.split('\n')[0]}`);
      continue;
    }
    if (doc.kind === 'Service') services.set(doc.metadata.name, doc);
    if (doc.kind === 'Job') jobs.push(doc);
  }
  for (const job of jobs) {
    const name = job.metadata.name;
    const spec = job.spec;
    const pod = spec.template.spec;
    const c = pod.containers.find((x) => (x.command || []).concat(x.args || []).includes('ddprun')) || pod.containers[0];
    const env = new Map((c.env || []).map((e) => [e.name, e]));
    const need = (n) => { if (!env.has(n)) fail(file, `Job ${name}: container ${c.name} does not set ${n}`); return env.get(n); };
    if (spec.completionMode !== 'Indexed') fail(file, `Job ${name}: completionMode must be Indexed (PET_NODE_RANK is the index)`);
    const nnodes = need('PET_NNODES');
    if (nnodes && (String(spec.completions) !== nnodes.value || String(spec.parallelism) !== nnodes.value)) {
      fail(file, `Job ${name}: PET_NNODES ${nnodes.value} must equal completions ${spec.completions} and parallelism ${spec.parallelism}`);
    }
    need('PET_NPROC_PER_NODE');
    const rank = need('PET_NODE_RANK');
    if (rank && !/job-completion-index/.test(rank.valueFrom?.fieldRef?.fieldPath || '')) {
      fail(file, `Job ${name}: PET_NODE_RANK must come from the job-completion-index annotation`);
    }
    const svc = services.get(pod.subdomain);
    if (!svc) fail(file, `Job ${name}: subdomain '${pod.subdomain}' is not a Service in this file`);
    else if (svc.spec.clusterIP !== 'None') fail(file, `Service ${svc.metadata.name}: must be headless (clusterIP: None)`);
    else if (svc.spec.selector?.['job-name'] !== name) fail(file, `Service ${svc.metadata.name}: must select job-name: ${name}`);
    const ep = need('PET_RDZV_ENDPOINT');
    if (ep && !(ep.value || '').startsWith(`${name}-0.${pod.subdomain}:`)) {
      fail(file, `Job ${name}: PET_RDZV_ENDPOINT '${ep.value}' must be pod 0's name, ${name}-0.${pod.subdomain}:PORT`);
    }
    need('PET_RDZV_ID');
    const token = need('DDPRUN_RDZV_TOKEN');
    if (token && !token.valueFrom?.secretKeyRef) fail(file, `Job ${name}: DDPRUN_RDZV_TOKEN must come from a Secret (secretKeyRef)`);
  }
  if (!sawJob) fail(file, 'no Job in this file');
}
if (errors) { console.log(`${errors} problem(s)`); process.exit(1); }
console.log(`ok: ${files.join(' ')}`);
