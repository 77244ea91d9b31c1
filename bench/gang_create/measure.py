#!/usr/bin/env python3
"""bench/gang_create/measure.py: time from creating a gang's owner object to all its pods
existing, for a TrainingJob (tessera-controller) and for an Indexed Job
(kube-controller-manager's Job controller), alternating, on the control plane of KUBECONFIG.

Each round works in a fresh namespace: it lists the pods to get a resourceVersion, watches
them from there (so no pod is missed however fast it comes), takes the time, POSTs the object
and stops the clock when the watch has shown WORKERS distinct pods of it. The namespace is
deleted (and gone) before the next round. Pods get a nodeSelector no node matches, so they
stay Pending: only creation is measured, not scheduling. With --idle S each measured round
waits S seconds, ready to POST, before it does: the controllers' connections go idle meanwhile,
as between jobs on a quiet cluster.

Prints one line per measurement (`tessera round=1 seconds=...`, `job round=1 seconds=...`),
the medians, and last `ratio=<median tessera / median job>`. Talks to the API server directly
(client certificate of the kubeconfig), so no kubectl start-up is in the figures.
"""
import argparse
import base64
import http.client
import json
import os
import ssl
import statistics
import tempfile
import threading
import time
import urllib.parse

import yaml


class Api:
    def __init__(self, kubeconfig):
        with open(kubeconfig) as f:
            cfg = yaml.safe_load(f)
        cluster = cfg["clusters"][0]["cluster"]
        user = cfg["users"][0]["user"]
        url = urllib.parse.urlparse(cluster["server"])
        self.host, self.port = url.hostname, url.port
        self.dir = tempfile.mkdtemp(prefix="gang-create-")
        paths = {}
        for key, name in (("certificate-authority-data", "ca.crt"),):
            paths[name] = self._write(name, cluster[key])
        for key, name in (("client-certificate-data", "user.crt"), ("client-key-data", "user.key")):
            paths[name] = self._write(name, user[key])
        self.ctx = ssl.create_default_context(cafile=paths["ca.crt"])
        self.ctx.load_cert_chain(paths["user.crt"], paths["user.key"])

    def _write(self, name, data):
        path = os.path.join(self.dir, name)
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))
        os.chmod(path, 0o600)
        return path

    def connect(self, timeout=120):
        return http.client.HTTPSConnection(self.host, self.port, context=self.ctx, timeout=timeout)

    def request(self, method, path, body=None, ok=(200, 201, 202)):
        conn = self.connect()
        try:
            headers = {"Accept": "application/json"}
            data = None
            if body is not None:
                data = json.dumps(body).encode()
                headers["Content-Type"] = "application/json"
            conn.request(method, path, body=data, headers=headers)
            resp = conn.getresponse()
            payload = resp.read()
            if resp.status not in ok:
                raise RuntimeError(f"{method} {path}: {resp.status} {payload[:300]!r}")
            return resp.status, json.loads(payload) if payload else None
        finally:
            conn.close()

    def status(self, path):
        conn = self.connect()
        try:
            conn.request("GET", path, headers={"Accept": "application/json"})
            resp = conn.getresponse()
            resp.read()
            return resp.status
        finally:
            conn.close()


def wait_until(what, predicate, timeout=120):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.1)


def pod_template(image):
    return {
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "nodeSelector": {"tessera.dev/bench": "no-such-node"},
            "containers": [{"name": "worker", "image": image, "command": ["/bin/true"]}],
        }
    }


def training_job(name, workers):
    return ("/apis/tessera.dev/v1alpha1/namespaces/{ns}/trainingjobs",
            {"apiVersion": "tessera.dev/v1alpha1", "kind": "TrainingJob",
             "metadata": {"name": name},
             "spec": {"workers": workers, "template": pod_template("tessera/worker:bench")}},
            "tessera.dev/job-name=" + name)


def indexed_job(name, workers):
    return ("/apis/batch/v1/namespaces/{ns}/jobs",
            {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
             "spec": {"completions": workers, "parallelism": workers,
                      "completionMode": "Indexed", "backoffLimit": 0,
                      "template": pod_template("tessera/worker:bench")}},
            "batch.kubernetes.io/job-name=" + name)


