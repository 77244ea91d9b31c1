#!/usr/bin/env bash
# A real Prometheus (Debian's package) scrapes a training `tessera-worker rank`, and every
# panel query of the "Tessera / Training" dashboard returns at least one series; empty panels
# are listed by title. Also: `promtool check metrics` is clean on the worker's /metrics, every
# tessera_ metric it exports is in docs/metrics.md, and every metric of that page's Training
# table is exported.
#
# Panels over metrics this worker does not export at all are listed as such and fail the test
# (every metric of the dashboard is exported from the first scrape, the communication and
# pipeline ones at zero in a one-rank job); TESSERA_STRICT_PANELS=0 lists them without
# failing, for a dashboard drafted ahead of its metric.
#
# Loopback only: Prometheus listens on 127.0.0.1 and scrapes 127.0.0.1.
# Environment: TESSERA_SOURCE_DIR, TESSERA_WORKER (the tessera-worker binary).
set -euo pipefail
fail() { printf 'FAIL: %s\n' "$*" >&2; exit 1; }
: "${TESSERA_SOURCE_DIR:?run through ctest}" "${TESSERA_WORKER:?run through ctest}"
command -v prometheus >/dev/null || fail "prometheus not found: install Debian's prometheus package (scripts/setup.sh)"
command -v promtool >/dev/null || fail "promtool not found: install Debian's prometheus package"

work=$(mktemp -d)
pids=()
cleanup() {
  local status=$? pid
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  if [ $status -ne 0 ]; then
    echo "---- worker log (tail)"; tail -20 "$work/worker.log" 2>/dev/null || true
    echo "---- prometheus log (tail)"; tail -20 "$work/prometheus.log" 2>/dev/null || true
  fi
  rm -rf "$work"
  exit $status
}
trap cleanup EXIT

# Polls a command until it succeeds, or fails after a deadline.
wait_for() {
  local timeout=$1 what=$2; shift 2
  local deadline=$((SECONDS + timeout))
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || fail "timed out after ${timeout}s waiting for $what"
    sleep 0.5
  done
}
http_get() { /usr/bin/python3 -c 'import sys, urllib.request
print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode(), end="")' "$1"; }

# 1. A small model that trains for longer than the test needs (stopped at the end), with
# frequent evaluations and checkpoints so that every training metric moves.
cat >"$work/trainer.yaml" <<YAML
model: {layers: 1, dModel: 32, heads: 2, seqLen: 32, vocab: 256}
data: {path: $TESSERA_SOURCE_DIR/data/tinyshakespeare.txt, validationFraction: 0.1}
batch: {global: 8}
optimizer: {lr: 1.0e-3}
schedule: {steps: 1000000, warmupSteps: 10, evalEvery: 5, evalBatches: 1}
checkpoint: {everySteps: 5, keep: 1}
metrics: {port: 0, peakFlopsPerSecond: 1.0e+11}
logEvery: 1000
YAML
RANK=0 WORLD_SIZE=1 TESSERA_METRICS_PORT=0 TESSERA_CHECKPOINT_DIR="$work/ckpt" \
  "$TESSERA_WORKER" rank --config "$work/trainer.yaml" --threads 1 >"$work/worker.log" 2>&1 &
pids+=($!)
worker_port() { grep -o 'metrics on port [0-9]*' "$work/worker.log" | grep -o '[0-9]*$'; }
wait_for 60 "the worker to log its metrics port" worker_port
port=$(worker_port)
wait_for 60 "the worker's first step" bash -c \
  "curl -sf http://127.0.0.1:$port/progress | grep -q '\"step\":[1-9]'"
echo "ok: tessera-worker trains, metrics on 127.0.0.1:$port"

# 2. promtool check metrics: clean (no errors, no lint problems).
http_get "http://127.0.0.1:$port/metrics" >"$work/metrics.txt"
if ! promtool check metrics <"$work/metrics.txt" >"$work/promtool.txt" 2>&1 || [ -s "$work/promtool.txt" ]; then
  cat "$work/promtool.txt"; fail "promtool check metrics reported problems on the worker's /metrics"
