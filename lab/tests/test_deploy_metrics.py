"""The Grafana dashboard (deploy/grafana/shortfirst.json) and the Prometheus alerting rules
(deploy/prometheus/shortfirst.rules.yml) against what the binaries export.

Real processes from the release build on 127.0.0.1: `serve` with each packaged
configuration (deploy/etc/serve.toml: the user scheduler; serve-bands.toml: the kernel's
bands, here without SO_PRIORITY so it runs unprivileged) and the gatekeeper with its
packaged configuration in front of the first server, each with only the addresses
overridden; a few requests through each. Every metric a query names must appear in their
/metrics, with the labels it matches on; the rules and every dashboard query must pass
``promtool check rules``.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import urllib.request
from pathlib import Path

import pytest
from conftest import BIN

from shortfirst_lab import kit

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "deploy" / "grafana" / "shortfirst.json"
RULES = REPO / "deploy" / "prometheus" / "shortfirst.rules.yml"
ETC = REPO / "deploy" / "etc"
#: Series Prometheus makes itself (not in any /metrics) and the labels it adds to every one.
SYNTHETIC_METRICS = {"up"}
TARGET_LABELS = {"instance", "job"}
#: A metric name of ours in a PromQL expression, and its optional selector.
METRIC = re.compile(r"(?<![\w:$])((?:shortfirst|gatekeeper)_[a-z0-9_]+|up)\b\s*(?:\{([^}]*)\})?")
MATCHER = re.compile(r'(\w+)\s*(=~|!~|!=|=)\s*"([^"]*)"')
#: Grafana's variables in the dashboard's queries, as Prometheus would see them.
GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$instance": ".*", "$gatekeeper": ".*"}


def dashboard_queries() -> list[str]:
    dash = json.loads(DASHBOARD.read_text())
    queries = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    queries += [v["definition"] for v in dash["templating"]["list"] if v["type"] == "query"]
    out = []
    for q in queries:
        for var, value in GRAFANA_VARIABLES.items():
            q = q.replace(var, value)
        assert "$" not in q, f"a Grafana variable the test does not know: {q}"
        out.append(q)
    return out


def rule_queries() -> list[str]:
    """Each rule's `expr`: one line, or a `|` block of the lines indented below it. (No
    YAML library in the lab; promtool's count of rules checks that none is missed.)"""
    lines = RULES.read_text().splitlines()
    out = []
    for i, line in enumerate(lines):
        m = re.match(r"^(\s*)expr:\s*(.*)$", line)
        if not m:
            continue
        if m.group(2) != "|":
            out.append(m.group(2))
            continue
        indent, block = len(m.group(1)), []
        for following in lines[i + 1 :]:
            if following.strip() and len(following) - len(following.lstrip()) <= indent:
                break
            block.append(following.strip())
        out.append(" ".join(b for b in block if b))
    return out


