#!/usr/bin/env python3
"""Differential test of `tessera validate` against the apiserver (kubectl --dry-run=server).

Starts from the valid examples in manifests/examples/, makes mutants that change one or two
fields (boundary values, wrong types, nulls, unknown fields, enum values, cross-field rules,
metadata), and asks both: `tessera validate FILE` and `kubectl create --dry-run=server -f DIR`
(in batches). Both must accept, or both refuse naming the same fields.

  differential.py --tessera BIN [--kubectl BIN] [--limit N] [--seed S] [--out DIR] [--all]

Exit 0 when every mutant agrees (or its disagreement is a documented difference, see
KNOWN_DIFFERENCES); 1 otherwise, with one line per disagreement. --limit N (300) keeps every
metadata mutant and draws the rest with --seed (the same N each run); --all runs every mutant
(about 2,800, two minutes). --out keeps the mutants and results.json there.
"""
import argparse
import copy
import glob
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
EXAMPLES = os.path.join(ROOT, "manifests", "examples")
CRD = os.path.join(ROOT, "manifests", "crd", "trainingjobs.tessera.dev.yaml")

RAW = "__RAW__"  # a string value "__RAW__<text>" is written as the plain YAML text <text>
DELETE = object()


def raw(text):
    return RAW + text


# --- Mutants -----------------------------------------------------------------------------


def get(doc, path):
    node = doc
    for key in path:
        node = node[key]
    return node


def has(doc, path):
    node = doc
    for key in path:
        if isinstance(node, dict) and key in node:
            node = node[key]
        elif isinstance(node, list) and isinstance(key, int) and key < len(node):
            node = node[key]
        else:
            return False
    return True


def put(doc, path, value):
    node = doc
    for key, next_key in zip(path[:-1], path[1:]):
        if isinstance(node, dict):
            if key not in node or not isinstance(node[key], (dict, list)):
                node[key] = [] if isinstance(next_key, int) else {}
            node = node[key]
        else:
            node = node[key]
    if value is DELETE:
        if isinstance(node, dict):
            node.pop(path[-1], None)
        elif isinstance(node, list) and path[-1] < len(node):
            del node[path[-1]]
    elif isinstance(node, list) and path[-1] >= len(node):
        node.append(value)
    else:
        node[path[-1]] = value


def dotted(path):
    out = ""
    for key in path:
        out += "[%d]" % key if isinstance(key, int) else ("." if out else "") + key
    return out


def dump(doc):
    text = yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=1 << 20)
    # '__RAW__x' (quoted or not) becomes the plain scalar x.
    return re.sub(r"""(['"]?)__RAW__(.*?)\1$""", r"\2", text, flags=re.M)


def leaves(schema, path=()):
    """(path, schema) of every field of the CRD's schema below spec, arrays as [0]."""
    out = []
    for key, sub in (schema.get("properties") or {}).items():
        p = path + (key,)
        out.append((p, sub))
        if sub.get("type") == "object":
            out.extend(leaves(sub, p))
        elif sub.get("type") == "array" and "items" in sub:
            item = sub["items"]
            out.append((p + (0,), item))
            if item.get("type") == "object":
                out.extend(leaves(item, p + (0,)))
    return out


