#!/usr/bin/env bash
# A real Prometheus (Debian's package) scrapes a training `tessera run --metrics-port` of two
# data-parallel ranks, with the scrape configuration docs/local-mode.md gives, and every panel
# query of the "Tessera / Training" dashboard returns at least one series; empty panels are
# listed by title; a panel of a histogram's mean (Checkpoint time) stays within what the
# histogram observed. Also: `promtool check metrics` is clean on rank 0's /metrics, every tessera_
# metric it exports is in docs/metrics.md, and every metric of that page's Training table is
# exported.
#
# Panels over metrics the worker does not export at all are listed as such and fail the test
# (every metric of the dashboard is exported from the first scrape); TESSERA_STRICT_PANELS=0
# lists them without failing, for a dashboard drafted ahead of its metric.
#
# Loopback only: Prometheus listens on 127.0.0.1 and scrapes 127.0.0.1.
# Environment: TESSERA_SOURCE_DIR, TESSERA (the tessera binary, with tessera-worker beside it).
set -euo pipefail
fail() { printf 'FAIL: %s\n' "$*" >&2; exit 1; }
: "${TESSERA_SOURCE_DIR:?run through ctest}" "${TESSERA:?run through ctest}"
command -v prometheus >/dev/null || fail "prometheus not found: install Debian's prometheus package (scripts/setup.sh)"
command -v promtool >/dev/null || fail "promtool not found: install Debian's prometheus package"

work=$(mktemp -d)
pids=()
cleanup() {
  local status=$? pid
  for pid in "${pids[@]}"; do kill -INT "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  if [ $status -ne 0 ]; then
    echo "---- tessera run (tail)"; tail -20 "$work/run.log" 2>/dev/null || true
    echo "---- rank 0 log (tail)"; tail -20 "$work/run/logs/worker-0-rank-0.log" 2>/dev/null || true
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

# 1. The demo job, smaller, training for longer than the test needs (interrupted at the end),
# with a checkpoint every 5 steps so that every training metric moves; its two ranks on fixed
# metrics ports.
port=$(/usr/bin/python3 "$TESSERA_SOURCE_DIR/tests/free_ports.py" 2)
[ -n "$port" ] || fail "found no two free consecutive ports"
(cd "$TESSERA_SOURCE_DIR" && exec "$TESSERA" run manifests/examples/cpu-tiny.yaml \
  --set spec.trainer.model.layers=1 --set spec.trainer.model.dModel=32 \
  --set spec.trainer.model.heads=2 --set spec.trainer.model.seqLen=32 \
  --set spec.trainer.batch.global=8 --set spec.trainer.schedule.steps=1000000 \
  --set spec.trainer.schedule.warmupSteps=10 --set spec.trainer.checkpoint.everySteps=5 \
  --set spec.trainer.checkpoint.keep=1 --metrics-port "$port" --grace-period 5 \
  --workdir "$work/run") >"$work/run.log" 2>&1 &
pids+=($!)
wait_for 90 "rank 0's first step on port $port" bash -c \
  "curl -sf http://127.0.0.1:$port/progress | grep -q '\"step\":[1-9]'"
echo "ok: tessera run trains, rank 0's metrics on 127.0.0.1:$port, rank 1's on $((port + 1))"

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

# 3. Prometheus on a free loopback port, scraping the run every second with the scrape_configs
# of docs/local-mode.md (its ports 9400, 9401 replaced by the run's).
pport=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
/usr/bin/python3 - "$TESSERA_SOURCE_DIR/docs/local-mode.md" "$port" >"$work/prometheus.yml" <<'PY' ||
import re, sys
doc, port = open(sys.argv[1]).read(), int(sys.argv[2])
blocks = [b for b in re.findall(r"```yaml\n(.*?)```", doc, re.S) if "scrape_configs:" in b]
if len(blocks) != 1:
    sys.exit("docs/local-mode.md: want one yaml block with scrape_configs, found %d" % len(blocks))
if "127.0.0.1:9400" not in blocks[0] or "127.0.0.1:9401" not in blocks[0]:
    sys.exit("docs/local-mode.md: the scrape config no longer targets 127.0.0.1:9400 and 9401")
block = blocks[0].replace("127.0.0.1:9401", f"127.0.0.1:{port + 1}").replace("127.0.0.1:9400", f"127.0.0.1:{port}")
print("global: {scrape_interval: 1s, scrape_timeout: 1s, evaluation_interval: 1s}")
print(re.sub(r"scrape_interval: \S+", "scrape_interval: 1s", block), end="")
PY
  fail "no scrape configuration from docs/local-mode.md"
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
targets_up=$(http_get "$api/query?query=count(up%20%3D%3D%201)" |
  /usr/bin/python3 -c 'import json, sys; r = json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if r else 0)')
[ "$targets_up" = 2 ] || fail "$targets_up scrape targets up, want both ranks"
echo "ok: Prometheus scraped both ranks"

# 4. Every panel query of the Training dashboard, with the dashboard's variables set to All.
/usr/bin/python3 - "$TESSERA_SOURCE_DIR/dashboards/tessera-training.json" "$api" "$work/metrics.txt" <<'PY'
import json, os, re, sys, time, urllib.parse, urllib.request
board, api, metrics_file = sys.argv[1:4]
# A panel dividing one histogram's rates, its _sum and _count (its mean, rate(X_sum) /
# rate(X_count)): every value lies within the observations, so at most the smallest bucket bound
# that holds all of them, at the same time; twice that is allowed, as rate() may extrapolate the
# two series by different factors (count / sum, inverted, is far outside: hundreds of seconds).
MEAN = re.compile(r"rate\((tessera_\w+)_(?:sum|count)\{[^}]*\}\[[^\]]*\]\)\s*/\s*"
                  r"rate\(\1_(?:sum|count)\b")
def query(q, at):
    url = api + "/query?" + urllib.parse.urlencode({"query": q, "time": at})
    return json.load(urllib.request.urlopen(url, timeout=10))["data"]["result"]
def largest_observation_bound(histogram, at):
    per_series = {}
    for s in query(histogram + "_bucket", at):
        key = tuple(sorted((k, v) for k, v in s["metric"].items() if k != "le"))
        per_series.setdefault(key, []).append((float(s["metric"]["le"]), float(s["value"][1])))
    bound = 0.0
    for buckets in per_series.values():
        buckets.sort()
        bound = max(bound, next(le for le, count in buckets if count >= buckets[-1][1]))
    return bound
wrong = []
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
        mean = MEAN.search(q)
        if series and mean:
            at = f"{time.time():.3f}"
            bound = largest_observation_bound(mean.group(1), at)
            values = [float(s["value"][1]) for s in query(q, at)]
            values = [v for v in values if v == v]  # NaN: nothing observed in the window
            if all(0 <= v <= 2 * bound for v in values):
                print(f"ok: panel {panel['title']!r} ({t['refId']}): {values} within the "
                      f"observations of {mean.group(1)} (<= {bound})")
            else:
                wrong.append(f"{panel['title']} ({t['refId']}): {values}, but every observation "
                             f"of {mean.group(1)} is <= {bound} (twice that allowed)")
for p in pending:
    print(f"{'FAIL' if strict else 'not exported by this tessera-worker'}: panel {p}")
for e in empty:
    print(f"FAIL: empty panel: {e}")
for w in wrong:
    print(f"FAIL: panel value out of its histogram's range: {w}")
print(f"{checked} queries; {len(empty)} empty; {len(pending)} over metrics the worker does not export")
sys.exit(1 if empty or wrong or (strict and pending) else 0)
PY
echo "PASS"