fi
echo "ok: promtool check metrics is clean on the worker's /metrics"
exported=$(grep -o '^# TYPE tessera_[a-z0-9_]*' "$work/metrics.txt" | awk '{print $3}' | sort -u)
if [ -f "$TESSERA_SOURCE_DIR/docs/metrics.md" ]; then
  for name in $exported; do
    grep -q "\b$name\b" "$TESSERA_SOURCE_DIR/docs/metrics.md" || fail "$name is exported but not in docs/metrics.md"
  done
  echo "ok: every exported metric ($(echo $exported | wc -w)) is in docs/metrics.md"
  # ... and every metric of its training section is exported.
  documented=$(awk '/^## Training/{on=1; next} /^## /{on=0} on' "$TESSERA_SOURCE_DIR/docs/metrics.md" |
    grep -o '^| `tessera_[a-z0-9_]*`' | tr -d '|` ' | sort -u)
  [ -n "$documented" ] || fail "docs/metrics.md has no '## Training' table of tessera_ metrics"
  for name in $documented; do
    grep -qx "$name" <<<"$exported" || fail "docs/metrics.md documents $name, which tessera-worker does not export"
  done
  echo "ok: every training metric of docs/metrics.md ($(echo $documented | wc -w)) is exported"
fi

# 3. Prometheus on a free loopback port, scraping the worker every second with the labels a
# PodMonitor of charts/tessera gives (namespace, pod, trainingjob, worker).
pport=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cat >"$work/prometheus.yml" <<YAML
global: {scrape_interval: 1s, scrape_timeout: 1s, evaluation_interval: 1s}
scrape_configs:
  - job_name: tessera-workers
    static_configs:
      - targets: ["127.0.0.1:$port"]
        labels: {namespace: e2e, pod: prom-e2e-worker-0, trainingjob: prom-e2e, worker: "0"}
YAML
promtool check config "$work/prometheus.yml" >/dev/null || fail "promtool check config refused the test's prometheus.yml"
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/tsdb" \
  --web.listen-address="127.0.0.1:$pport" --log.level=warn >"$work/prometheus.log" 2>&1 &
pids+=($!)
api="http://127.0.0.1:$pport/api/v1"
wait_for 60 "Prometheus to be ready on 127.0.0.1:$pport" http_get "http://127.0.0.1:$pport/-/ready"
# Enough samples for rate() over the panels' window, and at least one checkpoint and evaluation.
enough() {
  http_get "$api/query?query=count_over_time(tessera_train_step%5B1m%5D)%20%3E%3D%2010%20and%20on()%20tessera_checkpoint_seconds_count%20%3E%3D%202" |
    /usr/bin/python3 -c 'import json, sys; sys.exit(0 if json.load(sys.stdin)["data"]["result"] else 1)'
}
wait_for 120 "10 scrapes with two checkpoints written" enough
echo "ok: Prometheus scraped the worker"

# 4. Every panel query of the Training dashboard, with the dashboard's variables set to All.
/usr/bin/python3 - "$TESSERA_SOURCE_DIR/dashboards/tessera-training.json" "$api" "$work/metrics.txt" <<'PY'
import json, os, re, sys, urllib.parse, urllib.request
board, api, metrics_file = sys.argv[1:4]
exported = set(re.findall(r"^# TYPE (tessera_\w+)", open(metrics_file).read(), re.M))
strict = os.environ.get("TESSERA_STRICT_PANELS", "1") == "1"
def base(name):
    for s in ("_bucket", "_sum", "_count"):
        if name.endswith(s) and name[: -len(s)] in exported:
            return name[: -len(s)]
    return name
empty, pending, checked = [], [], 0
for panel in json.load(open(board))["panels"]:
    if panel.get("type") == "row":
        continue
    for t in panel.get("targets", []):
        expr = t["expr"]
        q = (expr.replace("$__rate_interval", "15s").replace("$namespace", ".*")
             .replace("$job", ".*"))
        missing = sorted({base(m) for m in re.findall(r"\btessera_\w+", q)} - exported)
        url = api + "/query?" + urllib.parse.urlencode({"query": q})
        reply = json.load(urllib.request.urlopen(url, timeout=10))
        if reply.get("status") != "success":
            print(f"FAIL: panel {panel['title']!r}: Prometheus refused {q}: {reply}")
            empty.append(panel["title"])
            continue
        series = reply["data"]["result"]
        checked += 1
        if series:
            print(f"ok: panel {panel['title']!r} ({t['refId']}): {len(series)} series")
        elif missing:
            pending.append(f"{panel['title']} ({', '.join(missing)})")
        else:
            empty.append(f"{panel['title']} ({t['refId']}: {expr})")
for p in pending:
    print(f"{'FAIL' if strict else 'not exported by this tessera-worker'}: panel {p}")
for e in empty:
    print(f"FAIL: empty panel: {e}")
print(f"{checked} queries; {len(empty)} empty; {len(pending)} over metrics the worker does not export")
sys.exit(1 if empty or (strict and pending) else 0)
PY
echo "PASS"