def boundary_values(sub):
    """Values around a field's constraints, with a short label each."""
    t = sub.get("type")
    vals = []
    if t in ("integer", "number"):
        lo, hi = sub.get("minimum"), sub.get("maximum")
        if lo is not None:
            vals += [("min", lo), ("min-1", lo - 1)]
            if t == "number":
                vals += [("min-tiny", lo - 1e-9), ("min+tiny", lo + 1e-9)]
        if hi is not None:
            vals += [("max", hi), ("max+1", hi + 1)]
            if t == "number":
                vals += [("max+tiny", hi + 1e-9)]
        vals += [("zero", 0), ("one", 1), ("negative", -1), ("huge", raw("9223372036854775807")),
                 ("beyond-int64", raw("9223372036854775808")), ("1e30", raw("1e30")),
                 ("string", "3"), ("bool", True), ("list", [1]), ("object", {"a": 1}),
                 ("empty-string", ""), ("inf", raw(".inf")), ("neg-zero", raw("-0")),
                 ("octal", raw("010")), ("hex", raw("0x10")), ("1e3", raw("1e3"))]
        if t == "integer":
            vals += [("float", 2.5), ("float-integral", raw("2.0")), ("exp-int", raw("2e0")),
                     ("underscore", raw("1_000")), ("09", raw("09"))]
        for e in sub.get("enum") or []:
            vals.append(("enum-" + str(e), e))
    elif t == "string":
        vals += [("empty", ""), ("int", 5), ("bool-yes", raw("yes")), ("bool-y", raw("y")),
                 ("null-word", raw("~")), ("list", ["a"]), ("float", 1.5),
                 ("unicode", "\u00e9\u6f22\U0001F600"), ("spaces", "  "),
                 ("nul-escape", raw('"a\\0b"'))]
        mx = sub.get("maxLength")
        if mx is not None:
            vals += [("maxlen", "a" * mx), ("maxlen+1", "a" * (mx + 1)),
                     ("maxlen-unicode", "\u00e9" * mx), ("maxlen+1-unicode", "\u00e9" * (mx + 1)),
                     ("maxlen-astral", "\U0001F600" * mx)]
        else:
            vals += [("long", "x" * 5000)]
        for e in sub.get("enum") or []:
            vals += [("enum-" + e, e), ("enum-upper-" + e, e.upper()), ("enum-space-" + e, e + " ")]
        if sub.get("enum"):
            vals.append(("enum-wrong", "nope"))
        if sub.get("format") == "date-time":
            vals += [("time-ok", "2026-12-07T10:00:00Z"), ("time-bad", "yesterday")]
    elif t == "boolean":
        vals += [("true", True), ("false", False), ("string-true", "true"), ("int", 1),
                 ("yes", raw("yes")), ("on", raw("on")), ("y", raw("y")), ("n", raw("n"))]
    elif t == "array":
        vals += [("empty", []), ("scalar", 3), ("object", {"a": 1}), ("null-item", [None])]
        mi = sub.get("maxItems")
        item = sub.get("items", {})
        if mi is not None:
            filler = (list(range(1, mi + 1)) if item.get("type") == "integer"
                      else [{"name": "c%d" % i} for i in range(mi)] if item.get("type") == "object"
                      else ["a"] * mi)
            vals += [("maxitems", filler), ("maxitems+1", filler + filler[:1])]
        if item.get("type") == "integer":
            vals += [("dup", [3, 3]), ("dup-nonadjacent", [3, 4, 3]), ("zero-item", [0]),
                     ("string-item", ["3"]), ("float-item", [2.5]), ("256", [256]),
                     ("255", [255]), ("float-integral-item", [2.0])]
    elif t == "object":
        vals += [("empty", {}), ("scalar", 1), ("list", []), ("string", "x")]
    vals.append(("null", None))
    vals.append(("unknown-child", {"bogus": 1}) if t == "object" else ("delete", DELETE))
    return vals


def crd_schema():
    with open(CRD) as f:
        crd = yaml.safe_load(f)
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def examples():
    out = {}
    for path in sorted(glob.glob(os.path.join(EXAMPLES, "*.yaml"))):
        with open(path) as f:
            out[os.path.basename(path)[:-5]] = yaml.safe_load(f)
    return out


