#!/usr/bin/env python3
"""Tests of the oooi Helm chart (charts/oooi) with a real Helm engine.

- Helm 4's engine through PyPI `helm-python-sdk` (`helm_python`): render and
  strict lint, values.schema.json enforced on render.
- Every rendered Kubernetes object is validated offline against the 1.35
  OpenAPI schemas with PyPI `kubernetes-validate` (strict: unknown fields fail).
  The ServiceMonitor, PodMonitor and PrometheusRule, which have no schema
  there, are validated against the prometheus-operator models of PyPI
  `cloudcoil-models-prometheus-operator`; alert and dashboard expressions are
  parsed with PyPI `promql-parser`.
- The controller binary (`$OOOI_CONTROLLER_BIN`, else the cargo debug build)
  is asked for its `run` flags and its RBAC rules, so that the Deployment's
  arguments and the ClusterRole follow the code.

The chart under test is the packaged archive `tools/dev package` writes
(`$OOOI_CHART_ARCHIVE`, target/chart/oooi-<version>.tgz), which carries the
built filter module: what `helm install` gets. `tools/dev test` packages it,
then runs `python3 charts/tests/run.py [-k SUBSTRING]`.
"""

from __future__ import annotations

import base64
import copy
import functools
import hashlib
import json
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import helm_python as helm
import kubernetes_validate
import kubernetes_validate.utils
import yaml

# kubernetes-validate re-reads its 1.5 MB definitions file on every call; the
# files never change during a run, so read each one once.
kubernetes_validate.utils.schema_contents = functools.lru_cache(maxsize=None)(kubernetes_validate.utils.schema_contents)

ROOT = Path(__file__).resolve().parents[2]
# The chart's source folder (values, schema); tests render the archive.
CHART_SRC = ROOT / "charts" / "oooi"
KUBE_VERSION = "1.35.0"
# The workspace version: the images' tag and the packaged chart's version.
APP_VERSION = next(
    line.split('"')[1] for line in (ROOT / "Cargo.toml").read_text().splitlines() if line.startswith("version = ")
)
RELEASE = "oooi"
NAMESPACE = "oooi-system"
WASM_KEY = "oooi_sni_router.wasm"
MAX_WASM_BYTES = 512 * 1024
GROUP = "hostedcluster.densityops.com"
KINDS = {
    "Infra": "infras",
    "InfraClusterAttachment": "infraclusterattachments",
    "DHCPServer": "dhcpservers",
    "DNSServer": "dnsservers",
    "ProxyServer": "proxyservers",
}

# What every install must set: oooi publishes no images, so the chart has no
# registry to default to.
REGISTRY = "registry.example.com/oooi"
REQUIRED = {"images": {"registry": REGISTRY}}

# Every optional feature on, and every value moved off its default.
ALL_FEATURES = {
    "replicaCount": 3,
    "images": {
        "registry": "mirror.example.com:5000/oooi",
        "pullPolicy": "Always",
        "controller": {"digest": "sha256:" + "ab" * 32},
        "dns": {"tag": "0.1.0-rc1"},
        "proxy": {"registry": "docker.io", "repository": "envoyproxy/envoy", "tag": "v1.40.0"},
    },
    "imagePullSecrets": [{"name": "pull-secret"}],
    "controller": {
        "watchNamespace": "hcp-infra",
        "openshiftSCC": True,
        "logFormat": "text",
        "logLevel": "debug,kube=info",
        "httpPort": 9090,
        "healthPort": 9091,
        "extraEnv": [{"name": "EXTRA", "value": "1"}],
    },
    "leaderElection": {"leaseName": "oooi-lease"},
    "podLabels": {"team": "infra"},
    "podAnnotations": {"example.com/note": "x"},
    "priorityClassName": "system-cluster-critical",
    "nodeSelector": {"kubernetes.io/os": "linux"},
    "tolerations": [{"key": "node-role.kubernetes.io/infra", "operator": "Exists", "effect": "NoSchedule"}],
    "affinity": {
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 100,
                    "podAffinityTerm": {
                        "topologyKey": "kubernetes.io/hostname",
                        "labelSelector": {"matchLabels": {"app.kubernetes.io/component": "controller"}},
                    },
                }
            ]
        }
    },
    "topologySpreadConstraints": [
        {
            "maxSkew": 1,
            "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": {"app.kubernetes.io/component": "controller"}},
        }
    ],
    "serviceAccount": {"annotations": {"example.com/sa": "y"}},
    "metrics": {
        "service": {"port": 8443, "annotations": {"example.com/svc": "z"}},
        "serviceMonitor": {"enabled": True, "interval": "15s", "scrapeTimeout": "5s", "labels": {"release": "prom"}},
        "podMonitor": {"enabled": True, "interval": "20s", "labels": {"release": "prom"}},
        "prometheusRule": {"enabled": True, "labels": {"release": "prom"}},
        "dashboard": {"enabled": True, "namespace": "grafana", "labels": {"grafana_dashboard": "oooi"}, "annotations": {"grafana_folder": "oooi"}},
    },
    "networkPolicy": {
        "enabled": True,
        "metricsFrom": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}],
        "egress": {"enabled": True, "apiServerCIDRs": ["10.0.0.1/32", "fd00::1/128"]},
    },
    "filter": {"configMapName": "custom-filter"},
}


# --------------------------------------------------------------------------
# shared by the tests


REVISION_TAG = re.compile(rf"{re.escape(APP_VERSION)}-g[0-9a-f]{{10}}(-dirty)?")


@functools.lru_cache(maxsize=None)
def image_tag():
    """The default tag of every image the packaged chart names: its
    appVersion, which `tools/dev package` sets to the checkout's revision
    tag (the tag `tools/dev images` gives the images of that checkout)."""
    return helm.Chart.load(chart_path()).metadata["appVersion"]


def chart_path():
    """The packaged chart under test."""
    archive = os.environ.get("OOOI_CHART_ARCHIVE")
    assert archive, "OOOI_CHART_ARCHIVE is not set: run `tools/dev test` (or `tools/dev package`, which prints the archive)"
    assert Path(archive).is_file(), f"OOOI_CHART_ARCHIVE={archive} does not exist: run `tools/dev package`"
    return archive


