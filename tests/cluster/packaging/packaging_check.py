#!/usr/bin/env python3
"""Checks of Tessera's packaging that need no cluster: the chart's copies of manifests/,
the Grafana dashboards, the Dockerfile, and comparisons of rendered chart output with the
plain manifests. Each subcommand prints one `ok:` line per check, or `FAIL:` lines and exits 1.

  packaging_check.py static                      chart copies, dashboards, Dockerfile, README
  packaging_check.py chart-flags CONTROLLER      the numeric values of the chart's schema
                                                 against `CONTROLLER --help`: a value that
                                                 sets a flag has the flag's range, `helm
                                                 template` refuses it outside (naming the key)
                                                 and renders its bounds into flags the
                                                 controller accepts; docs/controller.md gives
                                                 each flag's range
  packaging_check.py rendered CHART_YAML         a `helm template` of the chart (release
                                                 `tessera`, namespace tessera-system) against
                                                 manifests/: CRD, RBAC rules, controller pod
  packaging_check.py restricted RENDERED_YAML    every pod template meets the restricted
                                                 Pod Security Standard

The repository root is $TESSERA_SOURCE_DIR (default: two levels above this file's directory).
"""
import filecmp
import json
import os
import re
import sys

import yaml

ROOT = os.environ.get("TESSERA_SOURCE_DIR") or os.path.normpath(
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
CHART = os.path.join(ROOT, "charts", "tessera")

failures = []


def fail(message):
    failures.append(message)
    print(f"FAIL: {message}")


def ok(message):
    print(f"ok: {message}")


def rel(path):
    return os.path.relpath(path, ROOT)


def load_docs(path_or_text, is_text=False):
    text = path_or_text if is_text else open(path_or_text).read()
    return [d for d in yaml.safe_load_all(text) if d]


def yaml_files(directory):
    """The YAML files of a directory, without kustomize's kustomization.yaml."""
    if not os.path.isdir(directory):
        return []
    return sorted(f for f in os.listdir(directory)
                  if f.endswith((".yaml", ".yml")) and f != "kustomization.yaml")


# ---- chart copies of manifests/ -----------------------------------------------------------

def check_copy(manifest_dir, chart_dir, what):
    """chart_dir must hold exactly the YAML files of manifest_dir, byte for byte."""
    src, dst = yaml_files(manifest_dir), yaml_files(chart_dir)
    if not src:
        fail(f"{rel(manifest_dir)} holds no YAML: nothing for the chart's {what} to follow")
        return
    fix = f"cp {' '.join(rel(os.path.join(manifest_dir, f)) for f in src)} {rel(chart_dir)}/"
    if src != dst:
        fail(f"{what}: {rel(chart_dir)} has {dst}, {rel(manifest_dir)} has {src}; "
             f"make them the same files ({fix})")
        return
    for name in src:
        if not filecmp.cmp(os.path.join(manifest_dir, name), os.path.join(chart_dir, name),
                           shallow=False):
            fail(f"{what}: {rel(chart_dir)}/{name} differs from {rel(manifest_dir)}/{name}; "
                 f"run: {fix}")
            return
    ok(f"{what}: {rel(chart_dir)} is a copy of {rel(manifest_dir)} ({', '.join(src)})")


# ---- dashboards ---------------------------------------------------------------------------

METRIC_TOKEN = re.compile(r"\btessera_[a-z0-9_]+")
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


METRICS_DOC = os.path.join(ROOT, "docs", "metrics.md")
# Each table of docs/metrics.md and the source that registers its metrics.
METRIC_TABLES = {
    "Controller": os.path.join(ROOT, "controller", "reconcile", "metrics.cpp"),
    "Training": os.path.join(ROOT, "worker", "train", "metrics.cpp"),
}
TABLE_ROW_METRIC = re.compile(r"^\| `(tessera_[a-z0-9_]+)`", re.M)


def metric_tables():
    """{section: metric names of its table} for the `## <section> ...` sections of
    docs/metrics.md named in METRIC_TABLES; None when the page does not exist."""
    if not os.path.exists(METRICS_DOC):
        return None
    tables, section = {}, None
    for line in open(METRICS_DOC):
        if line.startswith("## "):
            words = line[3:].split()
            section = words[0] if words and words[0] in METRIC_TABLES else None
            continue
        if section:
            tables.setdefault(section, set()).update(TABLE_ROW_METRIC.findall(line))
    return tables


def check_metric_tables(tables):
    """Each table of docs/metrics.md names exactly the metrics its source registers."""
    for section, source in METRIC_TABLES.items():
        documented = tables.get(section, set())
        if not documented:
            fail(f"docs/metrics.md: no '## {section}' section with a table of tessera_ metrics")
            continue
        registered = set(re.findall(r'"(tessera_[a-z0-9_]+)"', open(source).read()))
        for name in sorted(registered - documented):
            fail(f"{rel(source)} registers {name}, which the {section} table of "
                 "docs/metrics.md lacks")
        for name in sorted(documented - registered):
            fail(f"docs/metrics.md lists {name} under {section}, which {rel(source)} does not "
                 "register")
        if registered == documented:
            ok(f"docs/metrics.md {section} table: the {len(documented)} metrics of {rel(source)}")


def metric_names(expr):
    return set(METRIC_TOKEN.findall(expr))


def base_name(name, known):
    if name in known:
        return name
    for suffix in HISTOGRAM_SUFFIXES:
        if name.endswith(suffix) and name[: -len(suffix)] in known:
            return name[: -len(suffix)]
    return None


def dashboard_panels(dashboard):
    for panel in dashboard.get("panels", []):
        yield panel
        for inner in panel.get("panels", []):
            yield inner


def check_dashboards():
    directory = os.path.join(ROOT, "dashboards")
    chart_dir = os.path.join(CHART, "dashboards")
    if os.path.realpath(directory) != os.path.realpath(chart_dir):
        fail("dashboards/ must be the chart's dashboards (a link to charts/tessera/dashboards)")
    files = sorted(f for f in os.listdir(directory) if f.endswith(".json"))
    if not files:
        fail("dashboards/ holds no JSON")
        return
    tables = metric_tables()
    if tables is None:
        fail("docs/metrics.md does not exist: no list of metric names to check the dashboards "
             "against")
        return
    check_metric_tables(tables)
    known = set().union(*tables.values())
    titles = set()
    for name in files:
        path = os.path.join(directory, name)
        try:
            board = json.load(open(path))
        except json.JSONDecodeError as e:
            fail(f"dashboards/{name}: not JSON: {e}")
            continue
        title = board.get("title", "")
        if not title.startswith("Tessera / "):
            fail(f"dashboards/{name}: title {title!r} should start with 'Tessera / '")
        titles.add(title)
        if not isinstance(board.get("schemaVersion"), int) or board["schemaVersion"] < 36:
            fail(f"dashboards/{name}: schemaVersion {board.get('schemaVersion')} (want >= 36)")
        if not board.get("uid"):
            fail(f"dashboards/{name}: no uid")
        variables = {v.get("name"): v for v in board.get("templating", {}).get("list", [])}
        if variables.get("datasource", {}).get("type") != "datasource":
            fail(f"dashboards/{name}: no datasource variable")
        if "namespace" not in variables:
            fail(f"dashboards/{name}: not templated by namespace")
        ids, queries, reported = set(), 0, {}
        for panel in dashboard_panels(board):
            pid = panel.get("id")
            if pid in ids:
                fail(f"dashboards/{name}: panel id {pid} used twice")
            ids.add(pid)
            if panel.get("type") == "row":
                continue
            targets = panel.get("targets") or []
            if not targets:
                fail(f"dashboards/{name}: panel {panel.get('title')!r} has no query")
            for t in targets:
                expr = t.get("expr", "")
                queries += 1
                if t.get("datasource", {}).get("uid") != "${datasource}":
                    fail(f"dashboards/{name}: panel {panel.get('title')!r} does not use "
                         "the datasource variable")
                used = metric_names(expr)
                if not used:
                    fail(f"dashboards/{name}: panel {panel.get('title')!r}: query uses no "
                         f"tessera_ metric: {expr}")
                used -= reported.get(panel.get("title"), set())
                for metric in sorted(used):
                    if base_name(metric, known) is None:
                        fail(f"dashboards/{name}: panel {panel.get('title')!r} uses {metric}, "
                             "which no table of docs/metrics.md lists")
                        reported.setdefault(panel.get("title"), set()).add(metric)
                for var in re.findall(r"\$(\w+)", expr):
                    if var not in variables and not var.startswith("__"):
                        fail(f"dashboards/{name}: panel {panel.get('title')!r} uses undefined "
                             f"variable ${var}")
        ok(f"dashboards/{name}: {title!r}, {len(ids)} panels, {queries} queries")
    for want in ("Tessera / Jobs", "Tessera / Training"):
        if want not in titles:
            fail(f"no dashboard titled {want!r}")


# ---- Dockerfile ---------------------------------------------------------------------------

def dockerignore_patterns():
    path = os.path.join(ROOT, ".dockerignore")
    if not os.path.exists(path):
        fail(".dockerignore is missing")
        return []
    return [line.strip() for line in open(path)
            if line.strip() and not line.strip().startswith("#")]


def ignored(path, patterns):
    """Docker's rule: the last matching pattern wins; `!` re-includes. Matching here covers
    the forms .dockerignore uses: a path, a directory prefix, and * / ** globs."""
    import fnmatch
    result = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        p = pattern[1:] if negate else pattern
        p = p.lstrip("/").rstrip("/")
        parts = path.split("/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        if any(fnmatch.fnmatch(prefix, p) or fnmatch.fnmatch(prefix, p.replace("**/", ""))
               for prefix in prefixes):
            result = not negate
    return result


def check_dockerfile():
    path = os.path.join(ROOT, "Dockerfile")
    if not os.path.exists(path):
        fail("Dockerfile is missing")
        return
    text = open(path).read().replace("\\\n", " ")
    lines = [line.strip() for line in text.splitlines()
             if line.strip() and not line.strip().startswith("#")]
    patterns = dockerignore_patterns()
    stages, current, users, labels = [], None, {}, {}
    for line in lines:
        word, _, rest = line.partition(" ")
        word = word.upper()
        if word == "FROM":
            m = re.match(r"(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?", rest, re.I)
            current = m.group(2) or f"stage{len(stages)}"
            stages.append((current, m.group(1)))
        elif word == "USER":
            users[current] = rest.strip()
        elif word == "LABEL":
            labels.setdefault(current, []).append(rest)
        elif word in ("COPY", "ADD"):
            args = rest.split()
            if any(a.startswith("--from=") for a in args):
                continue
            sources = [a for a in args if not a.startswith("--")][:-1]
            for src in sources:
                local = src.rstrip("/")
                if local in (".", ""):
                    continue
                if not os.path.exists(os.path.join(ROOT, local)):
                    fail(f"Dockerfile: {word} source {src} does not exist in the repository")
                elif ignored(local, patterns):
                    fail(f"Dockerfile: {word} source {src} is excluded by .dockerignore")
    names = [name for name, _ in stages]
    for want in ("build", "controller", "worker"):
        if want not in names:
            fail(f"Dockerfile: no stage `AS {want}`")
    base = dict(stages)
    if "build" in base and "cuda" not in base["build"]:
        fail(f"Dockerfile: the build stage should start from NVIDIA's CUDA devel image, not {base['build']}")
    if "controller" in base and "cuda" in base["controller"]:
        fail("Dockerfile: the controller stage must not be a CUDA image")
    if "worker" in base and "runtime" not in base["worker"]:
        fail(f"Dockerfile: the worker stage should start from a CUDA runtime image, not {base['worker']}")
    for stage in ("controller", "worker"):
        user = users.get(stage, "")
        if not user or user.split(":")[0] in ("root", "0"):
            fail(f"Dockerfile: stage {stage} runs as root (USER {user or 'unset'})")
        if not any("org.opencontainers.image." in l for l in labels.get(stage, [])):
            fail(f"Dockerfile: stage {stage} has no org.opencontainers.image.* labels")
    for needed in (".git", "build", ".deps", ".cluster"):
        if not ignored(needed, patterns):
            fail(f".dockerignore does not exclude {needed}/")
    ok(f"Dockerfile: stages {', '.join(names)}; COPY sources exist and are not ignored")


# ---- chart README -------------------------------------------------------------------------

def value_keys(values, prefix=""):
    for key, value in values.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value and key not in (
                "resources", "namespaceSelector", "podAnnotations", "podLabels"):
            yield from value_keys(value, path + ".")
        else:
            yield path


def check_readme():
    values = yaml.safe_load(open(os.path.join(CHART, "values.yaml")))
    readme = open(os.path.join(CHART, "README.md")).read()
    documented = set(re.findall(r"^\| `([^`]+)` \|", readme, re.M))
    keys = set(value_keys(values))
    for key in sorted(keys - documented):
        fail(f"charts/tessera/README.md: value {key} is not in the values table")
    for key in sorted(documented - keys):
        fail(f"charts/tessera/README.md: the values table lists {key}, which values.yaml lacks")
    ok(f"charts/tessera/README.md documents all {len(keys)} values")


def static():
    check_copy(os.path.join(ROOT, "manifests", "crd"), os.path.join(CHART, "files", "crds"),
               "CRD")
    rbac = os.path.join(ROOT, "manifests", "rbac")
    if yaml_files(rbac):
        check_copy(rbac, os.path.join(CHART, "files", "rbac"), "RBAC")
    else:
        print("note: manifests/rbac/ has no YAML yet; the chart's files/rbac/ is not compared")
    check_dashboards()
    check_dockerfile()
    check_readme()


# ---- chart values and documented flags against the controller's flags ------------------

# Chart values that become a controller flag: the schema's range must be the flag's, so that
# `helm install` refuses what would make the controller exit 2 at start.
FLAG_VALUES = {
    "controller.workers": "--workers",
    "controller.qps": "--qps",
    "controller.burst": "--burst",
}
# The other numeric values, and the range their schema must give: (minimum, maximum or None).
OTHER_NUMERIC_VALUES = {
    "controller.replicas": (0, None),
    "controller.verbosity": (0, 2),  # that many -v; the controller has two levels above info
    "controller.metricsPort": (1, 65535),  # TCP: --metrics-bind-address=:PORT, containerPort
    "controller.healthPort": (1, 65535),
    "controller.runAsUser": (1, None),  # non-root
    "controller.terminationGracePeriodSeconds": (0, None),
    "metrics.service.port": (1, 65535),
}
HELP_OPTION = re.compile(
    r"^\s+(?:-\w,)?(--[a-z0-9-]+) (INT|FLOAT)(?::(INT|FLOAT) in \[(\S+) - (\S+)\])?")
SUPERSCRIPT = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹", "0123456789")
DOC_RANGE = re.compile(r"(\d+(?:\.\d+)?)([⁰¹²³⁴⁵⁶⁷⁸⁹]*)\s*[–-]\s*(\d+(?:\.\d+)?)([⁰¹²³⁴⁵⁶⁷⁸⁹]*)")


def flag_ranges(controller):
    """{flag: (type, minimum, maximum)} of the numeric options in `controller --help`; the
    bounds are None for an option without a range."""
    import subprocess
    text = subprocess.run([controller, "--help"], capture_output=True, text=True,
                          check=True).stdout
    flags = {}
    for line in text.splitlines():
        m = HELP_OPTION.match(line)
        if not m:
            continue
        flag, kind, check_kind, lo, hi = m.groups()
        if check_kind and check_kind != kind:
            fail(f"tessera-controller --help: {flag} is {kind} with a {check_kind} range "
                 f"[{lo} - {hi}]: its value and its range should have one type")
        flags[flag] = (kind, float(lo) if lo else None, float(hi) if hi else None)
    if not flags:
        fail(f"{controller} --help lists no numeric option")
    return flags


def schema_numbers(schema, path=""):
    """(dotted key, property schema) of every integer or number in the values schema."""
    for key, prop in (schema.get("properties") or {}).items():
        dotted = f"{path}{key}"
        if prop.get("type") in ("integer", "number"):
            yield dotted, prop
        elif prop.get("type") == "object":
            yield from schema_numbers(prop, dotted + ".")


def doc_number(digits, superscript):
    value = float(digits)
    return value ** int(superscript.translate(SUPERSCRIPT)) if superscript else value


def check_doc_ranges(flags):
    """Each flag row of docs/controller.md's table gives the range --help enforces."""
    rows = [line for line in open(os.path.join(ROOT, "docs", "controller.md"))
            if line.startswith("| `-")]
    for flag, (_, lo, hi) in sorted(flags.items()):
        if lo is None:
            continue
        row = next((r for r in rows if f"`{flag}`" in r.split(" | ")[0]), None)
        if row is None:
            fail(f"docs/controller.md: no row of the flags table names `{flag}`")
            continue
        ranges = {(doc_number(a, ae), doc_number(b, be)) for a, ae, b, be in DOC_RANGE.findall(row)}
        if (lo, hi) not in ranges:
            fail(f"docs/controller.md: the row of {flag} does not give its range {lo:g}–{hi:g} "
                 f"(tessera-controller --help); it has {sorted(ranges) or 'none'}")
        else:
            ok(f"docs/controller.md: {flag} {lo:g}–{hi:g}")


def helm_binary():
    import shutil
    found = shutil.which("helm") or os.path.join(ROOT, ".deps", "bin", "helm")
    if not os.path.exists(found):
        fail("helm not found on PATH or in .deps/bin: run scripts/setup.sh first")
        return None
    return found


def helm_template(helm, key, value, work):
    """(accepted, output, controller args) of `helm template` with `key` set to `value`."""
    import subprocess
    values = value
    for part in reversed(key.split(".")):
        values = {part: values}
    path = os.path.join(work, "values.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(values, f)
    env = dict(os.environ, HELM_CACHE_HOME=os.path.join(work, "cache"),
               HELM_CONFIG_HOME=os.path.join(work, "config"),
               HELM_DATA_HOME=os.path.join(work, "data"))
    run = subprocess.run([helm, "template", "t", CHART, "-f", path], capture_output=True,
                         text=True, env=env)
    if run.returncode != 0:
        return False, run.stdout + run.stderr, None
    deployment = by_kind(load_docs(run.stdout, is_text=True), "Deployment")[0]
    return True, run.stdout, deployment["spec"]["template"]["spec"]["containers"][0]["args"]


def chart_flags(controller):
    import subprocess
    import tempfile
    flags = flag_ranges(controller)
    check_doc_ranges(flags)
    schema = json.load(open(os.path.join(CHART, "values.schema.json")))
    numbers = dict(schema_numbers(schema))
    bounds = {}
    for key, prop in sorted(numbers.items()):
        got = (prop.get("minimum"), prop.get("maximum"))
        if "exclusiveMinimum" in prop or "exclusiveMaximum" in prop:
            fail(f"values.schema.json {key}: exclusive bounds; give the flag's inclusive range")
        if key in FLAG_VALUES:
            flag = FLAG_VALUES[key]
            kind, lo, hi = flags.get(flag, (None, None, None))
            if lo is None:
                fail(f"values.schema.json {key}: {flag} has no range in tessera-controller --help")
                continue
            if (prop.get("type") == "integer") != (kind == "INT"):
                fail(f"values.schema.json {key}: type {prop.get('type')}, but {flag} is {kind}")
            want = (lo, hi)
        elif key in OTHER_NUMERIC_VALUES:
            want = OTHER_NUMERIC_VALUES[key]
        else:
            fail(f"values.schema.json {key}: a number this check does not know; add it to "
                 "FLAG_VALUES (it sets a flag) or OTHER_NUMERIC_VALUES in packaging_check.py")
            continue
        if got[0] is None or float(got[0]) != want[0] or (
                (got[1] is None) != (want[1] is None)) or (
                got[1] is not None and float(got[1]) != want[1]):
            fail(f"values.schema.json {key}: range {got}, want {want}"
                 + (f" ({FLAG_VALUES[key]} in tessera-controller --help)" if key in FLAG_VALUES
                    else ""))
        else:
            ok(f"values.schema.json {key}: {want[0]:g} to "
               + (f"{want[1]:g}" if want[1] is not None else "any")
               + (f", as {FLAG_VALUES[key]}" if key in FLAG_VALUES else ""))
        bounds[key] = (prop.get("type") == "integer", want[0], want[1])
    for key in sorted(set(FLAG_VALUES) | set(OTHER_NUMERIC_VALUES)):
        if key not in numbers:
            fail(f"values.schema.json has no number {key}")
    helm = helm_binary()
    if helm is None:
        return
    with tempfile.TemporaryDirectory() as work:
        for key, (integer, lo, hi) in sorted(bounds.items()):
            inside = [lo] + ([hi] if hi is not None else [])
            outside = [lo - 1 if integer else lo / 2] + (
                [hi + 1 if integer else hi * 1.5] if hi is not None else [])
            if integer:
                inside, outside = [int(v) for v in inside], [int(v) for v in outside]
            pointer = "/" + key.replace(".", "/")
            for value in outside:
                accepted, output, _ = helm_template(helm, key, value, work)
                if accepted:
                    fail(f"helm template with {key}={value} was accepted: "
                         f"outside {lo:g}–{hi if hi is not None else 'any'}")
                elif pointer not in output:
                    fail(f"helm template with {key}={value}: refused without naming "
                         f"{pointer}: {output.strip()}")
                else:
                    ok(f"helm template refuses {key}={value} ({pointer})")
            for value in inside:
                accepted, output, args = helm_template(helm, key, value, work)
                if not accepted:
                    fail(f"helm template with {key}={value} (in range) was refused: "
                         f"{output.strip()}")
                    continue
                if key not in FLAG_VALUES:
                    ok(f"helm template accepts {key}={value}")
                    continue
                # The controller parses the rendered flags (--version: parse, print, exit 0).
                run = subprocess.run([controller] + args + ["--version"], capture_output=True,
                                     text=True)
                rendered = [a for a in args if a.startswith(FLAG_VALUES[key] + "=")]
                if run.returncode != 0:
                    fail(f"{key}={value} renders {rendered}, which tessera-controller refuses: "
                         f"{(run.stdout + run.stderr).strip()}")
                else:
                    ok(f"{key}={value} renders {rendered}, which tessera-controller accepts")


# ---- rendered chart against manifests/ ----------------------------------------------------

def by_kind(docs, kind):
    return [d for d in docs if d.get("kind") == kind]


def normalize_rules(rules):
    out = set()
    for r in rules or []:
        for group in r.get("apiGroups", [""]):
            for res in r.get("resources", []):
                for verb in r.get("verbs", []):
                    for name in r.get("resourceNames", None) or ["*any*"]:
                        out.add((group, res, verb, name))
        for url in r.get("nonResourceURLs", []):
            for verb in r.get("verbs", []):
                out.add(("url", url, verb, ""))
    return out


def compare_crd(rendered):
    want = {d["metadata"]["name"]: d for f in yaml_files(os.path.join(ROOT, "manifests", "crd"))
            for d in load_docs(os.path.join(ROOT, "manifests", "crd", f))}
    got = {d["metadata"]["name"]: d for d in by_kind(rendered, "CustomResourceDefinition")}
    if set(want) != set(got):
        fail(f"chart CRDs {sorted(got)} != manifests/crd {sorted(want)}")
        return
    for name, w in want.items():
        g = json.loads(json.dumps(got[name]))
        meta = g["metadata"]
        extra = {k: v for k, v in (meta.pop("annotations", None) or {}).items()
                 if k != "helm.sh/resource-policy"}
        if extra:
            fail(f"chart CRD {name}: unexpected annotations {extra}")
        labels = meta.pop("labels", {}) or {}
        for k, v in (w["metadata"].get("labels") or {}).items():
            if labels.get(k) != v:
                fail(f"chart CRD {name}: label {k}={labels.get(k)!r}, manifests/crd has {v!r}")
        w2 = json.loads(json.dumps(w))
        w2["metadata"].pop("labels", None)
        if g != w2:
            fail(f"chart CRD {name}: body differs from manifests/crd/ (the chart's "
                 "files/crds/ copy is stale or the template changes it)")
        else:
            ok(f"chart CRD {name} equals manifests/crd (plus keep annotation and chart labels)")


def compare_rbac(rendered):
    docs = [d for f in yaml_files(os.path.join(ROOT, "manifests", "rbac"))
            for d in load_docs(os.path.join(ROOT, "manifests", "rbac", f))]
    if not docs:
        print("note: manifests/rbac/ has no YAML yet; RBAC rules not compared")
        return
    for kind in ("ClusterRole", "Role"):
        want = set().union(*[normalize_rules(d.get("rules")) for d in by_kind(docs, kind)])
        got = set().union(*[normalize_rules(d.get("rules")) for d in by_kind(rendered, kind)])
        if want != got:
            fail(f"chart {kind} rules differ from manifests/rbac: only in chart "
                 f"{sorted(got - want)}, only in manifests {sorted(want - got)}")
        else:
            ok(f"chart {kind} rules equal manifests/rbac ({len(want)} grants)")


def compare_controller(rendered):
    """The chart's controller pod (default values, release `tessera`) is the kustomize one."""
    plain = load_docs(os.path.join(ROOT, "manifests", "controller", "deployment.yaml"))
    want = by_kind(plain, "Deployment")[0]
    got = by_kind(rendered, "Deployment")[0]
    chart_only = ("helm.sh/chart", "app.kubernetes.io/managed-by")

    def pod(d):
        spec = json.loads(json.dumps(d["spec"]))
        for labels in (spec["template"]["metadata"].get("labels", {}),):
            for k in chart_only:
                labels.pop(k, None)
        return spec

    if pod(want) != pod(got):
        w, g = pod(want), pod(got)
        diffs = [k for k in set(w) | set(g) if w.get(k) != g.get(k)]
        wc, gc = w["template"]["spec"], g["template"]["spec"]
        inner = [k for k in set(wc) | set(gc) if wc.get(k) != gc.get(k)]
        fail(f"manifests/controller/deployment.yaml differs from the chart's Deployment in "
             f"spec.{diffs} (pod spec keys {inner})")
    else:
        ok("manifests/controller/deployment.yaml equals the chart's Deployment spec")
    for kind, path in (("Service", "service.yaml"), ("ServiceAccount", "serviceaccount.yaml")):
        w = by_kind(load_docs(os.path.join(ROOT, "manifests", "controller", path)), kind)[0]
        g = by_kind(rendered, kind)[0]
        if w["metadata"]["name"] != g["metadata"]["name"] or w.get("spec") != g.get("spec"):
            fail(f"manifests/controller/{path} differs from the chart's {kind}")
        else:
            ok(f"manifests/controller/{path} equals the chart's {kind}")


def rendered(path):
    docs = load_docs(path)
    compare_crd(docs)
    compare_rbac(docs)
    compare_controller(docs)


# ---- restricted pod security --------------------------------------------------------------

def restricted(path):
    docs = load_docs(path)
    pods = [(d["metadata"]["name"], d["spec"]["template"]["spec"])
            for d in docs if d.get("kind") in ("Deployment", "StatefulSet", "DaemonSet", "Job")]
    if not pods:
        fail("no pod templates rendered")
    for name, spec in pods:
        psc = spec.get("securityContext", {})
        for c in spec.get("containers", []) + spec.get("initContainers", []):
            sc = c.get("securityContext", {})
            where = f"{name}/{c['name']}"
            checks = {
                "runAsNonRoot": sc.get("runAsNonRoot", psc.get("runAsNonRoot")) is True,
                "allowPrivilegeEscalation=false": sc.get("allowPrivilegeEscalation") is False,
                "readOnlyRootFilesystem": sc.get("readOnlyRootFilesystem") is True,
                "capabilities drop ALL": "ALL" in sc.get("capabilities", {}).get("drop", []),
                "no added capabilities": not sc.get("capabilities", {}).get("add"),
                "seccomp RuntimeDefault": (sc.get("seccompProfile") or psc.get("seccompProfile")
                                           or {}).get("type") == "RuntimeDefault",
                "not privileged": not sc.get("privileged", False),
                "liveness probe": "livenessProbe" in c,
                "readiness probe": "readinessProbe" in c,
                "resources": bool(c.get("resources", {}).get("requests")),
            }
            bad = [k for k, v in checks.items() if not v]
            if bad:
                fail(f"{where}: not {', '.join(bad)}")
            else:
                ok(f"{where}: restricted security context, probes, resources")
        for volume in spec.get("volumes", []):
            if "hostPath" in volume:
                fail(f"{name}: hostPath volume {volume['name']}")


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "static":
        static()
    elif cmd == "chart-flags" and len(args) == 1:
        chart_flags(args[0])
    elif cmd == "rendered" and len(args) == 1:
        rendered(args[0])
    elif cmd == "restricted" and len(args) == 1:
        restricted(args[0])
    else:
        print(__doc__)
        return 2
    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
