#!/usr/bin/env bash
# Checks deploy/'s monitoring files with Prometheus's own promtool: the
# scrape configurations (syntax; Debian's Prometheus is built without
# Kubernetes discovery, so the Kubernetes one is checked with its
# discovery block read as file discovery) and every PromQL expression of
# the Grafana dashboard (panels and annotations, as recording rules, with
# Grafana's $__rate_interval as 5m and the $run_id choice as ".*").
#   scripts/check-deploy.sh [ROOT]
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
command -v promtool >/dev/null || { echo "check-deploy: no promtool (scripts/install-deps.sh tests installs prometheus)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
promtool check config --syntax-only "$root/deploy/prometheus/slurm.yml"
sed -e 's/kubernetes_sd_configs:/file_sd_configs:/' -e 's/- role: pod/- files: [targets.json]/' \
  "$root/deploy/prometheus/kubernetes.yml" >"$tmp/kubernetes.yml"
grep -q 'file_sd_configs' "$tmp/kubernetes.yml"
promtool check config --syntax-only "$tmp/kubernetes.yml"
python3 - "$root/deploy/grafana/ddprun-dashboard.json" "$tmp/rules.yml" <<'PY'
import json, sys
dash = json.load(open(sys.argv[1]))
exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
exprs += [a["expr"] for a in dash["annotations"]["list"] if "expr" in a]
assert len(exprs) >= 10, "the dashboard lost its queries"
for metric in ("ddprun_goodput_seconds_total", "ddprun_steps_total", "ddprun_heals_total", "ddprun_step_seconds"):
    assert any(metric in e for e in exprs), "no panel reads " + metric
with open(sys.argv[2], "w") as out:
    out.write("groups:\n  - name: dashboard\n    rules:\n")
    for i, e in enumerate(exprs):
        e = e.replace("$__rate_interval", "5m").replace("$run_id", ".*")
        out.write("      - record: dashboard:expr%d\n        expr: %s\n" % (i, json.dumps(e)))
print("check-deploy: %d dashboard queries" % len(exprs))
PY
promtool check rules "$tmp/rules.yml"
