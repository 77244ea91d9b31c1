#!/usr/bin/env bash
# Deleting a job garbage-collects its pods, Service and Secret (owner references).
source "$TESSERA_SOURCE_DIR/tests/cluster/lib.sh"
source "$TESSERA_SOURCE_DIR/tests/cluster/controller/controller_lib.sh"

start_controller
apply_job gc 2
wait_phase 60 gc Running
kns get service gc >/dev/null && kns get secret gc-rendezvous >/dev/null
kns delete tj gc --wait=false
gone() {
  [ -z "$(kns get pods -l tessera.dev/job-name=gc -o name)" ] &&
    ! kns get service gc >/dev/null 2>&1 && ! kns get secret gc-rendezvous >/dev/null 2>&1
}
wait_for 90 "the job's pods, service and secret to be garbage-collected" gone
echo "ok: everything the job owned is gone"
