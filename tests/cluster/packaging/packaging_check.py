#!/usr/bin/env python3
"""Checks of Tessera's packaging that need no cluster: the chart's copies of manifests/,
the Grafana dashboards, the Dockerfile, and comparisons of rendered chart output with the
plain manifests. Each subcommand prints one `ok:` line per check, or `FAIL:` lines and exits 1.

  packaging_check.py static                      chart copies, RBAC against the docs,
                                                 dashboards (metrics, labels), PodMonitor,
                                                 Dockerfile, values schema, README
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
  packaging_check.py wiring RENDERED_YAML        the objects of a rendering reach the
                                                 controller: Service and ServiceMonitor its
                                                 /metrics, probes its health port, bindings
                                                 its ServiceAccount; env, rollout strategy

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
    labels = metric_labels()
    titles, uids = set(), {}
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
        elif board["uid"] in uids:
            fail(f"dashboards/{name}: uid {board['uid']!r} is also {uids[board['uid']]}'s "
                 "(Grafana keeps one of the two)")
        uids[board.get("uid")] = name
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
        check_dashboard_labels(name, board, known, labels)
    for want in ("Tessera / Jobs", "Tessera / Training"):
        if want not in titles:
            fail(f"no dashboard titled {want!r}")


# ---- dashboard labels ---------------------------------------------------------------------

# The labels Prometheus puts on every series it scrapes through the Prometheus Operator
# (ServiceMonitor, PodMonitor) besides the metric's own; `service` only through a Service.
OPERATOR_LABELS = {"job", "instance", "namespace", "pod", "container", "endpoint"}
# The docs/metrics.md table of each dashboard's metrics: the controller's, scraped through the
# chart's ServiceMonitor; the training ranks', through its PodMonitor or in local mode.
DASHBOARD_SOURCES = {"Tessera / Jobs": "Controller", "Tessera / Training": "Training"}
SELECTOR = re.compile(r"\b(tessera_[a-z0-9_]+)\s*\{([^}]*)\}")
MATCHER = re.compile(r'(\w+)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"')
GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
LABEL_VALUES = re.compile(
    r"^\s*label_values\(\s*(tessera_[a-z0-9_]+)\s*(?:\{[^}]*\})?\s*,\s*(\w+)\s*\)\s*$")
# An aggregation without `by` straight over histogram buckets: it drops `le`.
BUCKETS_WITHOUT_BY = re.compile(
    r"\b(?:sum|avg|max|min|count)\s*\(\s*(?:rate|increase|irate)\(\s*tessera_\w+_bucket")


def metric_labels():
    """{metric: {label: allowed values, or None when any}} from the tables of docs/metrics.md.
    A label cell is `—`, names (`op`, `dim`; a parenthesis comments on the name before it),
    or one name and its values (`result`: `success`, `error`). tessera_jobs's `phase` takes
    the TrainingJob phases: the status.phase enum of manifests/crd/."""
    labels = {}
    for line in open(METRICS_DOC):
        cells = line.split("|")
        m = TABLE_ROW_METRIC.match(line)
        if not m or len(cells) < 4:
            continue
        cell = re.sub(r"\([^)]*\)", "", cells[3])
        name, colon, values = cell.partition(":")
        if colon:
            labels[m.group(1)] = {name.strip(" `"): set(re.findall(r"`(\w+)`", values))}
        else:
            labels[m.group(1)] = {n: None for n in re.findall(r"`(\w+)`", cell)}
    crd = load_docs(os.path.join(ROOT, "manifests", "crd", "trainingjobs.tessera.dev.yaml"))[0]
    status = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    if "phase" in labels.get("tessera_jobs", {}):
        labels["tessera_jobs"]["phase"] = set(status["properties"]["phase"]["enum"])
    return labels


def worker_target_labels():
    """The labels a worker's series carry besides the metric's own, in the cluster (the
    chart's PodMonitor: the Operator's labels plus its relabelings' targets) and in local
    mode (docs/local-mode.md's scrape configuration: its static labels, job and instance).
    A dashboard may use only those both give."""
    podmonitor = open(os.path.join(CHART, "templates", "podmonitor.yaml")).read()
    cluster = OPERATOR_LABELS | set(re.findall(r"targetLabel:\s*(\w+)", podmonitor))
    doc = open(os.path.join(ROOT, "docs", "local-mode.md")).read()
    blocks = [b for b in re.findall(r"```yaml\n(.*?)```", doc, re.S) if "scrape_configs:" in b]
    local = {"job", "instance"}
    for block in blocks:
        for config in yaml.safe_load(block).get("scrape_configs", []):
            for static in config.get("static_configs", []):
                local |= set(static.get("labels", {}))
    return cluster & local


def check_dashboard_labels(name, board, known, labels):
    """Every label a query of the dashboard names (matchers, grouping, legends, variables)
    exists on the series it reads, and every value an equality matcher compares a listed
    label with is one of its values."""
    source = DASHBOARD_SOURCES.get(board.get("title"))
    if source is None:
        return
    targets = worker_target_labels() if source == "Training" else OPERATOR_LABELS | {"service"}
    where = f"dashboards/{name}"
    bad = []

    def labels_of(metric):
        base = base_name(metric, known)
        own = set(labels.get(base, {})) if base else set()
        return own | targets | ({"le"} if metric.endswith("_bucket") else set())

    variables = {}
    for v in board.get("templating", {}).get("list", []):
        if v.get("type") != "query":
            continue
        query = v.get("query")
        query = query.get("query", "") if isinstance(query, dict) else query or ""
        m = LABEL_VALUES.match(query)
        if not m:
            bad.append(f"variable ${v.get('name')}: query {query!r} is not "
                       "label_values(tessera_..., label)")
            continue
        metric, label = m.groups()
        if base_name(metric, known) is None:
            bad.append(f"variable ${v.get('name')}: {metric} is in no table of docs/metrics.md")
        elif label not in labels_of(metric):
            bad.append(f"variable ${v.get('name')}: {metric} has no label {label}")
        if v.get("definition", query) != query:
            bad.append(f"variable ${v.get('name')}: definition {v.get('definition')!r} is not "
                       f"its query {query!r}")
        variables[v.get("name")] = label
    for panel in dashboard_panels(board):
        for t in panel.get("targets") or []:
            expr, title = t.get("expr", ""), panel.get("title")
            metrics = set(METRIC_TOKEN.findall(expr))
            available = set().union(*[labels_of(m) for m in metrics]) if metrics else set()
            for metric, matchers in SELECTOR.findall(expr):
                for label, op, value in MATCHER.findall(matchers):
                    if label not in labels_of(metric):
                        bad.append(f"panel {title!r}: {metric} has no label {label}")
                        continue
                    for var in re.findall(r"\$\{?(\w+)", value):
                        if var in variables and variables[var] != label:
                            bad.append(f"panel {title!r}: {label}{op}\"{value}\" compares "
                                       f"{label} with ${var}, the values of label "
                                       f"{variables[var]}")
                    allowed = labels.get(base_name(metric, known) or "", {}).get(label)
                    if op in ("=", "!=") and allowed and value not in allowed:
                        bad.append(f"panel {title!r}: {label}=\"{value}\": {metric}'s {label} "
                                   f"is one of {sorted(allowed)}")
            grouped, quantile = set(), "histogram_quantile" in expr
            for word, names in GROUPING.findall(expr):
                names = [n.strip() for n in names.split(",") if n.strip()]
                for label in names:
                    if label not in available:
                        bad.append(f"panel {title!r}: {word} ({label}): no series of "
                                   f"{sorted(metrics)} has label {label}")
                if word == "by":
                    grouped |= set(names)
                drops_le = (word == "by" and "le" not in names) or (
                    word == "without" and "le" in names)
                if quantile and drops_le:
                    bad.append(f"panel {title!r}: histogram_quantile over buckets aggregated "
                               f"{word} ({', '.join(names)}): le is lost")
            if quantile and BUCKETS_WITHOUT_BY.search(expr):
                bad.append(f"panel {title!r}: histogram_quantile over buckets aggregated "
                           "without `by (..., le)`: le is lost")
            for label in re.findall(r"\{\{\s*(\w+)\s*\}\}", t.get("legendFormat", "")):
                if label not in (grouped or available):
                    bad.append(f"panel {title!r}: legend {{{{{label}}}}}: the query's series "
                               f"have no label {label}")
    for message in bad:
        fail(f"{where}: {message}")
    if not bad:
        ok(f"{where}: every label and label value its queries and variables use exists "
           f"({source} metrics; target labels {', '.join(sorted(targets))})")


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


def check_images():
    """Each runtime stage holds, and starts, its own binary: the build stage compiles every
    binary it stages; the stage copies /out/<stage>/ (what `stage <stage> ...` filled); its
    ENTRYPOINT is the binary its image title names, staged for it; the worker's
    TESSERA_WORKER_BINARY is a binary of its image; the controller EXPOSEs the chart's
    default metrics and health ports."""
    text = open(os.path.join(ROOT, "Dockerfile")).read().replace("\\\n", " ")
    built = set()
    for targets in re.findall(r"cmake --build \S+ --target((?:[ \t]+[\w-]+)+)", text):
        built |= set(targets.split())
    staged = {image: bins.split() for image, bins in
              re.findall(r"\bstage[ \t]+(\w+)((?:[ \t]+[\w-]+)+)[ \t]*;", text)}
    for image, bins in sorted(staged.items()):
        for b in bins:
            if b not in built:
                fail(f"Dockerfile: stage {image} stages {b}, which cmake --build does not build "
                     f"(targets {sorted(built)})")
    sections = re.split(r"^FROM\s+", text, flags=re.M)[1:]
    values = yaml.safe_load(open(os.path.join(CHART, "values.yaml")))["controller"]
    checked = []
    for section in sections:
        m = re.match(r"\S+\s+AS\s+(\S+)", section, re.I)
        stage = m.group(1) if m else None
        if stage not in ("controller", "worker"):
            continue
        bins = staged.get(stage)
        if not bins:
            fail(f"Dockerfile: the build stage stages nothing for {stage} (`stage {stage} ...`)")
            continue
        for src in re.findall(r"^COPY\s+--from=\S+\s+(\S+)", section, re.M):
            if not src.startswith(f"/out/{stage}/"):
                fail(f"Dockerfile: stage {stage} copies {src}, another image's files "
                     f"(its own are /out/{stage}/)")
        title = re.search(r'org\.opencontainers\.image\.title="([^"]+)"', section)
        entry = re.search(r'^ENTRYPOINT\s+\["([^"]+)"', section, re.M)
        if not entry:
            fail(f"Dockerfile: stage {stage} has no ENTRYPOINT [\"...\"]")
            continue
        binary = os.path.basename(entry.group(1))
        if not title or title.group(1) != binary:
            fail(f"Dockerfile: stage {stage} starts {entry.group(1)}, but its image title is "
                 f"{title.group(1) if title else 'unset'}")
        if entry.group(1) != f"/usr/local/bin/{binary}" or binary not in bins:
            fail(f"Dockerfile: stage {stage}'s ENTRYPOINT {entry.group(1)} is not one of the "
                 f"binaries staged for it in /usr/local/bin ({', '.join(bins)})")
        for path in re.findall(r"TESSERA_WORKER_BINARY=(\S+)", section):
            if path not in [f"/usr/local/bin/{b}" for b in bins]:
                fail(f"Dockerfile: stage {stage} sets TESSERA_WORKER_BINARY={path}, not a binary "
                     "of its image")
        if stage == "controller":
            ports = set(" ".join(re.findall(r"^EXPOSE\s+(.*)$", section, re.M)).split())
            want = {str(values["metricsPort"]), str(values["healthPort"])}
            if ports != want:
                fail(f"Dockerfile: the controller EXPOSEs {sorted(ports)}, the chart's ports "
                     f"(controller.metricsPort, healthPort) are {sorted(want)}")
        checked.append(f"{stage}: {binary}")
    ok(f"Dockerfile: each image starts its own staged, built binary ({'; '.join(checked)})")


# ---- RBAC, values schema, PodMonitor ------------------------------------------------------

def rbac_grants(directory):
    """{(kind, group, resource, verb)} of the Roles and ClusterRoles of a directory."""
    grants = set()
    for f in yaml_files(directory):
        for d in load_docs(os.path.join(directory, f)):
            if d.get("kind") in ("Role", "ClusterRole"):
                grants |= {(d["kind"], g, r, v)
                           for g, r, v, _ in normalize_rules(d.get("rules"))}
    return grants


def check_rbac_doc():
    """manifests/rbac/ grants exactly the verbs docs/controller.md's Permissions table says the
    controller uses: a rule dropped (the controller then fails at run time, perhaps only on
    a path no test takes) or one added (more privilege) is a difference."""
    section = re.search(r"^## Permissions\n(.*?)^## ", open(
        os.path.join(ROOT, "docs", "controller.md")).read(), re.S | re.M)
    # A row that names no API group: the core group, or the CRD's for its resources.
    crd_groups = {d["spec"]["names"]["plural"]: d["spec"]["group"]
                  for f in yaml_files(os.path.join(ROOT, "manifests", "crd"))
                  for d in load_docs(os.path.join(ROOT, "manifests", "crd", f))}
    documented = set()
    for line in (section.group(1).splitlines() if section else []):
        cells = [c.strip() for c in line.split("|")[1:-1]]
        if len(cells) < 2 or not cells[0].startswith("`"):
            continue
        names = re.findall(r"`([^`]+)`", cells[0])
        groups = [n for n in names if "." in n]
        kind = "Role" if "(Role" in cells[0] else "ClusterRole"
        for resource in (n for n in names if "." not in n):
            for group in groups or [crd_groups.get(resource.partition("/")[0], "")]:
                for verb in (v.strip() for v in cells[1].split(",")):
                    documented.add((kind, group, resource, verb))
    if not documented:
        fail("docs/controller.md: no '## Permissions' table of resources and verbs")
        return
    granted = rbac_grants(os.path.join(ROOT, "manifests", "rbac"))

    def show(grants):
        return ", ".join(f"{k} {g or 'core'}/{r} {v}" for k, g, r, v in sorted(grants))

    if granted - documented:
        fail(f"manifests/rbac/ grants what docs/controller.md's Permissions table does not "
             f"list: {show(granted - documented)}")
    if documented - granted:
        fail(f"manifests/rbac/ lacks what docs/controller.md's Permissions table says the "
             f"controller uses: {show(documented - granted)}")
    if granted == documented:
        ok(f"manifests/rbac/ grants the {len(granted)} verbs of docs/controller.md's "
           "Permissions table")


def check_schema_closed():
    """Every object of values.schema.json with named properties refuses other keys, so that a
    misspelt value (metrics.serviceMonitor.enable) fails the install instead of being
    ignored."""
    def walk(prop, path):
        """The number of objects with named properties at and under `prop`."""
        if not prop.get("properties"):
            return 0
        if prop.get("additionalProperties") is not False:
            fail(f"values.schema.json {path or '(top)'}: additionalProperties is not false; "
                 "a misspelt key under it would be ignored")
        return 1 + sum(walk(sub, f"{path}.{key}" if path else key)
                       for key, sub in prop["properties"].items())

    objects = walk(json.load(open(os.path.join(CHART, "values.schema.json"))), "")
    ok(f"values.schema.json: {objects} objects with named properties refuse other keys")


def check_podmonitor():
    """The chart's PodMonitor (a template, read as text) selects worker pods by a label the
    controller sets (api/contract.h), scrapes the container port the controller names
    (controller/reconcile/objects.cpp) and relabels from labels worker pods carry."""
    text = open(os.path.join(CHART, "templates", "podmonitor.yaml")).read()
    pod_labels = set(re.findall(r'\bkLabel\w+\[\] = "([^"]+)"',
                                open(os.path.join(ROOT, "api", "contract.h")).read()))
    objects = open(os.path.join(ROOT, "controller", "reconcile", "objects.cpp")).read()
    found = re.search(r'AddPort\(\w+, "([^"]+)", job\.spec\.metrics\.port\)', objects)
    port = found.group(1) if found else "(none: objects.cpp adds no port of spec.metrics.port)"
    meta = {"__meta_kubernetes_pod_label_" + re.sub(r"[^A-Za-z0-9_]", "_", label)
            for label in pod_labels}
    keys = re.findall(r"-\s*key:\s*(\S+)", text) + re.findall(
        r"matchLabels:\s*\n\s+(\S+):", text)
    bad = [f"selects by {k}, not a label of worker pods ({sorted(pod_labels)})"
           for k in keys if k not in pod_labels]
    if not keys:
        bad.append("selects pods by no tessera.dev label")
    for p in re.findall(r"-\s*port:\s*(\S+)", text):
        if p != port:
            bad.append(f"scrapes port {p}; the worker's metrics port is named {port}")
    for source in re.findall(r"sourceLabels:\s*\[([^\]]*)\]", text):
        for s in (x.strip() for x in source.split(",")):
            if s.startswith("__meta_kubernetes_pod_label_") and s not in meta:
                bad.append(f"relabels from {s}, a label worker pods do not carry "
                           f"({sorted(meta)})")
    for message in bad:
        fail(f"charts/tessera/templates/podmonitor.yaml: {message}")
    if not bad:
        ok(f"podmonitor.yaml: selects {keys}, scrapes port {port}, relabels from worker pod "
           "labels")


# ---- chart README -------------------------------------------------------------------------

def value_keys(values, prefix=""):
    for key, value in values.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value and key not in (
                "resources", "namespaceSelector", "podAnnotations", "podLabels"):
            yield from value_keys(value, path + ".")
        else:
            yield path


def value_at(values, key):
    for part in key.split("."):
        values = values[part]
    return values


def check_readme():
    values = yaml.safe_load(open(os.path.join(CHART, "values.yaml")))
    readme = open(os.path.join(CHART, "README.md")).read()
    rows = dict(re.findall(r"^\| `([^`]+)` \| ([^|]*) \|", readme, re.M))
    documented = set(rows)
    keys = set(value_keys(values))
    for key in sorted(keys - documented):
        fail(f"charts/tessera/README.md: value {key} is not in the values table")
    for key in sorted(documented - keys):
        fail(f"charts/tessera/README.md: the values table lists {key}, which values.yaml lacks")
    ok(f"charts/tessera/README.md documents all {len(keys)} values")
    # A default given as one literal (`4`, `""`, `{any: true}`) is values.yaml's.
    compared = 0
    for key in sorted(keys & documented):
        literal = re.fullmatch(r"`([^`]*)`", rows[key].strip())
        if not literal:
            continue
        compared += 1
        if yaml.safe_load(literal.group(1)) != value_at(values, key):
            fail(f"charts/tessera/README.md: the default of {key} is {literal.group(1)}, "
                 f"values.yaml has {json.dumps(value_at(values, key))}")
    ok(f"charts/tessera/README.md: {compared} defaults equal values.yaml's")


def static():
    check_copy(os.path.join(ROOT, "manifests", "crd"), os.path.join(CHART, "files", "crds"),
               "CRD")
    rbac = os.path.join(ROOT, "manifests", "rbac")
    if yaml_files(rbac):
        check_copy(rbac, os.path.join(CHART, "files", "rbac"), "RBAC")
    else:
        print("note: manifests/rbac/ has no YAML yet; the chart's files/rbac/ is not compared")
    check_rbac_doc()
    check_dashboards()
    check_podmonitor()
    check_dockerfile()
    check_images()
    check_schema_closed()
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


# ---- wiring of the rendered objects -------------------------------------------------------

def bind_port(args, flag):
    """The port of `flag=HOST:PORT` (or `flag HOST:PORT`) among a container's args."""
    for i, a in enumerate(args):
        value = a[len(flag) + 1:] if a.startswith(flag + "=") else (
            args[i + 1] if a == flag and i + 1 < len(args) else None)
        if value is not None:
            return int(value.rpartition(":")[2])
    return None


def container_port(container, port):
    """The containerPort a Service targetPort or probe port (a name or a number) reaches."""
    for p in container.get("ports", []):
        if port in (p.get("name"), p.get("containerPort")):
            return p.get("containerPort")
    return None


def selects(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def wire_pod(what, dep, c):
    """The controller container's ports and probes reach what its flags serve; its env tells
    it its namespace and name; a rollout stops the old pod first. (metrics, health) ports."""
    args = c.get("args", [])
    metrics_port = bind_port(args, "--metrics-bind-address")
    health_port = bind_port(args, "--health-probe-bind-address")
    named = {p.get("name"): p.get("containerPort") for p in c.get("ports", [])}
    if named.get("metrics") != metrics_port:
        fail(f"{what}: container port `metrics` is {named.get('metrics')}, "
             f"--metrics-bind-address serves {metrics_port}")
    for probe, path_want in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        get = c.get(probe, {}).get("httpGet", {})
        port = container_port(c, get.get("port"))
        if port != health_port or get.get("path") != path_want:
            fail(f"{what}: {probe} asks {get.get('path')} on port {get.get('port')} "
                 f"({port}); the controller serves {path_want} on "
                 f"--health-probe-bind-address's {health_port}")
    env = {e["name"]: e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
           for e in c.get("env", [])}
    for var, field in (("POD_NAMESPACE", "metadata.namespace"), ("POD_NAME", "metadata.name")):
        if env.get(var) != field:
            fail(f"{what}: env {var} comes from {env.get(var)}, want the pod's {field} "
                 "(the Lease's namespace, the replica's identity)")
    strategy = dep["spec"].get("strategy", {})
    if strategy.get("type") != "Recreate" and strategy.get("rollingUpdate", {}).get(
            "maxSurge") not in (0, "0", "0%"):
        fail(f"{what}: the Deployment's strategy {strategy} starts a new controller before "
             "the old one stops (want maxSurge: 0)")
    return metrics_port, health_port


def wire_metrics(what, docs, pod_labels, c, metrics_port):
    """The metrics Services select the controller pod and target its /metrics port; each
    ServiceMonitor selects one of them and scrapes its port at /metrics. The Services."""
    services = [s for s in by_kind(docs, "Service")
                if any(p.get("name") == "metrics" for p in s["spec"].get("ports", []))]
    for svc in services:
        name = svc["metadata"]["name"]
        if not selects(svc["spec"].get("selector"), pod_labels):
            fail(f"{what}: Service {name} selects {svc['spec'].get('selector')}, not the "
                 f"controller pod's labels {pod_labels}")
        for p in svc["spec"]["ports"]:
            if p.get("name") == "metrics" and container_port(c, p.get("targetPort")) != \
                    metrics_port:
                fail(f"{what}: Service {name} port metrics targets {p.get('targetPort')}, not "
                     f"the controller's /metrics port {metrics_port}")
    for sm in by_kind(docs, "ServiceMonitor"):
        name = sm["metadata"]["name"]
        match = sm["spec"].get("selector", {}).get("matchLabels")
        nss = sm["spec"].get("namespaceSelector", {})
        found = [s for s in services if selects(match, s["metadata"].get("labels", {}))
                 and (nss.get("any") or s["metadata"].get("namespace") in nss.get(
                     "matchNames", [sm["metadata"].get("namespace")]))]
        if not found:
            fail(f"{what}: ServiceMonitor {name} (selector {match}, namespaces {nss}) selects "
                 "no metrics Service of the controller")
            continue
        ports = {p.get("name") for p in found[0]["spec"]["ports"]}
        for e in sm["spec"].get("endpoints", []):
            if e.get("port") not in ports or e.get("path", "/metrics") != "/metrics":
                fail(f"{what}: ServiceMonitor {name} scrapes port {e.get('port')} path "
                     f"{e.get('path')}; the Service has ports {sorted(ports)}, the controller "
                     "serves /metrics")
    return services


def wire_identity(what, docs, dep):
    """The controller runs as the rendered ServiceAccount with its token mounted, and every
    binding grants a rendered role to exactly that ServiceAccount. Its name."""
    ns, spec = dep["metadata"].get("namespace"), dep["spec"]["template"]["spec"]
    accounts = {a["metadata"]["name"]: a for a in by_kind(docs, "ServiceAccount")}
    sa = spec.get("serviceAccountName")
    if accounts and sa not in accounts:
        fail(f"{what}: the controller runs as ServiceAccount {sa}, the rendering creates "
             f"{sorted(accounts)}")
    automount = spec.get("automountServiceAccountToken",
                         accounts.get(sa, {}).get("automountServiceAccountToken", True))
    if automount is not True:
        fail(f"{what}: the controller pod mounts no ServiceAccount token "
             "(automountServiceAccountToken: false): it cannot reach the API server")
    roles = {(d["kind"], d["metadata"]["name"]) for d in docs
             if d.get("kind") in ("Role", "ClusterRole")}
    for b in [d for d in docs if d.get("kind") in ("RoleBinding", "ClusterRoleBinding")]:
        name, ref = b["metadata"]["name"], b["roleRef"]
        if (ref["kind"], ref["name"]) not in roles:
            fail(f"{what}: {b['kind']} {name} grants {ref['kind']} {ref['name']}, which the "
                 "rendering does not hold")
        for s in b.get("subjects", []):
            if s.get("kind") != "ServiceAccount" or s.get("name") != sa or \
                    s.get("namespace") != ns:
                fail(f"{what}: {b['kind']} {name} binds {s.get('kind')} "
                     f"{s.get('namespace')}/{s.get('name')}, not the controller's "
                     f"ServiceAccount {ns}/{sa}")
    return sa


def wire_dashboards(what, docs):
    """Each dashboard ConfigMap holds one dashboard of dashboards/ under its file name
    (Grafana's sidecar writes each key as a file; Grafana loads *.json)."""
    boards = sorted(f for f in os.listdir(os.path.join(CHART, "dashboards"))
                    if f.endswith(".json"))
    for cm in by_kind(docs, "ConfigMap"):
        if cm["metadata"].get("labels", {}).get("app.kubernetes.io/component") != "dashboards":
            continue
        keys = sorted(cm.get("data", {}))
        if len(keys) != 1 or keys[0] not in boards or json.loads(cm["data"][keys[0]]) != \
                json.load(open(os.path.join(CHART, "dashboards", keys[0]))):
            fail(f"{what}: ConfigMap {cm['metadata']['name']} holds {keys}, not one of the "
                 f"dashboards {boards} under its file name")


def wiring(path):
    """The objects of one rendering (the chart's or manifests/) reach each other: the
    metrics Service and the ServiceMonitor find the controller's /metrics, the probes its
    health port, the bindings its ServiceAccount; the pod tells the controller its
    namespace and name; a rollout never runs two controllers at once."""
    docs = load_docs(path)
    what = rel(path) if path.startswith(ROOT) else os.path.basename(path)
    deployments = by_kind(docs, "Deployment")
    if len(deployments) != 1:
        fail(f"{what}: {len(deployments)} Deployments, want the controller's one")
        return
    dep = deployments[0]
    pod = dep["spec"]["template"]
    c = next((c for c in pod["spec"]["containers"] if c["name"] == "controller"), None)
    if c is None:
        fail(f"{what}: the Deployment has no container `controller`")
        return
    metrics_port, health_port = wire_pod(what, dep, c)
    services = wire_metrics(what, docs, pod["metadata"].get("labels", {}), c, metrics_port)
    sa = wire_identity(what, docs, dep)
    wire_dashboards(what, docs)
    ok(f"{what}: ports, probes, env, strategy, {len(services)} metrics Service(s), "
       f"{len(by_kind(docs, 'ServiceMonitor'))} ServiceMonitor(s), the bindings and the "
       f"dashboards reach the controller (metrics :{metrics_port}, health :{health_port}, "
       f"ServiceAccount {sa})")


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
    elif cmd == "wiring" and len(args) == 1:
        wiring(args[0])
    else:
        print(__doc__)
        return 2
    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