def mutants():
    """[(group, description, text)], deterministic. Groups: fields, structure, rules, metadata."""
    ex = examples()
    schema = crd_schema()
    out = []
    group = ["fields"]

    def add(base, desc, *changes):
        doc = copy.deepcopy(ex[base])
        for path, value in changes:
            put(doc, path, value)
        out.append((group[0], "%s: %s" % (base, desc), dump(doc)))

    # 1. Every field of spec, its boundaries and wrong types, on a base that has the field's
    #    parent (cpu-tiny for the trainer, byo-torchrun for the template, hybrid-3d for the rest).
    for path, sub in leaves(schema["properties"]["spec"], ("spec",)):
        if "template" in path and len(path) > 4 and path[3] == "containers":
            bases = ["byo-torchrun"]
        elif "template" in path:
            bases = ["byo-torchrun"]
        else:
            bases = ["hybrid-3d"] if path[1] in ("scheduling", "parallelism") else ["cpu-tiny"]
        for base in bases:
            for label, value in boundary_values(sub):
                add(base, "%s=%s" % (dotted(path), label), (path, value))
    # The same fields on the bf16 GPU example, where the defaults differ.
    for path, sub in leaves(schema["properties"]["spec"], ("spec",)):
        if path[1] in ("workers", "gpusPerWorker", "procsPerWorker", "parallelism", "trainer") \
                and sub.get("type") in ("integer", "number"):
            for label, value in boundary_values(sub)[:6]:
                add("data-parallel", "%s=%s" % (dotted(path), label), (path, value))

    # 2. Removed fields and unknown fields at every depth, on every example.
    group[0] = "structure"
    for base, doc in ex.items():
        def walk(node, path):
            if isinstance(node, dict):
                for key, child in node.items():
                    p = path + (key,)
                    add(base, "remove %s" % dotted(p), (p, DELETE))
                    add(base, "null %s" % dotted(p), (p, None))
                    walk(child, p)
                bogus = path + ("bogusField",)
                add(base, "unknown %s" % dotted(bogus), (bogus, 1))
            elif isinstance(node, list):
                for i, child in enumerate(node):
                    walk(child, path + (i,))
        walk(doc, ())

    # 3. Cross-field rules.
    group[0] = "rules"
    S = ("spec",)
    P = S + ("parallelism",)
    M = S + ("trainer", "model")
    for base in ex:
        if "trainer" not in ex[base]["spec"]:
            continue
        for w in (1, 2, 3, 4, 8):
            for d in (1, 2, 3, 4, 16, 32):
                add(base, "workers=%d data=%d" % (w, d), (S + ("workers",), w), (P + ("data",), d))
        for pp in (1, 2, 3, 4, 8, 9, 13, 48, 1024):
            add(base, "pipeline=%d" % pp, (P + ("pipeline",), pp))
            add(base, "pipeline=%d no data" % pp, (P + ("pipeline",), pp), (P + ("data",), DELETE))
        for t in (1, 2, 3, 5, 6, 7, 12, 25, 256):
            add(base, "tensor=%d" % t, (P + ("tensor",), t))
            add(base, "tensor=%d no data" % t, (P + ("tensor",), t), (P + ("data",), DELETE))
        for h in (1, 3, 5, 7, 12, 25, 1024):
            add(base, "heads=%d" % h, (M + ("heads",), h))
        for dm in (1, 50, 100, 65536):
            add(base, "dModel=%d" % dm, (M + ("dModel",), dm))
        for layers in (1, 3):
            add(base, "layers=%d" % layers, (M + ("layers",), layers))
        for g in (1, 7, 15, 17, 48, 1048576):
            add(base, "batch.global=%d" % g, (S + ("trainer", "batch", "global"), g))
        for mb in (1, 3, 5, 64):
            add(base, "microBatches=%d" % mb, (P + ("microBatches",), mb))
        for gpus in (0, 1, 2, 4, 16):
            add(base, "gpusPerWorker=%d" % gpus, (S + ("gpusPerWorker",), gpus))
            add(base, "gpusPerWorker=%d bf16" % gpus, (S + ("gpusPerWorker",), gpus),
                (S + ("trainer", "precision"), "bf16"))
            add(base, "gpusPerWorker=%d no procs" % gpus, (S + ("gpusPerWorker",), gpus),
                (S + ("procsPerWorker",), DELETE))
        for procs in (1, 2, 3, 8):
            add(base, "procsPerWorker=%d" % procs, (S + ("procsPerWorker",), procs))
        add(base, "bf16 zero1", (S + ("trainer", "precision"), "bf16"), (P + ("zeroStage",), 1))
        add(base, "preset only", (M, {"preset": "gpt2-124m"}))
        add(base, "preset+heads 5", (M, {"preset": "gpt2-124m", "heads": 5}))
        add(base, "model no seqLen", (M + ("seqLen",), DELETE), (M + ("preset",), DELETE))
        add(base, "model empty", (M, {}))
        add(base, "vocab 255 byte", (M + ("vocab",), 255),
            (S + ("trainer", "data", "tokenizer"), "byte"))
        add(base, "vocab 65537 uint16", (M + ("vocab",), 65537),
            (S + ("trainer", "data", "tokenizer"), "uint16"))
        add(base, "vocab 65536 uint16", (M + ("vocab",), 65536),
            (S + ("trainer", "data", "tokenizer"), "uint16"))
        add(base, "no vocab byte", (M + ("vocab",), DELETE), (M + ("preset",), DELETE))
        add(base, "warmup=steps", (S + ("trainer", "schedule", "warmupSteps"), 300),
            (S + ("trainer", "schedule", "steps"), 300))
        add(base, "warmup>steps", (S + ("trainer", "schedule", "warmupSteps"), 301),
            (S + ("trainer", "schedule", "steps"), 300))
        add(base, "trainer and command", (S + ("template",), {"spec": {"containers": [
            {"name": "worker", "image": "x", "command": ["python3"]}]}}))
        add(base, "trainer and empty command", (S + ("template",), {"spec": {"containers": [
            {"name": "worker", "image": "x", "command": []}]}}))
        add(base, "trainer and sidecar command", (S + ("template",), {"spec": {"containers": [
            {"name": "side", "image": "x", "command": ["sh"]}]}}))
        add(base, "no trainer", (S + ("trainer",), DELETE))
        add(base, "trainer null", (S + ("trainer",), None))
        add(base, "trainer {}", (S + ("trainer",), {}))
    b = "byo-torchrun"
    C = S + ("template", "spec", "containers")
    add(b, "command empty", (C + (0, "command"), []))
    add(b, "command null", (C + (0, "command"), None))
    add(b, "command [null]", (C + (0, "command"), [None]))
    add(b, "command [1]", (C + (0, "command"), [1]))
    add(b, "command string", (C + (0, "command"), "python3"))
    add(b, "container name Worker", (C + (0, "name"), "Worker"))
    add(b, "container name null", (C + (0, "name"), None))
    add(b, "container null", (C + (0,), None))
    add(b, "containers []", (C, []))
    add(b, "two worker containers", (C + (1,), {"name": "worker", "command": ["x"]}))
    add(b, "two worker containers, second no command", (C + (1,), {"name": "worker"}))
    add(b, "template.metadata bogus", (S + ("template", "metadata"), {"labels": {"a": 1}}))
    add(b, "template.spec.bogus", (S + ("template", "spec", "bogusField"), 1))
    add(b, "template null", (S + ("template",), None))
    add(b, "template.spec null", (S + ("template", "spec"), None))
    add(b, "containers null", (C, None))
    add(b, "with gpus", (S + ("gpusPerWorker",), 2))
    add(b, "with procs 3 gpus 2", (S + ("gpusPerWorker",), 2), (S + ("procsPerWorker",), 3))
    add(b, "trainer of only precision bf16", (S + ("trainer",), {"precision": "bf16"}))

    # Metrics port, queue.
    for port in (1, 80, 29499, 29500, 29501, 29502, 65535, 65536):
        add("cpu-tiny", "metrics.port=%d" % port, (S + ("metrics", "port"), port))
    for sched, queue in (("volcano", "q"), ("", "q"), ("Volcano", "q"), ("other", ""), (None, "q"),
                         ("volcano", "")):
        changes = [(S + ("scheduling", "queue"), queue)]
        changes.append((S + ("scheduling", "schedulerName"),
                        sched if sched is not None else DELETE))
        add("cpu-tiny", "scheduler=%r queue=%r" % (sched, queue), *changes)

    # 4. Metadata: the name, generateName, namespace, labels, annotations, server-set fields.
    group[0] = "metadata"
    MD = ("metadata",)
    names = ["a", "a" * 54, "a" * 55, "a" * 53, "A", "ab-", "-ab", "1ab", "a.b", "a_b", "a b",
             "\u00e9", "a--b", "", "x" * 63, "x" * 64, "x" * 300, "worker", raw("yes"), raw("123"),
             raw("null")]
    for n in names:
        add("cpu-tiny", "name=%r" % n[:20], (MD + ("name",), n))
    for workers, n in ((10, "a" * 45), (10, "a" * 46), (100, "a" * 44), (100, "a" * 45),
                       (1000, "a" * 43), (1000, "a" * 44), (4096, "a" * 43), (1, "a" * 54),
                       (11, "a" * 45)):
        add("cpu-tiny", "hostname %d workers, name %d" % (workers, len(n)),
            (MD + ("name",), n), (S + ("workers",), workers), (P + ("data",), workers))
    for gn in ("job-", "Job-", "a" * 60 + "-", "", "a.b-"):
        add("cpu-tiny", "generateName=%r no name" % gn[:20], (MD + ("generateName",), gn),
            (MD + ("name",), DELETE))
        add("cpu-tiny", "generateName=%r and name" % gn[:20], (MD + ("generateName",), gn))
    for ns in ("default", "Bad_NS", "x" * 64, ""):
        add("cpu-tiny", "namespace=%r" % ns[:20], (MD + ("namespace",), ns))
    labels = [{"app": "x"}, {"bad key": "x"}, {"app": "bad value"}, {"app": "x" * 64},
              {"app": "x" * 63}, {"a/b/c": "x"}, {"example.com/app": "x"}, {"app": 1},
              {"app": None}, {"app": True}, {"": "x"}, {"x" * 64: "v"}, {"-a": "v"},
              {"app": "-x"}, {"UPPER.com/A": "v"}]
    for lab in labels:
        add("cpu-tiny", "labels=%s" % json.dumps(lab)[:40], (MD + ("labels",), lab))
    for ann in ({"a": "x"}, {"bad key": "x"}, {"a": 1}, {"a": None}, {"a": "x" * 300000},
                {"a" * 64: "x"}):
        add("cpu-tiny", "annotations=%s" % json.dumps(ann)[:40], (MD + ("annotations",), ann))
    for key, value in (("uid", "abc"), ("resourceVersion", "12"), ("generation", 5),
                       ("generation", -1), ("selfLink", "/x"), ("deletionGracePeriodSeconds", 5),
                       ("finalizers", ["example.com/f"]), ("finalizers", ["bad finalizer"]),
                       ("finalizers", ["kubernetes"]), ("finalizers", [1]),
                       ("finalizers", ["a.com/f", "a.com/f"]),
                       ("ownerReferences", [{"apiVersion": "v1", "kind": "X", "name": "y",
                                             "uid": "z"}]),
                       ("ownerReferences", [{"bogus": 1}]),
                       ("ownerReferences", [{"apiVersion": "v1", "kind": "X", "name": "y",
                                             "uid": "z", "controller": "yes"}]),
                       ("managedFields", [{"manager": "x"}]),
                       ("creationTimestamp", "2026-12-07T10:00:00Z"),
                       ("creationTimestamp", "yesterday"),
                       ("deletionTimestamp", "2026-12-07T10:00:00Z"),
                       ("bogus", 1), ("labels", []), ("labels", "x"), ("annotations", []),
                       ("name", None), ("namespace", None), ("clusterName", "x")):
        add("cpu-tiny", "metadata.%s=%s" % (key, json.dumps(value)[:40]), (MD + (key,), value))
    add("cpu-tiny", "metadata null", (MD, None))
    add("cpu-tiny", "metadata {}", (MD, {}))
    add("cpu-tiny", "metadata list", (MD, []))
    add("cpu-tiny", "apiVersion v1beta1", (("apiVersion",), "tessera.dev/v1beta1"))
    add("cpu-tiny", "spec null", (S, None))
    add("cpu-tiny", "spec {}", (S, {}))
    add("cpu-tiny", "status with phase", (("status",), {"phase": "Bogus"}))
    add("cpu-tiny", "status unknown", (("status",), {"bogus": 1}))
    add("cpu-tiny", "status null", (("status",), None))
    add("cpu-tiny", "status list", (("status",), []))
    add("cpu-tiny", "status.conditions dup", (("status",), {"conditions": [
        {"type": "A", "status": "True"}, {"type": "A", "status": "True"}]}))
    add("cpu-tiny", "top-level bogus", (("bogus",), 1))

    # Dedupe identical texts, keep the first description.
    seen, unique = set(), []
    for g, desc, text in out:
        if text not in seen:
            seen.add(text)
            unique.append((g, desc, text))
    return unique