def merged(base, over):
    """`over` laid over `base`, as Helm merges values files."""
    out = copy.deepcopy(base)
    for k, v in over.items():
        out[k] = merged(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else copy.deepcopy(v)
    return out


def chart_file(name):
    """A file of the packaged chart (bytes, read from the archive), or None."""
    with tarfile.open(chart_path()) as tar:
        try:
            member = tar.extractfile(f"oooi/{name}")
        except KeyError:
            return None
        return member.read() if member else None


_RENDERED = {}

# The clusters the chart is rendered for: (Kubernetes version, extra API
# versions). OpenShift 4.16 is Kubernetes 1.29 and serves the SCC API.
OPENSHIFT_4_16 = ("v1.29.0", ("security.openshift.io/v1",))
KUBERNETES_1_29 = ("v1.29.0", ())
KUBERNETES_1_31 = ("v1.31.0", ())


def render(values=None, *, upgrade=False, required=True, cluster=None):
    """Render the chart with `values` over the values every install sets
    (`required=False`: `values` alone) for `cluster` (one of the tuples
    above; default: Helm's own capabilities, no OpenShift API); returns
    (objects, notes). Renders are deterministic, so each distinct input is
    rendered once and handed out as copies."""
    values = merged(REQUIRED, values or {}) if required else (values or {})
    key = (json.dumps(values, sort_keys=True), upgrade, cluster)
    if key not in _RENDERED:
        _RENDERED[key] = _render(values, upgrade, cluster)
    return copy.deepcopy(_RENDERED[key])


def render_chart(chart, values, *, cluster=None, upgrade=False, name=RELEASE):
    """{template: manifest} of `chart` (a loaded helm_python.Chart). With
    `cluster`, the render sees that Kubernetes version and API versions
    (`helm install` asks the cluster; `helm template --kube-version
    --api-versions` sets them): helm_python's `render` has no parameter
    for them, its native call does."""
    opts = {"name": name, "namespace": NAMESPACE, "is_install": not upgrade, "is_upgrade": upgrade, "revision": 2 if upgrade else 1}
    if cluster:
        opts["kube_version"], opts["api_versions"] = cluster[0], list(cluster[1])
    from helm_python import _native
    from helm_python.chart import _dumps

    return json.loads(_native.call_string("helm_render", chart._raw(), _dumps(values or {}), json.dumps(opts)))


def objects_of(out):
    """(objects, notes) of a render's {template: manifest}."""
    objects, notes = [], ""
    for name, text in sorted(out.items()):
        if name.endswith("NOTES.txt"):
            notes = text
            continue
        for doc in yaml.safe_load_all(text):
            if doc:
                objects.append(doc)
    return objects, notes


def _render(values, upgrade, cluster):
    chart = helm.Chart.load(chart_path())
    return objects_of(render_chart(chart, values, cluster=cluster, upgrade=upgrade))


def find(objects, kind, name=None):
    found = [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}: {[o['metadata']['name'] for o in found]}"
    return found[0]


def kinds(objects):
    return sorted(o["kind"] for o in objects)


def validate_service_monitor(obj):
    """Round-trip a Prometheus Operator object (ServiceMonitor, PodMonitor,
    PrometheusRule) through the operator's model: a missing required field
    fails, and an unknown field is dropped by the model, so the dump differs
    from the input."""
    from cloudcoil.models.prometheus_operator import v1

    model = getattr(v1, obj["kind"]).model_validate(obj)
    dumped = model.model_dump(by_alias=True, exclude_unset=True, mode="json")
    assert dumped == obj, f"{obj['kind']} has fields the schema does not know:\n{json.dumps(dumped, indent=1)}\n!=\n{json.dumps(obj, indent=1)}"


def validate_objects(objects):
    """Validate each object against the Kubernetes 1.35 schemas, strictly."""
    for obj in objects:
        label = f"{obj['kind']}/{obj['metadata']['name']}"
        if obj["apiVersion"] == "monitoring.coreos.com/v1":
            validate_service_monitor(obj)
            continue
        if obj["apiVersion"] == "security.openshift.io/v1":
            # No schema in kubernetes-validate: compared field by field with
            # the controller's model (test_openshift_scc_is_the_controllers).
            assert obj["kind"] == "SecurityContextConstraints", label
            continue
        try:
            kubernetes_validate.validate(obj, KUBE_VERSION, strict=True)
        except kubernetes_validate.ValidationError as e:
            path = "/".join(str(p) for p in e.path)
            raise AssertionError(f"{label}: {path}: {e.message}") from None


def controller_bin():
    explicit = os.environ.get("OOOI_CONTROLLER_BIN")
    if explicit:
        path = Path(explicit)
    else:
        target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
        path = target / "debug" / "oooi-controller"
    assert path.is_file(), (
        f"the controller binary {path} is missing: run `cargo build -p oooi-controller` "
        "or set OOOI_CONTROLLER_BIN"
    )
    return str(path)


def expect_render_failure(values, *needles, required=True):
    try:
        render(values, required=required)
    except helm.HelmError as e:
        msg = str(e)
        for n in needles:
            assert n in msg, f"error does not say {n!r}: {msg}"
        return msg
    raise AssertionError(f"render accepted {values}")


# --------------------------------------------------------------------------
# tests


def test_lint_strict_minimal_values():
    report = helm.lint(chart_path(), REQUIRED, strict=True, kube_version="v" + KUBE_VERSION, namespace=NAMESPACE)
    assert report["total_charts_linted"] == 1, report
    assert report["errors"] == [], report["errors"]
    # Severity 1 is info ("icon is recommended"); warnings (2) and errors (3) fail.
    bad = [m for m in report["messages"] if m["severity"] >= 2]
    assert bad == [], bad


def test_lint_strict_all_features():
    report = helm.lint(chart_path(), ALL_FEATURES, strict=True, kube_version="v" + KUBE_VERSION, namespace=NAMESPACE)
    assert report["errors"] == [], report["errors"]
    bad = [m for m in report["messages"] if m["severity"] >= 2]
    assert bad == [], bad


def test_default_render_is_valid_kubernetes():
    objects, _ = render()
    assert kinds(objects) == sorted(
        ["ClusterRole", "ClusterRoleBinding", "ConfigMap", "Deployment", "Pod", "PodDisruptionBudget", "Role", "RoleBinding", "Service", "ServiceAccount"]
    ), kinds(objects)
    validate_objects(objects)
    for o in objects:
        if o["kind"] not in ("ClusterRole", "ClusterRoleBinding"):
            assert o["metadata"]["namespace"] == NAMESPACE, o["metadata"]


def test_all_features_render_is_valid_kubernetes():
    objects, _ = render(ALL_FEATURES)
    assert kinds(objects) == sorted(
        [
            "ClusterRole",
            "ClusterRoleBinding",
            "ConfigMap",
            "ConfigMap",
            "Deployment",
            "NetworkPolicy",
            "Pod",
            "PodDisruptionBudget",
            "PodMonitor",
            "PrometheusRule",
            "Role",
            "Role",
            "RoleBinding",
            "RoleBinding",
            "Service",
            "SecurityContextConstraints",
            "ServiceAccount",
            "ServiceMonitor",
        ]
    ), kinds(objects)
    validate_objects(objects)


def test_upgrade_render_equals_install_render():
    assert render(ALL_FEATURES)[0] == render(ALL_FEATURES, upgrade=True)[0]


def test_validator_catches_a_bad_object():
    # Guards the validation above against passing everything.
    objects, _ = render()
    dep = copy.deepcopy(find(objects, "Deployment"))
    dep["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]["httpGett"] = {}
    try:
        validate_objects([dep])
    except AssertionError as e:
        assert "httpGett" in str(e), e
    else:
        raise AssertionError("a Deployment with an unknown field was accepted")
    sm = copy.deepcopy(find(render(ALL_FEATURES)[0], "ServiceMonitor"))
    sm["spec"]["endpoints"][0]["scrapeEvery"] = "1s"
    try:
        validate_objects([sm])
    except AssertionError as e:
        assert "scrapeEvery" in str(e), e
    else:
        raise AssertionError("a ServiceMonitor with an unknown field was accepted")
    rule = copy.deepcopy(find(render(ALL_FEATURES)[0], "PrometheusRule"))
    rule["spec"]["groups"][0]["rules"][0]["fire"] = "now"
    try:
        validate_objects([rule])
    except AssertionError as e:
        assert "fire" in str(e), e
    else:
        raise AssertionError("a PrometheusRule with an unknown field was accepted")


def test_deployment_is_restricted_and_probed():
    for values in ({}, ALL_FEATURES):
        objects, _ = render(values)
        dep = find(objects, "Deployment")
        pod = dep["spec"]["template"]["spec"]
        (c,) = pod["containers"]
        psc, csc = pod["securityContext"], c["securityContext"]
        assert psc["runAsNonRoot"] is True and psc["seccompProfile"] == {"type": "RuntimeDefault"}, psc
        assert csc["runAsNonRoot"] is True, csc
        assert csc["readOnlyRootFilesystem"] is True, csc
        assert csc["allowPrivilegeEscalation"] is False, csc
        assert csc["capabilities"] == {"drop": ["ALL"]}, csc
        assert csc["seccompProfile"] == {"type": "RuntimeDefault"}, csc
        port = values.get("controller", {}).get("httpPort", 8080)
        health = values.get("controller", {}).get("healthPort", 8081)
        assert c["ports"] == [
            {"name": "http", "containerPort": port, "protocol": "TCP"},
            {"name": "health", "containerPort": health, "protocol": "TCP"},
        ], c["ports"]
        # The probes ask a listener of their own, whose connections nothing
        # sent to the http port can take.
        assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
        assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
        assert f"--health-addr=0.0.0.0:{health}" in c["args"], c["args"]
        assert c["resources"]["requests"]["cpu"] and c["resources"]["limits"]["memory"], c["resources"]
        assert f"--http-addr=0.0.0.0:{port}" in c["args"], c["args"]
        env = {e["name"]: e for e in c["env"]}
        assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    # OpenShift's restricted-v2 SCC assigns the uid itself.
    default_pod = find(render()[0], "Deployment")["spec"]["template"]["spec"]
    assert default_pod["securityContext"]["runAsUser"] == 65532
    openshift_pod = find(render(ALL_FEATURES)[0], "Deployment")["spec"]["template"]["spec"]
    assert "runAsUser" not in openshift_pod["securityContext"], openshift_pod["securityContext"]


def test_replicas_and_leader_election_follow_values():
    dep = find(render()[0], "Deployment")
    assert dep["spec"]["replicas"] == 2
    args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[0] == "run" and "--leader-election=true" in args and "--lease-name=oooi-controller" in args, args
    assert not any(a.startswith("--watch-namespace") for a in args), args

    dep = find(render(ALL_FEATURES)[0], "Deployment")
    assert dep["spec"]["replicas"] == 3
    args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
    for a in ("--lease-name=oooi-lease", "--watch-namespace=hcp-infra", "--openshift-scc=true", "--log-format=text"):
        assert a in args, (a, args)
    assert dep["spec"]["template"]["spec"]["containers"][0]["image"].endswith("@sha256:" + "ab" * 32)

    objects, _ = render({"replicaCount": 1, "leaderElection": {"enabled": False}})
    args = find(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--leader-election=false" in args and not any(a.startswith("--lease-name") for a in args), args
    # Without a Lease the release namespace's Role only reads the filter's source.
    role = find(objects, "Role")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]}], role["rules"]

    expect_render_failure({"replicaCount": 2, "leaderElection": {"enabled": False}}, "leaderElection.enabled")


