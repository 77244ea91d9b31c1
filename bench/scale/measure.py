#!/usr/bin/env python3
"""bench/scale/measure.py: many TrainingJobs at once on many simulated nodes, against the API
server's own write rate, on the control plane of KUBECONFIG (see run.sh).

Peer: JOBS x WORKERS bare pods (the same pod template) POSTed by THREADS parallel clients
with no client-side limit, timed from the first POST until a watch has seen every one
Running. Tessera: JOBS TrainingJobs of WORKERS workers POSTed the same way, timed until every
pod Running and every job's status.phase Running. Each side in a namespace of its own,
deleted (and gone) before the next. Prints, per side, a timeline (when a quarter, half and all
of the pods were first seen created, bound to a node and Running) and a line of figures and,
last, `ratio=<tessera time to all Running / peer time to all Running>`.
"""
import argparse
import concurrent.futures
import json
import os
import sys
import threading
import time
import urllib.parse

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "gang_create"))
from measure import Api, wait_until  # noqa: E402  (bench/gang_create/measure.py)

POD_SPEC = {
    "restartPolicy": "Never",
    "terminationGracePeriodSeconds": 0,
    "containers": [{"name": "worker", "image": "tessera/worker:bench", "command": ["/bin/true"]}],
}


class Watch:
    """Follows a collection: lists it, then watches from the list's resourceVersion, calling
    on_object(obj) for every object listed, added or modified, on a thread of its own, until
    stop(). The API server may end a watch at any time (its timeout, an expired
    resourceVersion: an ERROR event); then it lists and watches again, as a reflector does, and
    says so on stderr. on_object must therefore be idempotent."""

    def __init__(self, api, path, on_object):
        self.api, self.path, self.on_object = api, path, on_object
        self.stopped = threading.Event()
        self.conn = None
        self.restarts = 0
        self.resp = self._list_and_watch()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _list_and_watch(self):
        _, listed = self.api.request("GET", self.path)
        rv = listed["metadata"]["resourceVersion"]
        for obj in listed.get("items", []):
            self.on_object(obj)
        self.conn = self.api.connect(timeout=3600)
        sep = "&" if "?" in self.path else "?"
        self.conn.request("GET", f"{self.path}{sep}watch=1&resourceVersion={rv}",
                          headers={"Accept": "application/json"})
        resp = self.conn.getresponse()
        if resp.status != 200:
            raise RuntimeError(f"watch {self.path}: {resp.status} {resp.read()[:300]!r}")
        return resp

    def _run(self):
        while not self.stopped.is_set():
            why = "closed by the server"
            try:
                for line in self.resp:
                    event = json.loads(line)
                    if event.get("type") in ("ADDED", "MODIFIED"):
                        self.on_object(event["object"])
                    elif event.get("type") == "ERROR":
                        why = f"ERROR event {event.get('object', {}).get('message', '')}"
                        break
            except Exception as e:  # noqa: BLE001 - closed by stop(), or restarted below
                why = repr(e)
            if self.stopped.is_set():
                return
            self.restarts += 1
            print(f"measure.py: watch {self.path} ended ({why}); listing and watching again",
                  file=sys.stderr, flush=True)
            self.conn.close()
            while not self.stopped.is_set():
                try:
                    self.resp = self._list_and_watch()
                    break
                except Exception as e:  # noqa: BLE001 - the server may be busy; try again
                    print(f"measure.py: relist {self.path}: {e!r}", file=sys.stderr, flush=True)
                    time.sleep(1)

    def stop(self):
        self.stopped.set()
        try:
            self.conn.sock.shutdown(2)
        except Exception:  # noqa: BLE001
            pass
        self.conn.close()


class Tracker:
    """Which names have reached a phase (first time seen), and when the last one did."""

    def __init__(self, want, phase_of):
        self.want, self.phase_of = want, phase_of
        self.done = set()
        self.lock = threading.Lock()
        self.all_done = threading.Event()
        self.end = None

    def __call__(self, obj):
        if self.phase_of(obj) != "Running":
            return
        with self.lock:
            self.done.add(obj["metadata"]["name"])
            if len(self.done) >= self.want and not self.all_done.is_set():
                self.end = time.monotonic()
                self.all_done.set()


class Timeline:
    """When each pod was first seen created, bound to a node and Running, from the same watch
    events as the Tracker (no extra requests); summary() says how long after `start` a quarter,
    half and all of the pods had reached each, which shows whether the creates, the scheduler
    or the node agent set the pace."""

    STATES = (("created", lambda o: True),
              ("bound", lambda o: bool(o.get("spec", {}).get("nodeName"))),
              ("running", lambda o: pod_phase(o) == "Running"))

    def __init__(self, then):
        self.then = then
        self.first = {state: {} for state, _ in self.STATES}
        self.lock = threading.Lock()

    def __call__(self, obj):
        now = time.monotonic()
        name = obj["metadata"]["name"]
        with self.lock:
            for state, reached in self.STATES:
                if reached(obj):
                    self.first[state].setdefault(name, now)
        self.then(obj)

    def summary(self, start, want):
        parts = []
        for state, _ in self.STATES:
            times = sorted(t - start for t in self.first[state].values())
            if len(times) < want:
                parts.append(f"{state}={len(times)}/{want}")
                continue
            q = [times[max(0, int(f * want) - 1)] for f in (0.25, 0.5, 1.0)]
            parts.append(f"{state}_s=" + "/".join(f"{t:.1f}" for t in q))
        return " ".join(parts) + " (quarter/half/all)"


def post_all(api, path, objects, threads):
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        for f in [pool.submit(api.request, "POST", path, o) for o in objects]:
            f.result()