def sample(cases, limit, seed):
    """Every metadata mutant (the rules Kubernetes applies itself, where both sides are most
    likely to drift apart), and the rest of `limit` drawn from the other groups in proportion,
    with a fixed seed."""
    rng = random.Random(seed)
    chosen = [c for c in cases if c[0] == "metadata"]
    others = [c for c in cases if c[0] != "metadata"]
    room = max(0, limit - len(chosen))
    for g in ("fields", "structure", "rules"):
        members = [c for c in others if c[0] == g]
        share = round(room * len(members) / max(1, len(others)))
        chosen += rng.sample(members, min(share, len(members)))
    return chosen[:limit]


# --- Running both ------------------------------------------------------------------------

SERVER_PATH = re.compile(
    r"(?:^|\[|, |: )((?:metadata|spec|status|apiVersion|kind)(?:[.\w\[\]-]*)"
    r"|\.?[\w]+(?:\[[^\]]*\])?(?:\.[\w]+(?:\[[^\]]*\])?)*): "
    r"(?:Invalid value|Required value|Unsupported value|Too long|Too many|Duplicate value|"
    r"Forbidden|Not found)")
UNKNOWN = re.compile(r'unknown field "([^"]+)"')


def server_fields(message):
    # An integer overflow in a CEL rule is reported at the rule's object next to the bound the
    # value breaks; the bound is the error, so only it is compared.
    message = re.sub(
        r'[\w.]+: Invalid value: "object": integer overflow evaluating rule: [^,\]]*', "", message)
    fields = set(UNKNOWN.findall(message))
    for m in SERVER_PATH.finditer(message):
        fields.add(m.group(1).lstrip("."))
    return fields