def test_deployment_flags_exist_in_the_controller():
    exe = controller_bin()
    help_text = subprocess.run([exe, "run", "--help"], capture_output=True, text=True, timeout=30, check=True).stdout
    for values in ({}, ALL_FEATURES):
        args = find(render(values)[0], "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
        assert args[0] == "run"
        for a in args[1:]:
            flag = a.split("=", 1)[0]
            assert flag in help_text, f"{flag} is not a flag of `oooi-controller run`:\n{help_text}"
    # The values the chart passes must parse: `run` rejects them before it
    # needs a cluster when they are malformed, so check the parser with --help
    # appended (clap parses every flag given before printing help).
    for values in ({}, ALL_FEATURES):
        args = find(render(values)[0], "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
        proc = subprocess.run([exe, *args, "--help"], capture_output=True, text=True, timeout=30)
        assert proc.returncode == 0, f"`oooi-controller {' '.join(args)}` does not parse:\n{proc.stderr}"


def rules_of(objects):
    """(apiGroup, resource, verb, resourceNames) of every Role and ClusterRole rule."""
    out = set()
    for o in objects:
        if o["kind"] in ("ClusterRole", "Role"):
            for r in o["rules"]:
                names = tuple(sorted(r.get("resourceNames", [])))
                for g in r["apiGroups"]:
                    for res in r["resources"]:
                        for v in r["verbs"]:
                            out.add((g, res, v, names))
    return out


def rbac_roles(objects):
    """{(kind, namespace or None): rules set} of the chart's ClusterRole and Roles."""
    out = {}
    for o in objects:
        if o["kind"] in ("ClusterRole", "Role"):
            key = (o["kind"], o["metadata"].get("namespace"))
            assert key not in out, f"two {key}"
            out[key] = rules_of([o])
    return out


def controller_rbac(*flags):
    """`oooi-controller rbac FLAGS` as {(kind, namespace or None): rules set}."""
    proc = subprocess.run([controller_bin(), "rbac", *flags], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, f"`oooi-controller rbac` failed:\n{proc.stderr}"
    out = {}
    for doc in yaml.safe_load_all(proc.stdout):
        if doc:
            out[(doc["kind"], doc.get("namespace"))] = rules_of([{"kind": doc["kind"], "rules": doc["rules"]}])
    assert out, f"`oooi-controller rbac` printed no rules:\n{proc.stdout}"
    return out


HOSTED = {"rbac": {"hostedClusterNamespaces": ["clusters", "clusters-b"]}}


def test_rbac_is_exactly_what_the_controller_uses():
    # Each ClusterRole and Role of the chart equals the one the controller
    # prints for the same settings: the defaults; ALL_FEATURES
    # (controller.openshiftSCC, controller.watchNamespace); listed
    # HostedCluster namespaces.
    cases = (
        ({}, []),
        (ALL_FEATURES, ["--openshift-scc", "--watch-namespace", "hcp-infra"]),
        (HOSTED, ["--hosted-cluster-namespace", "clusters", "--hosted-cluster-namespace", "clusters-b"]),
    )
    for values, flags in cases:
        wanted = controller_rbac("--release-namespace", NAMESPACE, *flags)
        have = rbac_roles(render(values)[0])
        assert sorted(have, key=str) == sorted(wanted, key=str), f"values {sorted(values)}: roles {sorted(have, key=str)} != {sorted(wanted, key=str)}"
        for key, rules in wanted.items():
            assert have[key] == rules, (
                f"values {sorted(values)}, {key}: chart grants more than the code uses: {sorted(have[key] - rules)}\n"
                f"code uses what the chart does not grant: {sorted(rules - have[key])}"
            )
    # The SCC grants exist only on OpenShift: detected from the cluster's
    # APIs, or forced by controller.openshiftSCC.
    assert not {r for r in rules_of(render()[0]) if r[0] == "security.openshift.io"}
    for cluster in (KUBERNETES_1_29, KUBERNETES_1_31):
        assert rbac_roles(render(cluster=cluster)[0]) == controller_rbac("--release-namespace", NAMESPACE), cluster
    assert rbac_roles(render(cluster=OPENSHIFT_4_16)[0]) == controller_rbac("--release-namespace", NAMESPACE, "--openshift-scc")


def test_rbac_explain_gives_a_reason_for_every_rule():
    exe = controller_bin()
    for flags in ([], ["--openshift-scc", "--watch-namespace", "hcp-infra", "--hosted-cluster-namespace", "clusters"]):
        plain = subprocess.run([exe, "rbac", *flags], capture_output=True, text=True, timeout=30, check=True).stdout
        explained = subprocess.run([exe, "rbac", "--explain", *flags], capture_output=True, text=True, timeout=30, check=True).stdout
        assert list(yaml.safe_load_all(plain)) == list(yaml.safe_load_all(explained))
        lines = explained.splitlines()
        starts = [i for i, line in enumerate(lines) if line.startswith("  - ")]
        assert starts, explained
        for i in starts:
            assert lines[i - 1].startswith("  # "), f"rule without a reason in `rbac --explain`:\n{lines[i]}"


def test_secrets_are_written_and_listed_only_in_the_watched_namespace():
    roles = rbac_roles(render({"controller": {"watchNamespace": "hcp-infra"}})[0])
    cluster = roles[("ClusterRole", None)]
    assert {v for g, r, v, _ in cluster if r == "secrets"} == {"get"}, sorted(cluster)
    watched = roles[("Role", "hcp-infra")]
    assert {v for g, r, v, _ in watched if r == "secrets"} == {"get", "list", "watch", "create", "patch", "delete"}
    # With the HostedCluster namespaces listed, no Secret rule is cluster-wide at all.
    roles = rbac_roles(render({"controller": {"watchNamespace": "hcp-infra"}, **HOSTED})[0])
    assert not {r for r in roles[("ClusterRole", None)] if r[1] == "secrets"}
    for ns in ("clusters", "clusters-b"):
        assert roles[("Role", ns)] == {("", "secrets", "get", ())}
    objects, _ = render({"controller": {"watchNamespace": "hcp-infra"}, **HOSTED})
    sa = find(objects, "ServiceAccount")["metadata"]["name"]
    bindings = [o for o in objects if o["kind"] == "RoleBinding"]
    assert {b["metadata"]["namespace"] for b in bindings} == {"hcp-infra", "clusters", "clusters-b", NAMESPACE}
    for b in bindings:
        assert b["subjects"] == [{"kind": "ServiceAccount", "name": sa, "namespace": NAMESPACE}], b
        assert b["roleRef"]["name"] in {o["metadata"]["name"] for o in objects if o["kind"] == "Role" and o["metadata"]["namespace"] == b["metadata"]["namespace"]}


def test_rbac_is_least_privilege():
    objects, _ = render()
    for o in objects:
        if o["kind"] in ("ClusterRole", "Role"):
            for r in o["rules"]:
                assert "*" not in r["verbs"] and "*" not in r["resources"] and "*" not in r["apiGroups"], r
                assert not {"escalate", "bind", "impersonate"} & set(r["verbs"]), r
    # The leader-election Lease is written (patch) only in the release namespace.
    role = find(objects, "Role")
    assert role["metadata"]["namespace"] == NAMESPACE
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "create", "patch"]},
    ], role["rules"]
    # The address agent makes no API request: the controller grants it
    # nothing, so it holds no Lease verb outside that Role, and without
    # OpenShift SCCs no verb on Roles or RoleBindings anywhere.
    cluster_rules = rules_of([find(objects, "ClusterRole")])
    assert not {v for g, r, v, _ in cluster_rules if (g, r) == ("coordination.k8s.io", "leases")}, cluster_rules
    for values in ({}, {"controller": {"watchNamespace": "hcp-infra"}}):
        everywhere = rules_of([o for o in render(values)[0] if o["kind"] in ("ClusterRole", "Role")])
        assert not {(r, v) for g, r, v, _ in everywhere if g == "rbac.authorization.k8s.io"}, (values, everywhere)
        leases = {(v) for g, r, v, _ in everywhere if r == "leases"}
        assert leases == {"get", "create", "patch"}, (values, leases)
    # With OpenShift SCCs only the SCC grants are applied: never updated or
    # deleted by the controller (garbage collection removes them).
    scc_rules = rules_of([o for o in render({"controller": {"openshiftSCC": True}})[0] if o["kind"] in ("ClusterRole", "Role")])
    assert {v for g, r, v, _ in scc_rules if r in ("roles", "rolebindings")} == {"get", "list", "watch", "create", "patch"}, scc_rules
    sa = find(objects, "ServiceAccount")["metadata"]["name"]
    for kind in ("ClusterRoleBinding", "RoleBinding"):
        b = find(objects, kind)
        assert b["subjects"] == [{"kind": "ServiceAccount", "name": sa, "namespace": NAMESPACE}], b["subjects"]