def measure(api, kind, workers, round_index, idle=0.0):
    ns = f"bench-gang-{kind}-{round_index}-{os.getpid()}"
    api.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                               "metadata": {"name": ns}})
    path = None
    try:
        # Pods are refused until the service-account controller has made `default`.
        wait_until(f"service account default in {ns}",
                   lambda: api.status(f"/api/v1/namespaces/{ns}/serviceaccounts/default") == 200)
        collection, obj, selector = (training_job if kind == "tessera" else indexed_job)(
            "gang", workers)
        collection = collection.format(ns=ns)
        sel = urllib.parse.quote(selector)
        _, listed = api.request("GET", f"/api/v1/namespaces/{ns}/pods?labelSelector={sel}")
        rv = listed["metadata"]["resourceVersion"]

        done = threading.Event()
        result = {}
        conn = api.connect(timeout=300)
        conn.request("GET", f"/api/v1/namespaces/{ns}/pods?watch=1&labelSelector={sel}"
                            f"&resourceVersion={rv}", headers={"Accept": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            raise RuntimeError(f"watch pods in {ns}: {resp.status} {resp.read()[:300]!r}")

        def watch():
            names = set()
            try:
                for line in resp:
                    event = json.loads(line)
                    if event.get("type") == "ADDED":
                        result.setdefault("first", time.monotonic())
                        names.add(event["object"]["metadata"]["name"])
                        if len(names) >= workers:
                            result["end"] = time.monotonic()
                            break
            except Exception as e:  # noqa: BLE001 - reported below
                result["error"] = repr(e)
            done.set()

        thread = threading.Thread(target=watch, daemon=True)
        thread.start()
        time.sleep(idle)
        start = time.monotonic()
        api.request("POST", collection, obj)
        posted = time.monotonic()
        path = collection
        if not done.wait(300):
            raise RuntimeError(f"{kind}: {workers} pods did not appear within 300s")
        conn.close()
        if "error" in result or "end" not in result:
            raise RuntimeError(f"{kind}: the watch ended: {result.get('error', 'closed')}")
        return result["end"] - start, result["first"] - start, posted - start
    finally:
        # The owner first, in the foreground, so its controller sees it deleting and leaves its
        # pods to the garbage collector (a namespace deleted under a live TrainingJob makes the
        # controller answer its vanishing pods, spending its client's tokens before the next
        # round). Then the namespace.
        if path:
            api.request("DELETE", f"{path}/gang", {"propagationPolicy": "Foreground"},
                        ok=(200, 202, 404))
            wait_until(f"{kind} gang and its pods to be gone",
                       lambda: api.status(f"{path}/gang") == 404, timeout=300)
        api.request("DELETE", f"/api/v1/namespaces/{ns}", ok=(200, 202, 404))
        wait_until(f"namespace {ns} to be gone",
                   lambda: api.status(f"/api/v1/namespaces/{ns}") == 404, timeout=300)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--workers", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--idle", type=float, default=0.0,
                        help="seconds each measured round waits, everything ready, before its "
                             "POST: over a minute lets the controllers' idle connections close")
    args = parser.parse_args()
    api = Api(args.kubeconfig)
    times = {"tessera": [], "job": []}
    # A warm-up of each, not counted: the first watch of a new CRD's resource can lag while the
    # API server fills its watch cache.
    for kind in ("tessera", "job"):
        seconds, first, posted = measure(api, kind, args.workers, 0)
        print(f"{kind} warm-up workers={args.workers} seconds={seconds:.3f} "
              f"first_pod={first:.3f} posted={posted:.3f}", flush=True)
    for r in range(1, args.rounds + 1):
        order = ("tessera", "job") if r % 2 else ("job", "tessera")
        for kind in order:
            seconds, first, posted = measure(api, kind, args.workers, r, args.idle)
            times[kind].append(seconds)
            print(f"{kind} round={r} workers={args.workers} seconds={seconds:.3f} "
                  f"first_pod={first:.3f} posted={posted:.3f}", flush=True)
    t, j = statistics.median(times["tessera"]), statistics.median(times["job"])
    idle = f" idle={args.idle:g}s" if args.idle else ""
    print(f"median tessera={t:.3f}s job={j:.3f}s rounds={args.rounds}{idle}")
    print(f"ratio={t / j:.3f}")


if __name__ == "__main__":
    main()