def run_kubectl(kubectl, files, namespace):
    """{file: (accepted, message)} for every file, in batches."""
    results = {}
    batch = 150
    for i in range(0, len(files), batch):
        chunk = files[i:i + batch]
        d = tempfile.mkdtemp(prefix="kb", dir=os.path.dirname(chunk[0]))
        for f in chunk:
            os.symlink(f, os.path.join(d, os.path.basename(f)))
        p = subprocess.run([kubectl, "create", "--dry-run=server", "-n", namespace, "-o", "name",
                            "-f", d], capture_output=True, text=True)
        errors = {}
        for line in (p.stderr + "\n" + p.stdout).splitlines():
            m = re.search(r'error when creating "([^"]+)": (.*)', line)
            if m:
                errors[os.path.join(d, os.path.basename(m.group(1)))] = m.group(2)
        ok_lines = [line for line in p.stdout.splitlines() if line.startswith("trainingjob")]
        pending = [f for f in chunk if os.path.join(d, os.path.basename(f)) not in errors]
        # Every file without an error line was created, or some failed before the server (a
        # file kubectl cannot parse): then ask about those one by one.
        if len(ok_lines) == len(pending) and "error:" not in p.stderr.replace("Error from", ""):
            for f in pending:
                results[f] = (True, "")
        else:
            for f in pending:
                q = subprocess.run([kubectl, "create", "--dry-run=server", "-n", namespace,
                                    "-o", "name", "-f", f], capture_output=True, text=True)
                results[f] = (q.returncode == 0, (q.stderr + q.stdout).strip().replace("\n", " "))
        for f in chunk:
            key = os.path.join(d, os.path.basename(f))
            if key in errors:
                results[f] = (False, errors[key])
    return results