def test_controller_replicas_have_a_disruption_budget_and_spread_over_nodes():
    objects, _ = render()
    dep = find(objects, "Deployment")
    selector = dep["spec"]["selector"]["matchLabels"]
    pdb = find(objects, "PodDisruptionBudget")
    assert pdb["spec"] == {"maxUnavailable": 1, "selector": {"matchLabels": selector}}, pdb["spec"]
    anti = dep["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    term = anti["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"]
    assert term == {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": selector}}, term
    hard = find(render({"podAntiAffinity": "hard"})[0], "Deployment")["spec"]["template"]["spec"]["affinity"]
    assert hard["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == [term], hard
    none = find(render({"podAntiAffinity": "none"})[0], "Deployment")["spec"]["template"]["spec"]
    assert "affinity" not in none, none.get("affinity")
    # The user's own podAntiAffinity replaces the default.
    mine = find(render(ALL_FEATURES)[0], "Deployment")["spec"]["template"]["spec"]["affinity"]
    assert mine == ALL_FEATURES["affinity"], mine
    # One replica: neither a budget (it would block every drain) nor a spread.
    single, _ = render({"replicaCount": 1})
    assert not [o for o in single if o["kind"] == "PodDisruptionBudget"]
    assert "affinity" not in find(single, "Deployment")["spec"]["template"]["spec"]
    assert not [o for o in render({"podDisruptionBudget": {"enabled": False, "maxUnavailable": 1}})[0] if o["kind"] == "PodDisruptionBudget"]
    expect_render_failure({"podAntiAffinity": "sometimes"}, "podAntiAffinity")


def test_helm_test_pod_probes_the_controller_through_its_service():
    objects, _ = render()
    pod = find(objects, "Pod")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    assert pod["spec"]["restartPolicy"] == "Never"
    container = pod["spec"]["containers"][0]
    dep = find(objects, "Deployment")
    assert container["image"] == dep["spec"]["template"]["spec"]["containers"][0]["image"]
    svc = find(objects, "Service")
    port = svc["spec"]["ports"][0]["port"]
    base = f"http://{svc['metadata']['name']}.{NAMESPACE}.svc:{port}"
    assert container["args"][:3] == ["probe", f"--url={base}/healthz", f"--url={base}/metrics"], container["args"]
    # The image's entrypoint is oooi-controller: the arguments must parse.
    proc = subprocess.run([controller_bin(), *container["args"], "--help"], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    # Restricted like the controller pod.
    sc = container["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True and sc["capabilities"]["drop"] == ["ALL"]
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    # A NetworkPolicy limiting scrapers still lets the test pod in.
    np = find(render(ALL_FEATURES)[0], "NetworkPolicy")
    peers = np["spec"]["ingress"][0]["from"]
    labels = find(render(ALL_FEATURES)[0], "Pod")["metadata"]["labels"]
    assert any(
        p.get("podSelector", {}).get("matchLabels", {}).items() <= labels.items() and "namespaceSelector" not in p
        for p in peers
    ), peers
    assert not [o for o in render({"helmTest": {"enabled": False, "attempts": 1}})[0] if o["kind"] == "Pod"]


def test_chart_readme_documents_every_value_with_its_default():
    import test_docs

    readme = chart_file("README.md")
    assert readme, "the packaged chart has no README.md"
    rows = test_docs.values_table(readme.decode())
    assert rows == test_docs.values_table(), "charts/oooi/README.md and docs/installation.md list different values"


def test_metrics_service_and_monitor_select_the_controller():
    objects, _ = render(ALL_FEATURES)
    dep = find(objects, "Deployment")
    pod_labels = dep["spec"]["template"]["metadata"]["labels"]
    svc = find(objects, "Service")
    assert all(pod_labels.get(k) == v for k, v in svc["spec"]["selector"].items()), (svc["spec"]["selector"], pod_labels)
    assert svc["spec"]["selector"]["app.kubernetes.io/component"] == "controller"
    (port,) = svc["spec"]["ports"]
    assert port["port"] == 8443 and port["targetPort"] == "http", port
    sm = find(objects, "ServiceMonitor")
    assert all(svc["metadata"]["labels"].get(k) == v for k, v in sm["spec"]["selector"]["matchLabels"].items())
    assert sm["spec"]["endpoints"][0]["port"] == port["name"]
    assert sm["metadata"]["labels"]["release"] == "prom"
    np = find(objects, "NetworkPolicy")
    assert np["spec"]["podSelector"]["matchLabels"] == svc["spec"]["selector"]
    assert np["spec"]["policyTypes"] == ["Ingress", "Egress"]
    peers = ALL_FEATURES["networkPolicy"]["metricsFrom"]
    assert np["spec"]["ingress"][0]["from"][: len(peers)] == peers


def test_controller_egress_reaches_every_port_the_component_policies_admit_it_to():
    # The component pods' NetworkPolicies (planned by the controller, here
    # through `render`) admit the controller's pods to some ports: the
    # proxies' push API, the DHCP servers' lease inventory. With egress
    # restricted, the controller's own policy must let it out to each.
    objects, _ = render(ALL_FEATURES)
    np = find(objects, "NetworkPolicy")
    egress = np["spec"]["egress"]
    out = subprocess.run(
        [controller_bin(), "render", "-f", str(ROOT / "examples" / "dhcp-pair.yaml"), "--controller-namespace", NAMESPACE],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    controller = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": NAMESPACE}},
        "podSelector": {"matchLabels": {"app.kubernetes.io/component": "controller"}},
    }
    needed = []
    for o in yaml.safe_load_all(out):
        if not o or o.get("kind") != "NetworkPolicy" or "podSelector" not in o["spec"]:
            continue
        pods = o["spec"]["podSelector"].get("matchLabels", {})
        for rule in o["spec"].get("ingress", []):
            if controller in rule.get("from", []):
                needed += [(p["port"], pods) for p in rule["ports"]]
    assert {port for port, _ in needed} >= {9445, 9069}, needed
    for port, pods in needed:
        ok = any(
            any(p["port"] == port for p in rule["ports"])
            and any(
                all(pods.get(k) == v for k, v in to.get("podSelector", {}).get("matchLabels", {}).items())
                for to in rule.get("to", [])
            )
            for rule in egress
        )
        assert ok, f"the controller's egress does not reach port {port} of the pods {pods}: {egress}"


def test_filter_configmap_holds_the_built_module():
    data = chart_file(f"files/{WASM_KEY}")
    assert data, f"the packaged chart has no files/{WASM_KEY}: tools/dev package puts the wasm build there"
    assert data[:4] == b"\0asm", "files/oooi_sni_router.wasm is not a wasm module"
    built = os.environ.get("OOOI_FILTER_WASM")
    if built:
        assert Path(built).read_bytes() == data, f"files/{WASM_KEY} of the packaged chart differs from the build {built}"
    # `tools/dev package` stamps the build id <version>-g<commit> into the
    # module (the ProxyServers' FILTER column shows it).
    marker = b"OOOI_BUILD_ID="
    assert data.count(marker) == 1, "the module has no single build id slot"
    slot = data[data.index(marker) + len(marker) :][:32].split(b"\0", 1)[0].decode()
    assert REVISION_TAG.fullmatch(slot), f"the chart's module has build id {slot!r}, not the release's"
    # One build id: the images' default tag is the module's.
    assert slot == image_tag(), (slot, image_tag())
    assert len(data) <= MAX_WASM_BYTES, f"filter module is {len(data)} bytes, over the 512 KiB budget"
    for values, name, namespaces in (
        ({}, "oooi-sni-router", [NAMESPACE]),
        (ALL_FEATURES, "custom-filter", [NAMESPACE]),
    ):
        cms = [o for o in render(values)[0] if o["kind"] == "ConfigMap" and not o["metadata"]["name"].endswith("-dashboard")]
        assert [(c["metadata"]["name"], c["metadata"]["namespace"]) for c in cms] == [(name, ns) for ns in namespaces], cms
        cm = cms[-1]
        # The controller is told where the rollout source is.
        env = {e["name"]: e.get("value") for e in _controller_env(values)}
        assert env["OOOI_FILTER_CONFIG_MAP"] == name and env["OOOI_FILTER_KEY"] == WASM_KEY, env
        assert list(cm["binaryData"]) == [WASM_KEY], list(cm["binaryData"])
        assert base64.b64decode(cm["binaryData"][WASM_KEY]) == data
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        assert cm["metadata"]["annotations"]["hostedcluster.densityops.com/filter-digest"] == digest
        assert cm["metadata"]["annotations"]["hostedcluster.densityops.com/filter-bytes"] == str(len(data))
        # The API server stores at most 1 MiB per object, base64 and metadata included.
        assert len(json.dumps(cm)) < 1024 * 1024, len(json.dumps(cm))
    print(f"    filter module {len(data)} bytes ({len(data) / MAX_WASM_BYTES:.0%} of 512 KiB)")


def _controller_env(values):
    deploy = next(o for o in render(values)[0] if o["kind"] == "Deployment")
    return deploy["spec"]["template"]["spec"]["containers"][0]["env"]


def test_missing_filter_module_fails_clearly():
    msg = expect_render_failure({"filter": {"file": "files/not_built.wasm"}}, "files/not_built.wasm is missing", "tools/dev package")
    assert "wasm32-wasip1" in msg, msg


def test_oversized_filter_module_is_refused():
    size = len(chart_file(f"files/{WASM_KEY}"))
    expect_render_failure({"filter": {"maxBytes": 1024}}, f"is {size} bytes, over filter.maxBytes (1024)")


BAD_VALUES = [
    ({"replicaCount": -1}, "/replicaCount"),
    ({"replicaCount": "two"}, "/replicaCount"),
    ({"unknownKey": True}, "unknownKey"),
    ({"images": {"pullPolicy": "Sometimes"}}, "/images/pullPolicy"),
    ({"images": {"controller": {"digest": "sha256:nothex"}}}, "/images/controller/digest"),
    ({"images": {"dns": {"repository": ""}}}, "/images/dns/repository"),
    ({"images": {"dhcp": {"tag": "has space"}}}, "/images/dhcp/tag"),
    ({"images": {"registry": "https://registry.example.com"}}, "/images/registry"),
    ({"images": {"proxy": {"registry": "registry.example.com/"}}}, "/images/proxy/registry"),
    ({"images": {"webhook": {}}}, "webhook"),
    ({"image": {"repository": "quay.io/oooi/oooi-controller"}}, "image"),
    ({"leaderElection": {"enabled": "yes"}}, "/leaderElection/enabled"),
    ({"leaderElection": {"leaseName": "Not_A_Name"}}, "/leaderElection/leaseName"),
    ({"controller": {"logFormat": "xml"}}, "/controller/logFormat"),
    ({"controller": {"httpPort": 80}}, "/controller/httpPort"),
    ({"controller": {"httpPort": 70000}}, "/controller/httpPort"),
    ({"controller": {"healthPort": 80}}, "/controller/healthPort"),
    ({"controller": {"watchNamespace": "Bad_NS"}}, "/controller/watchNamespace"),
    ({"controller": {"extraEnv": [{"value": "no name"}]}}, "/controller/extraEnv/0"),
    ({"controller": {"typo": 1}}, "typo"),
    ({"securityContext": {"runAsUser": 0}}, "/securityContext/runAsUser"),
    ({"securityContext": {"privileged": True}}, "privileged"),
    ({"resources": {"requests": {"cpu": "lots"}}}, "/resources/requests/cpu"),
    ({"resources": {"limit": {}}}, "limit"),
    ({"probes": {"liveness": {"periodSeconds": 0}}}, "/probes/liveness/periodSeconds"),
    ({"metrics": {"service": {"port": 0}}}, "/metrics/service/port"),
    ({"metrics": {"serviceMonitor": {"interval": "often"}}}, "/metrics/serviceMonitor/interval"),
    ({"networkPolicy": {"metricsFrom": [{"pods": {}}]}}, "/networkPolicy/metricsFrom/0"),
    ({"networkPolicy": {"egress": {"apiServerCIDRs": ["10.0.0.1"]}}}, "/networkPolicy/egress/apiServerCIDRs/0"),
    ({"networkPolicy": {"egress": {"pushPorts": []}}}, "/networkPolicy/egress/pushPorts"),
    ({"filter": {"maxBytes": 1048576}}, "/filter/maxBytes"),
    ({"filter": {"file": "/etc/passwd"}}, "/filter/file"),
    ({"filter": {"configMapName": ""}}, "/filter/configMapName"),
    ({"filter": {"extraNamespaces": ["infra-a"]}}, "extraNamespaces"),
    ({"serviceAccount": {"create": "true"}}, "/serviceAccount/create"),
    ({"nodeSelector": {"zone": 1}}, "/nodeSelector/zone"),
    ({"fullnameOverride": "x" * 53}, "/fullnameOverride"),
    ({"tolerations": [{"operator": "Sometimes"}]}, "/tolerations/0/operator"),
    ({"affinity": {"nodeAfinity": {}}}, "nodeAfinity"),
    ({"topologySpreadConstraints": [{"maxSkew": 1}]}, "/topologySpreadConstraints/0"),
    ({"controller": {"extraEnv": [{"name": "A", "valu": "x"}]}}, "valu"),
    ({"priorityClassName": "Not Valid"}, "/priorityClassName"),
]


def test_schema_rejects_bad_values():
    chart = helm.Chart.load(chart_path())
    for values, where in BAD_VALUES:
        try:
            chart.validate_schema(values)
        except helm.HelmValuesError as e:
            assert where in str(e), f"{values}: error does not point at {where}: {e}"
        else:
            raise AssertionError(f"values.schema.json accepted {values}")
        # Render enforces the schema too (what `helm install` does).
        try:
            chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)
        except helm.HelmError:
            pass
        else:
            raise AssertionError(f"render accepted {values}")


def test_schema_accepts_defaults_and_all_features():
    chart = helm.Chart.load(chart_path())
    chart.validate_schema({})
    chart.validate_schema(REQUIRED)
    chart.validate_schema(ALL_FEATURES)


def test_schema_covers_every_default_value():
    schema = json.loads((CHART_SRC / "values.schema.json").read_text())
    values = yaml.safe_load((CHART_SRC / "values.yaml").read_text())

    def walk(v, s, path):
        assert s is not None, f"{path} has no schema"
        if isinstance(v, dict) and s.get("type") == "object" and "properties" in s:
            assert s.get("additionalProperties") is False, f"{path} accepts unknown keys"
            for k, sub in v.items():
                walk(sub, s["properties"].get(k), f"{path}.{k}")

    walk(values, schema, "values")


def test_crds_ship_with_the_chart():
    chart = helm.Chart.load(chart_path())
    crds = [yaml.safe_load(c["data"]) for c in chart.crds]
    names = sorted(c["metadata"]["name"] for c in crds)
    want = sorted(f"{plural}.{GROUP}" for plural in KINDS.values())
    assert names == want, f"charts/oooi/crds/ holds {names}, want {want} (generated by `oooi-controller crds`)"
    for crd in crds:
        kubernetes_validate.validate(crd, KUBE_VERSION, strict=True)
        spec = crd["spec"]
        assert spec["group"] == GROUP and spec["scope"] == "Namespaced", crd["metadata"]["name"]
        assert KINDS[spec["names"]["kind"]] == spec["names"]["plural"]
        # The docs use `kubectl get oooi -A`.
        assert "oooi" in spec["names"].get("categories", []), f"{crd['metadata']['name']}: not in category oooi"
        versions = [v["name"] for v in spec["versions"]]
        assert "v1alpha1" in versions, versions
        for v in spec["versions"]:
            assert v.get("subresources", {}).get("status") == {}, f"{crd['metadata']['name']} {v['name']}: no status subresource"
            assert v.get("additionalPrinterColumns"), f"{crd['metadata']['name']} {v['name']}: no printer columns"
    ica = next(c for c in crds if c["spec"]["names"]["kind"] == "InfraClusterAttachment")
    assert "ica" in ica["spec"]["names"].get("shortNames", []), ica["spec"]["names"]


def test_notes_say_what_to_create_next():
    _, notes = render()
    assert "Infra" in notes and "InfraClusterAttachment" in notes, notes
    assert notes.index("1. An Infra") < notes.index("2. An InfraClusterAttachment"), notes
    assert f"-n {NAMESPACE}" in notes and "oooi-controller" in notes, notes
    assert "CRDs stay" in notes, notes


def test_names_fit_and_do_not_collide():
    for values, release in (({}, "oooi"), ({}, "a" * 40), ({"fullnameOverride": "x" * 52}, "r")):
        chart = helm.Chart.load(chart_path())
        out = chart.render(merged(REQUIRED, values), name=release, namespace=NAMESPACE, is_install=True)
        objs = [d for n, t in out.items() if not n.endswith("NOTES.txt") for d in yaml.safe_load_all(t) if d]
        seen = set()
        for o in objs:
            name = o["metadata"]["name"]
            assert len(name) <= 63, f"{o['kind']} name {name!r} is {len(name)} characters"
            assert (o["kind"], name) not in seen, (o["kind"], name)
            seen.add((o["kind"], name))
        validate_objects(objs)


def test_images_need_a_registry():
    # oooi publishes no images: without a registry the chart refuses to
    # render rather than point a cluster at images that do not exist.
    for values in ({}, {"images": {"controller": {"registry": REGISTRY}}}):
        expect_render_failure(values, "images.registry", "is required", "tools/dev images", required=False)
    defaults = yaml.safe_load((CHART_SRC / "values.yaml").read_text())
    assert defaults["images"]["registry"] == "", defaults["images"]
    for name in ("controller", "dns", "dhcp", "proxy"):
        assert defaults["images"][name]["registry"] == "", (name, defaults["images"][name])
    assert "quay.io" not in (CHART_SRC / "values.yaml").read_text()


def test_component_images_reach_the_controller():
    env = {e["name"]: e.get("value") for e in _controller_env({})}
    dep = find(render()[0], "Deployment")
    c = dep["spec"]["template"]["spec"]["containers"][0]
    # By default every image by the revision tag of the build that packaged
    # the chart, which no other build reuses: IfNotPresent never keeps a
    # stale image.
    assert REVISION_TAG.fullmatch(image_tag()), image_tag()
    assert c["image"] == f"{REGISTRY}/oooi-controller:{image_tag()}", c["image"]
    assert c["imagePullPolicy"] == "IfNotPresent"
    assert env["OOOI_DHCP_IMAGE"] == f"{REGISTRY}/oooi-dhcp:{image_tag()}", env
    assert env["OOOI_DNS_IMAGE"] == f"{REGISTRY}/oooi-dns:{image_tag()}", env
    assert env["OOOI_PROXY_IMAGE"] == f"{REGISTRY}/oooi-proxy:{image_tag()}", env
    # Global override, a per-image registry, tag and digest.
    env = {e["name"]: e.get("value") for e in _controller_env(ALL_FEATURES)}
    c = find(render(ALL_FEATURES)[0], "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert c["image"] == f"mirror.example.com:5000/oooi/oooi-controller:{image_tag()}@sha256:" + "ab" * 32, c["image"]
    assert c["imagePullPolicy"] == "Always"
    assert env["OOOI_DHCP_IMAGE"] == f"mirror.example.com:5000/oooi/oooi-dhcp:{image_tag()}", env
    assert env["OOOI_DNS_IMAGE"] == "mirror.example.com:5000/oooi/oooi-dns:0.1.0-rc1", env
    assert env["OOOI_PROXY_IMAGE"] == "docker.io/envoyproxy/envoy:v1.40.0", env


def test_component_resources_reach_the_controller_and_its_pods():
    # None by default: the controller keeps its built-in requests and limits.
    assert "OOOI_COMPONENT_RESOURCES" not in {e["name"] for e in _controller_env({})}
    given = {
        "proxy": {"requests": {"cpu": "200m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}},
        "dhcp": {"requests": {"cpu": 1, "memory": "48Mi"}},
    }
    env = {e["name"]: e.get("value") for e in _controller_env({"components": {"resources": given}})}
    passed = env["OOOI_COMPONENT_RESOURCES"]
    # The controller reads the variable as the chart writes it: `render`
    # takes the same flag and plans the pods of an example Infra with it.
    proc = subprocess.run(
        [controller_bin(), "render", "-f", str(ROOT / "examples" / "single-cluster.yaml")],
        capture_output=True, text=True, timeout=60,
        env={**os.environ, "OOOI_COMPONENT_RESOURCES": passed},
    )
    assert proc.returncode == 0, proc.stderr
    got = {}
    for d in yaml.safe_load_all(proc.stdout):
        if isinstance(d, dict) and d.get("kind") == "Deployment":
            component = d["metadata"]["labels"]["app.kubernetes.io/component"]
            main = next(c for c in d["spec"]["template"]["spec"]["containers"] if c["name"] == component)
            got[component] = main["resources"]
    assert got["proxy"] == given["proxy"], got
    assert got["dhcp"] == {"requests": {"cpu": "1", "memory": "48Mi"}}, got
    # A kind left out keeps the built-in default.
    assert got["dns"] == {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "256Mi"}}, got
    # The schema refuses an unknown kind and a quantity the API would.
    expect_render_failure({"components": {"resources": {"envoy": {}}}}, "envoy")
    expect_render_failure({"components": {"resources": {"dns": {"limits": {"memory": "lots"}}}}}, "memory")


def test_packaged_chart_is_versioned_as_the_workspace():
    chart = helm.Chart.load(chart_path())
    assert chart.metadata["version"] == APP_VERSION, chart.metadata
    assert REVISION_TAG.fullmatch(chart.metadata["appVersion"]), chart.metadata
    assert Path(chart_path()).name == f"oooi-{APP_VERSION}.tgz", chart_path()
    # The archive holds the chart folder as it is in the repository, plus the module.
    assert yaml.safe_load((CHART_SRC / "values.yaml").read_text()) == chart.values, "packaged values differ from charts/oooi/values.yaml"


# The alerts an operator acts on, each with a runbook in docs/operations.md.
ALERTS = {
    "OooiProxyReplicaOutOfSync",
    "OooiRoutePushFailing",
    "OooiDNSUpstreamFailures",
    "OooiDHCPPoolNearlyExhausted",
    "OooiDHCPPoolExhausted",
    "OooiDHCPProbeConflicts",
    "OooiFilterRolloutRejected",
    "OooiAttachmentExcluded",
    "OooiConfigReloadRejected",
    "OooiControllerNoLeader",
    "OooiDHCPPairClockSkew",
}
# Metric prefixes whose names the Rust tests check against what the programs
# export: controller/src/metrics.rs (the controller's registry) and
# tests/tests/images.rs (real scrapes of oooi-dns, oooi-dhcp and Envoy).
EXPORTED_PREFIXES = ("oooi_controller_", "oooi_dns_", "oooi_dhcp_", "oooi_sni_router_")


def metric_names(expr):
    """Metric names an expression selects (a `__name__=~` matcher yields its
    regex), parsed with PyPI promql-parser."""
    import promql_parser

    names = []

    def visit(node):
        if isinstance(node, promql_parser.VectorSelector):
            if node.name:
                names.append(node.name)
            for m in node.matchers.matchers:
                if m.name == "__name__":
                    names.append(m.value)
        for attr in ("expr", "lhs", "rhs", "vector_selector", "param"):
            child = getattr(node, attr, None)
            if isinstance(child, promql_parser.Expr):
                visit(child)
        for child in getattr(node, "args", None) or []:
            if isinstance(child, promql_parser.Expr):
                visit(child)

    visit(promql_parser.parse(expr))
    return names


def test_prometheus_rule_alerts_parse_and_have_runbooks():
    rule = find(render(ALL_FEATURES)[0], "PrometheusRule")
    assert rule["metadata"]["labels"]["release"] == "prom", rule["metadata"]
    alerts = {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}
    assert set(alerts) == ALERTS, sorted(set(alerts) ^ ALERTS)
    operations = (ROOT / "docs" / "operations.md").read_text()
    for name, r in alerts.items():
        names = metric_names(r["expr"])
        assert names, f"{name}: the expression selects no metric"
        for m in names:
            assert m.startswith(EXPORTED_PREFIXES), f"{name}: {m} is not an oooi metric"
        assert r["labels"]["severity"] in ("warning", "critical"), r
        assert r["annotations"]["summary"], r
        page, anchor = r["annotations"]["runbook"].split("#")
        assert page == "docs/operations.md" and anchor == name.lower(), r["annotations"]
        assert f"\n### {name}\n" in operations, f"docs/operations.md has no runbook section `### {name}`"
    # The rendered rules are the file's, untouched by the template engine.
    source = yaml.safe_load((CHART_SRC / "monitoring" / "alerts.yaml").read_text())
    assert rule["spec"]["groups"] == source["groups"]
    assert "PrometheusRule" not in kinds(render()[0])


def selectors(expr):
    """(metric name, {label: value}) of every selector of an expression, the
    equality matchers only, parsed with PyPI promql-parser."""
    import promql_parser

    found = []

    def visit(node):
        if isinstance(node, promql_parser.VectorSelector):
            labels = {m.name: m.value for m in node.matchers.matchers if str(m.op) == "MatchOp.Equal"}
            found.append((node.name, labels))
        for attr in ("expr", "lhs", "rhs", "vector_selector", "param"):
            child = getattr(node, attr, None)
            if isinstance(child, promql_parser.Expr):
                visit(child)
        for child in getattr(node, "args", None) or []:
            if isinstance(child, promql_parser.Expr):
                visit(child)

    visit(promql_parser.parse(expr))
    return found


def test_dns_upstream_alert_counts_only_what_the_upstream_is_blamed_for():
    # A client asking for names of a dead zone makes queries fail that the
    # upstream is not blamed for (blame="query"); that must not page.
    rule = find(render(ALL_FEATURES)[0], "PrometheusRule")
    (alert,) = [r for g in rule["spec"]["groups"] for r in g["rules"] if r["alert"] == "OooiDNSUpstreamFailures"]
    sel = selectors(alert["expr"])
    failures = [labels for name, labels in sel if name.startswith("oooi_dns_upstream_")]
    assert [name for name, _ in sel if name.startswith("oooi_dns_upstream_")] == ["oooi_dns_upstream_unanswered_total"], sel
    assert failures == [{"blame": "upstream"}], sel
    # The metric and its label values are the ones oooi-dns documents.
    dns_doc = (ROOT / "docs" / "dns.md").read_text()
    assert "`oooi_dns_upstream_unanswered_total` | `upstream`, `blame` (`upstream`, `query`)" in dns_doc


def test_promql_parser_refuses_a_bad_expression():
    # Guards the parse above against accepting anything.
    try:
        metric_names("sum by (pod) (rate(oooi_dns_queries_total[5m])")
    except Exception:
        pass
    else:
        raise AssertionError("an unbalanced expression parsed")
    assert metric_names('a_total + on (x) b{c="d"} or {__name__=~"e_.+"}') == ["a_total", "b", "e_.+"]


def test_grafana_dashboard_is_off_by_default_and_labelled_for_the_sidecar():
    assert not [o for o in render()[0] if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-dashboard")]
    cm = find(render(ALL_FEATURES)[0], "ConfigMap", "oooi-dashboard")
    assert cm["metadata"]["namespace"] == "grafana" and cm["metadata"]["labels"]["grafana_dashboard"] == "oooi", cm["metadata"]
    assert cm["metadata"]["annotations"] == {"grafana_folder": "oooi"}
    dash = json.loads(cm["data"]["oooi.json"])
    assert dash == json.loads((CHART_SRC / "monitoring" / "dashboard.json").read_text())
    titles = [p["title"] for p in dash["panels"]]
    for want in ("Connections routed", "Connections refused", "table generation per replica", "DNS queries by view and rcode", "DHCP leases", "DHCP pool use"):
        assert any(want.lower() in t.lower() for t in titles), (want, titles)
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    assert exprs
    for e in exprs:
        for m in metric_names(e):
            assert m.startswith(EXPORTED_PREFIXES), f"{e}: {m} is not an oooi metric"


def test_pod_monitor_scrapes_the_component_pods():
    pm = find(render(ALL_FEATURES)[0], "PodMonitor")
    sel = pm["spec"]["selector"]
    assert sel["matchLabels"] == {"app.kubernetes.io/name": "oooi", "app.kubernetes.io/managed-by": "oooi-controller"}, sel
    assert sel["matchExpressions"] == [{"key": "app.kubernetes.io/component", "operator": "In", "values": ["dns", "dhcp", "proxy"]}]
    assert pm["spec"]["namespaceSelector"] == {"any": True}
    assert pm["spec"]["podMetricsEndpoints"][0]["port"] == "http"


# --------------------------------------------------------------------------
# OpenShift 4.16+, Kubernetes 1.29+, upgrades from the previous chart

# Volume types Pod Security `restricted` (and OpenShift's restricted-v2) allow.
RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"}
SAFE_SYSCTLS = {
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
}


def restricted_refusals(pod, *, openshift):
    """Why Pod Security `restricted` refuses `pod` (a pod spec), and on
    OpenShift why restricted-v2 does (a fixed UID, group or fsGroup: it
    assigns them from the namespace's range). Empty: admitted."""
    out = []
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(key):
            out.append(key)
    for v in pod.get("volumes", []):
        kind = next(k for k in v if k != "name")
        if kind not in RESTRICTED_VOLUMES:
            out.append(f"volume {v['name']}: {kind}")
    psc = pod.get("securityContext", {})
    for s in psc.get("sysctls", []):
        if s["name"] not in SAFE_SYSCTLS:
            out.append(f"sysctl {s['name']}")
    if openshift:
        for key in ("runAsUser", "runAsGroup", "fsGroup"):
            if key in psc:
                out.append(f"pod {key} is fixed")
    for c in pod.get("initContainers", []) + pod["containers"]:
        sc, name = c.get("securityContext", {}), c["name"]
        if sc.get("privileged"):
            out.append(f"{name}: privileged")
        if sc.get("allowPrivilegeEscalation") is not False:
            out.append(f"{name}: allowPrivilegeEscalation is not false")
        if sc.get("runAsNonRoot", psc.get("runAsNonRoot")) is not True:
            out.append(f"{name}: runAsNonRoot is not true")
        if sc.get("runAsUser", psc.get("runAsUser")) == 0:
            out.append(f"{name}: runs as root")
        seccomp = sc.get("seccompProfile", psc.get("seccompProfile", {})).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            out.append(f"{name}: seccomp profile {seccomp}")
        caps = sc.get("capabilities", {})
        if "ALL" not in caps.get("drop", []):
            out.append(f"{name}: does not drop ALL")
        for cap in caps.get("add", []):
            if cap != "NET_BIND_SERVICE":
                out.append(f"{name}: adds {cap}")
        if c.get("ports") and any(p.get("hostPort") for p in c["ports"]):
            out.append(f"{name}: host port")
        if openshift:
            for key in ("runAsUser", "runAsGroup"):
                if key in sc:
                    out.append(f"{name}: {key} is fixed")
    return out


def pods_of(objects):
    """(label, pod spec) of every pod the chart makes."""
    out = []
    for o in objects:
        if o["kind"] == "Deployment":
            out.append((f"Deployment/{o['metadata']['name']}", o["spec"]["template"]["spec"]))
        elif o["kind"] == "Pod":
            out.append((f"Pod/{o['metadata']['name']}", o["spec"]))
    return out


# ALL_FEATURES without the forced OpenShift mode, so that the cluster decides.
DETECTED = merged(ALL_FEATURES, {"controller": {"openshiftSCC": False}})


def test_every_pod_meets_restricted_on_each_cluster():
    for cluster in (OPENSHIFT_4_16, KUBERNETES_1_29, KUBERNETES_1_31):
        openshift = bool(cluster[1])
        for values in ({}, DETECTED):
            pods = pods_of(render(values, cluster=cluster)[0])
            assert len(pods) == 2, pods
            for label, pod in pods:
                refused = restricted_refusals(pod, openshift=openshift)
                assert not refused, f"{cluster} {label}: {refused}"
    # Guards the check: the portable pod (UID 65532) is refused by restricted-v2.
    (_, pod), _ = pods_of(render()[0])
    assert "pod runAsUser is fixed" in restricted_refusals(pod, openshift=True)
    bad = copy.deepcopy(pod)
    bad["containers"][0]["securityContext"]["capabilities"] = {"add": ["NET_ADMIN"]}
    assert set(restricted_refusals(bad, openshift=False)) == {"controller: does not drop ALL", "controller: adds NET_ADMIN"}


def test_openshift_is_detected_from_the_cluster():
    objects, _ = render(cluster=OPENSHIFT_4_16)
    pod = find(objects, "Deployment")["spec"]["template"]["spec"]
    assert "--openshift-scc=true" in pod["containers"][0]["args"], pod["containers"][0]["args"]
    assert "runAsUser" not in pod["securityContext"], pod["securityContext"]
    assert "runAsUser" not in find(objects, "Pod")["spec"]["securityContext"]
    scc = find(objects, "SecurityContextConstraints")
    assert scc["metadata"]["name"] == "oooi-address-agent" and "namespace" not in scc["metadata"]
    validate_objects(objects)
    for cluster in (KUBERNETES_1_29, KUBERNETES_1_31):
        objects, _ = render(cluster=cluster)
        pod = find(objects, "Deployment")["spec"]["template"]["spec"]
        assert "--openshift-scc=false" in pod["containers"][0]["args"]
        assert pod["securityContext"]["runAsUser"] == 65532
        assert "SecurityContextConstraints" not in kinds(objects), cluster
    # The administrator may keep the SCC out of the release: the grants stay.
    objects, _ = render({"openshift": {"createAddressAgentSCC": False}}, cluster=OPENSHIFT_4_16)
    assert "SecurityContextConstraints" not in kinds(objects)
    assert {r for r in rules_of(objects) if r[1] == "securitycontextconstraints"}


def test_openshift_scc_is_the_controllers():
    scc = find(render(cluster=OPENSHIFT_4_16)[0], "SecurityContextConstraints")
    proc = subprocess.run([controller_bin(), "rbac", "--sccs"], capture_output=True, text=True, timeout=30, check=True)
    (want,) = [d for d in yaml.safe_load_all(proc.stdout) if d]
    labels = scc["metadata"].pop("labels")
    assert labels["app.kubernetes.io/managed-by"] == "Helm", labels
    assert scc == want, f"the chart's SCC differs from `oooi-controller rbac --sccs`:\n{scc}\n!=\n{want}"
    # What it allows: the agent's two capabilities, nothing of the host.
    assert scc["allowedCapabilities"] == ["NET_ADMIN", "NET_RAW"] and scc["requiredDropCapabilities"] == ["ALL"]
    assert scc["users"] == [] and scc["groups"] == [], "use is granted by Roles the controller writes, not by the SCC"
    assert not any(scc[k] for k in ("allowHostNetwork", "allowHostPID", "allowHostIPC", "allowHostPorts", "allowPrivilegedContainer", "allowPrivilegeEscalation"))


def kube_version_admits(constraint, version):
    """Whether Chart.yaml's `kubeVersion` (one `>=X.Y.Z-0` bound, the form
    the chart uses) admits Kubernetes `version`."""
    m = re.fullmatch(r">=\s*(\d+)\.(\d+)\.(\d+)(-0)?", constraint.strip())
    assert m, f"kubeVersion {constraint!r} is not one lower bound"
    low = tuple(int(x) for x in m.group(1, 2, 3))
    have = tuple(int(x) for x in re.match(r"v?(\d+)\.(\d+)\.(\d+)", version).groups())
    return have >= low


def test_chart_installs_on_openshift_4_16_and_kubernetes_1_29():
    chart = helm.Chart.load(chart_path())
    constraint = chart.metadata["kubeVersion"]
    # OpenShift 4.16 is Kubernetes 1.29, 4.17 is 1.30; pre-releases and the
    # providers' suffixes (v1.29.6+abcdef) count (the `-0`).
    for version in ("v1.29.0", "v1.29.6", "v1.30.4", "v1.31.0", "v1.35.0"):
        assert kube_version_admits(constraint, version), (constraint, version)
    assert not kube_version_admits(constraint, "v1.28.9"), constraint
    assert constraint.endswith("-0"), constraint
    # No CRD rule needs a CEL library an older API server lacks: it would
    # refuse the CRD itself.
    for crd in chart.crds:
        for lib in ("isCIDR(", "cidr(", "isIP(", "ip("):
            assert lib not in crd["data"], f"{crd.get('name')} uses the CEL library call {lib}"


# The chart of the release before the SCC moved from the controller to the
# install: `helm upgrade --reuse-values` from it must work.
PREVIOUS_CHART_COMMIT = "8f0ddd7"


def scratch_dir(prefix):
    """A temp dir removed when the test run ends."""
    import atexit
    import shutil
    import tempfile

    path = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, path, True)
    return path


@functools.lru_cache(maxsize=None)
def previous_chart_archive():
    """The previous chart, packaged as `tools/dev package` did then (its
    folder from git, this build's filter module), in a temp dir."""
    tmp = scratch_dir("oooi-previous-chart-")
    tar = subprocess.run(["git", "-C", str(ROOT), "archive", PREVIOUS_CHART_COMMIT, "charts/oooi"], capture_output=True, check=True, timeout=60).stdout
    import io

    with tarfile.open(fileobj=io.BytesIO(tar)) as t:
        t.extractall(tmp, filter="data")
    folder = tmp / "charts" / "oooi"
    (folder / "files" / WASM_KEY).write_bytes(chart_file(f"files/{WASM_KEY}"))
    return helm.package(str(folder), destination=str(tmp), version=APP_VERSION, app_version=APP_VERSION)


def reuse_values_render(user_values, cluster, schema_change=None):
    """What `helm upgrade --reuse-values` renders: Helm replaces the new
    chart's default values with the previous release's (the old chart's
    defaults coalesced with the user's values) and lays the user's values
    over them; the new chart's schema checks the result."""
    old = helm.Chart.load(previous_chart_archive())
    old_defaults = old.values
    tmp = scratch_dir("oooi-upgrade-")
    with tarfile.open(chart_path()) as t:
        t.extractall(tmp, filter="data")
    (tmp / "oooi" / "values.yaml").write_text(yaml.safe_dump(merged(old_defaults, user_values)))
    if schema_change:
        path = tmp / "oooi" / "values.schema.json"
        schema = json.loads(path.read_text())
        schema_change(schema)
        path.write_text(json.dumps(schema))
    new = helm.Chart.load(str(tmp / "oooi"))
    return objects_of(render_chart(new, user_values, cluster=cluster, upgrade=True))[0], old


def test_upgrade_with_reuse_values_from_the_previous_chart():
    for cluster in (OPENSHIFT_4_16, KUBERNETES_1_29, KUBERNETES_1_31):
        for user in (REQUIRED, merged(REQUIRED, {"controller": {"watchNamespace": "hcp-infra"}})):
            objects, old = reuse_values_render(user, cluster)
            # The previous chart itself renders these values (the test's
            # footing), and the upgrade renders what a fresh install would.
            objects_of(render_chart(old, user, cluster=cluster))
            fresh = render(user, cluster=cluster)[0]
            assert kinds(objects) == kinds(fresh), (cluster, kinds(objects), kinds(fresh))
            validate_objects(objects)
            assert rbac_roles(objects) == rbac_roles(fresh), cluster
            if cluster[1]:
                assert "SecurityContextConstraints" in kinds(objects), "the upgrade on OpenShift creates the agent's SCC"


def test_reuse_values_check_catches_a_new_required_value():
    # Guards the upgrade test: a value the previous chart's defaults lack,
    # made required, fails the upgrade as Helm would.
    def require_openshift(schema):
        schema["required"].append("openshift")

    try:
        reuse_values_render(REQUIRED, KUBERNETES_1_29, require_openshift)
    except helm.HelmError as e:
        assert "openshift" in str(e), e
    else:
        raise AssertionError("an upgrade whose previous values lack a required key rendered")