def namespace(api, ns):
    api.request("POST", "/api/v1/namespaces",
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    wait_until(f"service account default in {ns}",
               lambda: api.status(f"/api/v1/namespaces/{ns}/serviceaccounts/default") == 200)


def delete_namespace(api, ns, timeout):
    api.request("DELETE", f"/api/v1/namespaces/{ns}", ok=(200, 202, 404))
    wait_until(f"namespace {ns} to be gone",
               lambda: api.status(f"/api/v1/namespaces/{ns}") == 404, timeout=timeout)


def pod_phase(obj):
    return obj.get("status", {}).get("phase")


def run_peer(api, ns, jobs, workers, threads, timeout):
    namespace(api, ns)
    try:
        pods = Tracker(jobs * workers, pod_phase)
        timeline = Timeline(pods)
        watch = Watch(api, f"/api/v1/namespaces/{ns}/pods", timeline)
        objects = [{"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": f"peer-{j}-worker-{w}",
                                 "labels": {"bench": "peer", "job": str(j)}},
                    "spec": POD_SPEC} for j in range(jobs) for w in range(workers)]
        start = time.monotonic()
        post_all(api, f"/api/v1/namespaces/{ns}/pods", objects, threads)
        posted = time.monotonic() - start
        if not pods.all_done.wait(timeout):
            raise RuntimeError(f"peer: {len(pods.done)}/{jobs * workers} pods Running after {timeout}s")
        watch.stop()
        print(f"peer timeline: {timeline.summary(start, jobs * workers)}", flush=True)
        return pods.end - start, posted
    finally:
        # Pods first, all at once, so the namespace controller has little left to do.
        api.request("DELETE", f"/api/v1/namespaces/{ns}/pods", ok=(200, 202, 404))
        delete_namespace(api, ns, timeout)


def run_tessera(api, ns, jobs, workers, threads, timeout, leave):
    namespace(api, ns)
    measured = False
    try:
        pods = Tracker(jobs * workers, pod_phase)
        tjs = Tracker(jobs, lambda o: o.get("status", {}).get("phase"))
        sel = urllib.parse.quote("tessera.dev/job-name")
        timeline = Timeline(pods)
        pod_watch = Watch(api, f"/api/v1/namespaces/{ns}/pods?labelSelector={sel}", timeline)
        tj_path = f"/apis/tessera.dev/v1alpha1/namespaces/{ns}/trainingjobs"
        job_watch = Watch(api, tj_path, tjs)
        objects = [{"apiVersion": "tessera.dev/v1alpha1", "kind": "TrainingJob",
                    "metadata": {"name": f"scale-{j}"},
                    "spec": {"workers": workers, "template": {"spec": POD_SPEC}}}
                   for j in range(jobs)]
        start = time.monotonic()
        post_all(api, tj_path, objects, threads)
        posted = time.monotonic() - start
        deadline = start + timeout
        for tracker, what in ((pods, "pods"), (tjs, "jobs")):
            if not tracker.all_done.wait(max(0, deadline - time.monotonic())):
                raise RuntimeError(f"tessera: {len(tracker.done)}/{tracker.want} {what} Running "
                                   f"after {timeout}s")
        pod_watch.stop()
        job_watch.stop()
        print(f"tessera timeline: {timeline.summary(start, jobs * workers)}", flush=True)
        measured = True
        return pods.end - start, tjs.end - start, posted
    finally:
        if not (leave and measured):  # with --leave-tessera the caller tears the cluster down
            delete_jobs_and_namespace(api, ns, timeout)


def delete_jobs_and_namespace(api, ns, timeout):
    # The jobs first, in the foreground, so the controller leaves their pods to the garbage
    # collector instead of answering each vanishing pod.
    api.request("DELETE", f"/apis/tessera.dev/v1alpha1/namespaces/{ns}/trainingjobs",
                {"propagationPolicy": "Foreground"}, ok=(200, 202, 404))
    wait_until("the TrainingJobs to be gone", lambda: not api.request(
        "GET", f"/apis/tessera.dev/v1alpha1/namespaces/{ns}/trainingjobs")[1]["items"],
               timeout=timeout)
    delete_namespace(api, ns, timeout)

def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--timeout", type=int, default=1800)
    parser.add_argument("--result", help="write the figures here as JSON")
    parser.add_argument("--leave-tessera", action="store_true",
                        help="do not delete the TrainingJobs after measuring (the garbage "
                             "collector takes ~15 minutes for 8000 pods on 2 cores; run.sh "
                             "tears the whole cluster down instead)")
    args = parser.parse_args()
    api = Api(args.kubeconfig)
    pods = args.jobs * args.workers
    peer, peer_posted = run_peer(api, f"bench-scale-peer-{os.getpid()}", args.jobs,
                                 args.workers, args.threads, args.timeout)
    print(f"peer pods={pods} all_running_s={peer:.2f} posted_s={peer_posted:.2f}", flush=True)
    t_pods, t_jobs, t_posted = run_tessera(api, f"bench-scale-tessera-{os.getpid()}", args.jobs,
                                           args.workers, args.threads, args.timeout,
                                           args.leave_tessera)
    print(f"tessera jobs={args.jobs} workers={args.workers} pods={pods} "
          f"pods_running_s={t_pods:.2f} jobs_running_s={t_jobs:.2f} posted_s={t_posted:.2f}",
          flush=True)
    if args.result:
        with open(args.result, "w") as f:
            json.dump({"peer_s": peer, "tessera_pods_s": t_pods, "tessera_jobs_s": t_jobs}, f)
    print(f"ratio={max(t_pods, t_jobs) / peer:.3f}")


if __name__ == "__main__":
    main()