def run_tessera(tessera, f):
    p = subprocess.run([tessera, "validate", f], capture_output=True, text=True)
    fields = set()
    for line in (p.stdout + p.stderr).splitlines():
        if line.startswith(f + ": "):
            rest = line[len(f) + 2:]
            fields.add(rest.split(": ", 1)[0])
    return p.returncode, fields, (p.stdout + p.stderr).strip()


# Differences docs/api.md documents (section "Checking a job before it runs"): accepted or
# refused by one side only on purpose. Each: (predicate on the mutant's description, why).
KNOWN_DIFFERENCES = [
    (lambda d: "generateName" in d and "no name" in d,
     "metadata.name is required offline; kubectl create also takes generateName (Not the same)"),
    (lambda d: re.search(r": (remove |null )?apiVersion( v1beta1)?$", d),
     "apiVersion/kind values are checked offline only (Offline only)"),
    (lambda d: "namespace=" in d,
     "the namespace is where the job goes: kubectl refuses one that differs from -n, the "
     "apiserver one that does not exist; offline only its length is checked"),
]


def normalize(path):
    return re.sub(r"\[\d*\]", "", path)


def covered(server_path, tessera_paths):
    """The server's field is one tessera names, or below one (strict decoding names the key of
    an object given for a number, `spec.workers.a`, where tessera says spec.workers is no
    object)."""
    return any(server_path == t or server_path.startswith(t + ".") for t in tessera_paths)