def used_metrics(query: str) -> list[tuple[str, list[tuple[str, str, str]]]]:
    """(metric, [(label, op, value)]) for every metric of ours the query names."""
    return [(m.group(1), MATCHER.findall(m.group(2) or "")) for m in METRIC.finditer(query)]


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> dict[str, dict[str, set[str]]]:
    """metric name → label → values seen, over the /metrics of both servers and the
    gatekeeper after a few requests through each."""
    if not BIN.exists():
        pytest.fail(f"{BIN} is missing: `make build` builds it")
    root = tmp_path_factory.mktemp("docroot")
    (root / "small.html").write_bytes(b"x" * 500)
    (root / "large.bin").write_bytes(bytes(200_000))
    ports = {
        name: kit.free_port() for name in ("user", "user_admin", "bands", "bands_admin", "gk", "gk_admin")
    }
    children = []
    logs = tmp_path_factory.mktemp("logs")

    def start(argv: list[str], admin_port: int) -> None:
        with open(logs / f"{len(children)}.log", "wb") as log:
            proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=log)
        children.append(proc)
        kit.wait_http(f"http://127.0.0.1:{admin_port}/metrics", proc, timeout_s=15)

    def serve(conf: str, port: int, admin: int, *extra: str) -> None:
        argv = [str(BIN), "serve", "--config", str(ETC / conf), "--root", str(root)]
        argv += [
            "--listen",
            f"127.0.0.1:{port}",
            "--admin",
            f"127.0.0.1:{admin}",
            "--access-log",
            "-",
            *extra,
        ]
        start(argv, admin)

    try:
        serve("serve.toml", ports["user"], ports["user_admin"])
        serve("serve-bands.toml", ports["bands"], ports["bands_admin"], "--socket-priority=false")
        gatekeeper = [str(BIN), "gatekeeper", "--config", str(ETC / "gatekeeper.toml")]
        gatekeeper += ["--listen", f"127.0.0.1:{ports['gk']}", "--admin", f"127.0.0.1:{ports['gk_admin']}"]
        gatekeeper += ["--upstream", f"http://127.0.0.1:{ports['user']}"]
        # A patience given, so that its per-type gauge (absent while learned and unknown) is exported.
        gatekeeper += ["--patience", "20s"]
        start(gatekeeper, ports["gk_admin"])
        for port in (ports["user"], ports["bands"], ports["gk"]):
            for path in ("/small.html", "/large.bin", "/small.html", "/missing"):
                try:
                    urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10).read()
                except urllib.error.HTTPError as e:
                    assert e.code == 404, f"{port}{path}: {e.code}"
        seen: dict[str, dict[str, set[str]]] = {}
        for admin in ("user_admin", "bands_admin", "gk_admin"):
            for sample in kit.parse_prometheus(kit.fetch_text(f"http://127.0.0.1:{ports[admin]}/metrics")):
                labels = seen.setdefault(sample.name, {})
                for k, v in sample.labels.items():
                    labels.setdefault(k, set()).add(v)
        return seen
    finally:
        for proc in children:
            proc.terminate()
        for i, proc in enumerate(children):
            if proc.wait(timeout=20) != 0:
                tail = (logs / f"{i}.log").read_text(errors="replace")[-2000:]
                pytest.fail(f"{proc.args[:2]} exited with {proc.returncode}; its log ends:\n{tail}")


@pytest.mark.parametrize("source", ["dashboard", "rules"])
def test_every_metric_and_label_used_is_exported(exported, source):
    queries = dashboard_queries() if source == "dashboard" else rule_queries()
    assert queries
    problems = []
    for query in queries:
        used = used_metrics(query)
        if not used:
            problems.append(f"names no metric: {query}")
        for metric, matchers in used:
            if metric in SYNTHETIC_METRICS:
                continue
            if metric not in exported:
                problems.append(f"{metric}: not exported ({query})")
                continue
            labels = exported[metric]
            for label, op, value in matchers:
                if label in TARGET_LABELS:
                    continue
                if label not in labels:
                    problems.append(f"{metric}: no label {label} ({query})")
                elif op == "=" and value not in labels[label]:
                    problems.append(f"{metric}: {label} never {value!r}, seen {sorted(labels[label])}")
                elif op == "=~" and re.fullmatch(r"[\w|]+", value):
                    problems += [
                        f"{metric}: {label} never {v!r}, seen {sorted(labels[label])}"
                        for v in value.split("|")
                        if v not in labels[label]
                    ]
    assert not problems, "\n".join(problems)


def test_rules_and_dashboard_queries_pass_promtool(tmp_path):
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool is not installed: `make apt` installs it (Debian's prometheus, mk/deb.mk)")
    done = subprocess.run([promtool, "check", "rules", str(RULES)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(rule_queries())} rules found" in done.stdout, done.stdout
    # The dashboard's queries as recording rules: promtool parses each one.
    queries = [q for q in dashboard_queries() if not q.startswith("label_values(")]
    # A JSON string is a YAML double-quoted scalar.
    records = [
        f"      - record: dashboard:query_{i}\n        expr: {json.dumps(q)}" for i, q in enumerate(queries)
    ]
    path = tmp_path / "dashboard.rules.yml"
    path.write_text("groups:\n  - name: dashboard\n    rules:\n" + "\n".join(records) + "\n")
    done = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(records)} rules found" in done.stdout, done.stdout


def test_dashboard_structure():
    dash = json.loads(DASHBOARD.read_text())
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids)), "panel ids repeat"
    variables = {v["name"] for v in dash["templating"]["list"]}
    assert {"datasource", "instance", "gatekeeper"} <= variables
    for panel in dash["panels"]:
        assert {"h", "w", "x", "y"} <= panel["gridPos"].keys(), panel["title"]
        assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24, panel["title"]
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        refs = [t["refId"] for t in panel["targets"]]
        assert refs and len(refs) == len(set(refs)), panel["title"]
    titles = " ".join(p["title"] for p in dash["panels"]).lower()
    for topic in ("per band", "pacer lateness", "capacity", "cost per type", "queue wait"):
        assert topic in titles, f"no panel on {topic}"
