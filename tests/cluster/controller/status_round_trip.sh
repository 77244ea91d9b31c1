#!/usr/bin/env bash
# Every status field the controller writes survives the API server, which silently prunes
# fields the CRD does not declare: attempt, attemptStartTime, conditions with
# observedGeneration, progress (step, totalSteps, loss, valLoss, tokensPerSecond, updatedAt and
# its attempt) from worker 0's /progress, then restarts and lastFailure after a gang restart.
# All are read back with kubectl. Worker 0's /progress is served on loopback by this test (kwok
# pods have fake IPs, so its pod IP is pointed at 127.0.0.1).
source "$TESSERA_SOURCE_DIR/tests/cluster/lib.sh"
source "$TESSERA_SOURCE_DIR/tests/cluster/controller/controller_lib.sh"

port=$(_ctl_free_port)
/usr/bin/python3 - "$port" >/dev/null 2>&1 <<'PY' &
import http.server, json, sys

BODY = json.dumps({"step": 42, "totalSteps": 1000, "loss": 2.5, "valLoss": 2.75,
                   "tokensPerSecond": 1234.5}).encode()

class Progress(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        code, body = (200, BODY) if self.path == "/progress" else (404, b"")
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Progress).serve_forever()
PY
server=$!
on_exit "kill $server"
wait_for 30 "the /progress server on 127.0.0.1:$port" curl -sf "http://127.0.0.1:$port/progress"

start_controller --progress-interval 0.5
apply_job rt 2 "  metrics: {port: $port}
  runPolicy: {backoffLimit: 2}"
wait_phase 60 rt Running

# Before any progress: the attempt fields.
expect_eq 0 "$(job_field rt '{.status.attempt}')" "status.attempt"
[ -n "$(job_field rt '{.status.attemptStartTime}')" ] || fail "status.attemptStartTime was pruned"
gen=$(job_field rt '{.metadata.generation}')
for c in Created Running PodsReady; do
  expect_eq "$gen" "$(job_field rt "{.status.conditions[?(@.type==\"$c\")].observedGeneration}")" \
    "$c condition observedGeneration"
done

kns patch pod rt-worker-0 --subresource=status --type=merge \
  -p '{"status": {"podIP": "127.0.0.1", "podIPs": [{"ip": "127.0.0.1"}]}}' >/dev/null
wait_for 60 "status.progress.step 42" bash -c \
  "[ \"\$(kubectl -n $TEST_NAMESPACE get tj rt -o jsonpath='{.status.progress.step}')\" = 42 ]"
progress=$(kns get tj rt -o json)
p() { json_get "d['status']['progress'].get('$1')" <<<"$progress"; }
expect_eq 1000 "$(p totalSteps)" "status.progress.totalSteps"
expect_eq 2.5 "$(p loss)" "status.progress.loss"
expect_eq 2.75 "$(p valLoss)" "status.progress.valLoss"
expect_eq 1234.5 "$(p tokensPerSecond)" "status.progress.tokensPerSecond"
expect_eq 0 "$(p attempt)" "status.progress.attempt"
[ "$(p updatedAt)" != None ] || fail "status.progress.updatedAt was pruned"

# A gang restart: restarts, attempt and lastFailure.
kns label pod rt-worker-1 tessera.dev/fail-exit-code=7 >/dev/null
wait_for 60 "attempt 1" bash -c \
  "[ \"\$(kubectl -n $TEST_NAMESPACE get tj rt -o jsonpath='{.status.attempt}')\" = 1 ]"
wait_phase 60 rt Running
expect_eq "1 1" "$(job_field rt '{.status.restarts} {.status.attempt}')" "restarts and attempt"
expect_eq "WorkerFailed|7|rt-worker-1" \
  "$(job_field rt '{.status.lastFailure.reason}|{.status.lastFailure.exitCode}|{.status.lastFailure.worker}')" \
  "status.lastFailure"
case "$(job_field rt '{.status.lastFailure.message}')" in
  *"rt-worker-1 failed with exit code 7"*) ;;
  *) fail "status.lastFailure.message: $(job_field rt '{.status.lastFailure.message}')" ;;
esac
# The progress of attempt 0 is kept with its attempt until attempt 1 reports.
expect_eq "42 0" "$(job_field rt '{.status.progress.step} {.status.progress.attempt}')" \
  "progress of the previous attempt"
expect_eq 2 "$(pod_count rt)" "pods of rt (no duplicates)"