def classify(accepted, server_message, rc, tessera_fields):
    """agree-* when both give the same verdict (and, refusing, name the same fields);
    field-* when both refuse at other fields; tessera-* when the verdicts differ."""
    if rc not in (0, 1, 2):
        return "tessera-crashed"
    if accepted and rc == 0:
        return "agree-accept"
    if accepted:
        return "tessera-refuses-server-accepts" if rc == 1 else "tessera-unreadable-server-accepts"
    if rc != 1:
        return "tessera-accepts-server-refuses" if rc == 0 else "tessera-unreadable-server-refuses"
    tn = {normalize(x) for x in tessera_fields}
    sn = {normalize(x) for x in server_fields(server_message)}
    if not sn:
        return "agree-refuse-unparsed-server"  # kubectl refused before sending
    if sn == tn:
        return "agree-refuse"
    if sn <= tn:
        return "agree-refuse-tessera-more"
    if all(covered(x, tn) for x in sn):
        return "agree-refuse-server-names-a-child"
    return "field-partial" if sn & tn else "field-mismatch"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tessera", required=True)
    ap.add_argument("--kubectl", default="kubectl")
    ap.add_argument("--namespace", default="default")
    ap.add_argument("--limit", type=int, default=300)
    ap.add_argument("--seed", type=int, default=20261207)
    ap.add_argument("--all", action="store_true")
    ap.add_argument("--out", help="keep the mutants and a results.json here")
    ap.add_argument("--list", action="store_true", help="print the mutants' count and exit")
    args = ap.parse_args()

    cases = mutants()
    if args.list:
        print(len(cases))
        return 0
    if not args.all and len(cases) > args.limit:
        cases = sample(cases, args.limit, args.seed)
    out = args.out or tempfile.mkdtemp(prefix="tessera-differential-")
    os.makedirs(out, exist_ok=True)
    files = []
    for i, (_, desc, text) in enumerate(cases):
        f = os.path.join(out, "m%04d.yaml" % i)
        with open(f, "w") as fh:
            fh.write("# %s\n%s" % (desc.replace("\n", " "), text))
        files.append(f)
    server = run_kubectl(args.kubectl, files, args.namespace)
    rows, bad, counts = [], 0, {}
    for (_, desc, _), f in zip(cases, files):
        rc, tfields, toutput = run_tessera(args.tessera, f)
        accepted, smessage = server[f]
        kind = classify(accepted, smessage, rc, tfields)
        known = next((why for pred, why in KNOWN_DIFFERENCES if pred(desc)), None)
        disagrees = kind.startswith(("field-", "tessera-")) and \
            kind != "tessera-unreadable-server-refuses"
        if disagrees and not known:
            bad += 1
            print("DISAGREE %s [%s] %s\n  tessera rc=%d: %s\n  server: %s" %
                  (os.path.basename(f), kind, desc, rc, toutput[:400], smessage[:400]))
        label = kind + (" (known)" if disagrees and known else "")
        counts[label] = counts.get(label, 0) + 1
        rows.append({"file": f, "desc": desc, "kind": kind, "known": known, "tessera_rc": rc,
                     "tessera": toutput, "server_accepted": accepted, "server": smessage})
    with open(os.path.join(out, "results.json"), "w") as fh:
        json.dump(rows, fh, indent=1)
    if not args.out:
        shutil.rmtree(out)
    print("mutants %d: %s" %
          (len(cases), ", ".join("%s %d" % kv for kv in sorted(counts.items()))))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
