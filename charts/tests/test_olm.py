#!/usr/bin/env python3
"""The OLM bundle `oooi-controller bundle` writes, against the chart.

- The ClusterServiceVersion's controller Deployment is the chart's (rendered
  with controller.openshiftSCC=true and the same images): same replicas,
  pod and container security, args, ports, probes, resources, volumes and
  environment, except that the component images arrive as RELATED_IMAGE_*
  (the chart's OOOI_*_IMAGE) and every image is by digest only.
- The bundle's filter ConfigMap carries the packaged chart's module.
- Every manifest of the bundle is valid Kubernetes 1.35 (strict), the CSV's
  Deployment spec too, and the CSV is valid, strictly, against the
  ClusterServiceVersion CRD's own schema (the excerpt in
  charts/tests/olm/, with its source and licence in the README there).
"""

from __future__ import annotations

import base64
import copy
import functools
import json
import subprocess
from pathlib import Path

import jsonschema
import kubernetes_validate
import yaml

from test_docs import strict
from test_chart import KUBE_VERSION, REQUIRED, WASM_KEY, chart_file, controller_bin, find, merged, render, scratch_dir

HERE = Path(__file__).resolve().parent
DIGEST = "sha256:" + "ab" * 32
REGISTRY = "registry.example.com/oooi"
NAMES = {"controller": "oooi-controller", "dns": "oooi-dns", "dhcp": "oooi-dhcp", "proxy": "oooi-proxy", "must-gather": "oooi-must-gather"}
# The chart's values an OperatorHub install corresponds to.
OLM_VALUES = merged(
    REQUIRED,
    {
        "controller": {"openshiftSCC": True},
        "images": {n: {"digest": DIGEST} for n in ("controller", "dns", "dhcp", "proxy")},
    },
)
# Chart variable → bundle variable of each component image.
IMAGE_ENV = {"OOOI_DHCP_IMAGE": "RELATED_IMAGE_DHCP", "OOOI_DNS_IMAGE": "RELATED_IMAGE_DNS", "OOOI_PROXY_IMAGE": "RELATED_IMAGE_PROXY"}


@functools.lru_cache(maxsize=None)
def _bundle_dir():
    out = scratch_dir("oooi-bundle-")
    wasm = out / WASM_KEY
    wasm.write_bytes(chart_file(f"files/{WASM_KEY}"))
    args = [controller_bin(), "bundle", "--out", str(out / "bundle"), "--filter-wasm", str(wasm)]
    for name, repo in NAMES.items():
        args += ["--image", f"{name}={REGISTRY}/{repo}@{DIGEST}"]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, f"`oooi-controller bundle` failed:\n{proc.stderr}"
    return out / "bundle"


def bundle_manifests():
    """{file name: object} of the bundle's manifests/."""
    return {p.name: yaml.safe_load(p.read_text()) for p in sorted((_bundle_dir() / "manifests").iterdir())}


def csv():
    return copy.deepcopy(bundle_manifests()["oooi.clusterserviceversion.yaml"])


def without_tag(ref):
    """registry/repo:tag@digest → registry/repo@digest (the chart pins with a tag)."""
    name, digest = ref.split("@", 1)
    last = name.rsplit("/", 1)
    if ":" in last[-1]:
        last[-1] = last[-1].split(":", 1)[0]
    return "/".join(last) + "@" + digest


def test_csv_deployment_is_the_charts():
    chart_dep = find(render(OLM_VALUES)[0], "Deployment")
    (olm_dep,) = csv()["spec"]["install"]["spec"]["deployments"]
    assert olm_dep["name"] == chart_dep["metadata"]["name"], (olm_dep["name"], chart_dep["metadata"]["name"])
    chart, olm = chart_dep["spec"], olm_dep["spec"]
    # Labels differ by design (Helm's release labels; OLM adds its own).
    for spec in (chart, olm):
        spec.pop("selector")
        spec["template"].pop("metadata")
    cpod, opod = chart["template"]["spec"], olm["template"]["spec"]
    # The anti-affinity term selects the release's pods (Helm's instance label).
    anti = cpod.get("affinity", {}).get("podAntiAffinity", {})
    for term in anti.get("preferredDuringSchedulingIgnoredDuringExecution", []):
        term["podAffinityTerm"]["labelSelector"]["matchLabels"].pop("app.kubernetes.io/instance", None)
    (cc,), (oc,) = cpod.pop("containers"), opod.pop("containers")
    assert chart == olm, f"Deployment spec differs:\nchart {json.dumps(chart, indent=1)}\nbundle {json.dumps(olm, indent=1)}"
    # Images: the chart's by tag@digest, the bundle's by digest.
    assert without_tag(cc.pop("image")) == oc.pop("image")
    cenv = {e["name"]: e for e in cc.pop("env")}
    oenv = {e["name"]: e for e in oc.pop("env")}
    for chart_var, olm_var in IMAGE_ENV.items():
        assert without_tag(cenv.pop(chart_var)["value"]) == oenv.pop(olm_var)["value"], chart_var
    assert oenv.pop("RELATED_IMAGE_CONTROLLER")["value"] == f"{REGISTRY}/oooi-controller@{DIGEST}"
    assert oenv.pop("RELATED_IMAGE_MUST_GATHER")["value"] == f"{REGISTRY}/oooi-must-gather@{DIGEST}"
    # OLM's target namespace is the controller's watched one (the chart's
    # controller.watchNamespace, unset here).
    assert oenv.pop("OOOI_WATCH_NAMESPACE") == {
        "name": "OOOI_WATCH_NAMESPACE",
        "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['olm.targetNamespaces']"}},
    }
    assert cenv == oenv, f"environment differs:\nchart {cenv}\nbundle {oenv}"
    assert cc == oc, f"container differs:\nchart {json.dumps(cc, indent=1)}\nbundle {json.dumps(oc, indent=1)}"


def test_comparison_catches_a_drifted_deployment():
    # Guards the comparison above against passing everything.
    import test_olm

    original = test_olm.csv

    def drifted():
        c = original()
        c["spec"]["install"]["spec"]["deployments"][0]["spec"]["template"]["spec"]["containers"][0]["args"].append("--log-format=text")
        return c

    test_olm.csv = drifted
    try:
        test_csv_deployment_is_the_charts()
    except AssertionError as e:
        assert "container differs" in str(e), e
    else:
        raise AssertionError("a bundle Deployment with other args matched the chart's")
    finally:
        test_olm.csv = original


def test_bundle_filter_config_map_is_the_charts():
    chart_cm = find(render(OLM_VALUES)[0], "ConfigMap", "oooi-sni-router")
    olm_cm = bundle_manifests()["oooi-sni-router.configmap.yaml"]
    assert olm_cm["binaryData"] == chart_cm["binaryData"]
    assert olm_cm["metadata"]["annotations"] == chart_cm["metadata"]["annotations"]
    assert base64.b64decode(olm_cm["binaryData"][WASM_KEY]) == chart_file(f"files/{WASM_KEY}")


def test_bundle_manifests_are_valid_kubernetes():
    manifests = bundle_manifests()
    for name, obj in manifests.items():
        if obj["kind"] == "ClusterServiceVersion":
            continue
        try:
            kubernetes_validate.validate(obj, KUBE_VERSION, strict=True)
        except kubernetes_validate.ValidationError as e:
            raise AssertionError(f"{name}: {'/'.join(map(str, e.path))}: {e.message}") from None
    (dep,) = csv()["spec"]["install"]["spec"]["deployments"]
    wrapped = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": dep["name"]}, "spec": dep["spec"]}
    kubernetes_validate.validate(wrapped, KUBE_VERSION, strict=True)
    kinds = sorted(o["kind"] for o in manifests.values())
    assert kinds == ["ClusterServiceVersion", "ConfigMap"] + ["CustomResourceDefinition"] * 5, kinds
    # OLM unpacks a bundle into one ConfigMap: the manifests must fit in 1 MiB.
    size = sum(p.stat().st_size for p in (_bundle_dir() / "manifests").iterdir())
    assert size < 1024 * 1024, size
    print(f"    bundle manifests {size} bytes ({size / (1024 * 1024):.0%} of 1 MiB)")


def test_bundle_refuses_an_image_by_tag():
    proc = subprocess.run(
        [controller_bin(), "bundle", "--out", str(scratch_dir("oooi-bundle-refused-")), "--filter-wasm", "/dev/null"]
        + [a for n, r in NAMES.items() for a in ("--image", f"{n}={REGISTRY}/{r}:0.1.0")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0 and "not pinned by digest" in proc.stderr, proc.stderr


def csv_schema_errors(obj):
    """Where `obj` breaks the ClusterServiceVersion schema (strict: unknown
    fields are errors)."""
    schema = strict(yaml.safe_load((HERE / "olm" / "clusterserviceversions.schema.yaml").read_text()))
    errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(obj), key=lambda e: list(e.path))
    return [f"{'.'.join(str(p) for p in e.path) or '(root)'}: {e.message}" for e in errors]


def test_csv_is_valid_against_the_clusterserviceversion_schema():
    c = csv()
    assert c["apiVersion"] == "operators.coreos.com/v1alpha1" and c["kind"] == "ClusterServiceVersion"
    errors = csv_schema_errors(c)
    assert not errors, "\n".join(errors)
    # Every annotation is a string, as metadata.annotations must be.
    for k, v in c["metadata"]["annotations"].items():
        assert isinstance(v, str), (k, v)


def test_csv_schema_check_catches_a_bad_csv():
    # Guards the check above against passing everything: each change breaks
    # the schema once.
    def broken(change):
        c = csv()
        change(c)
        return csv_schema_errors(c)

    cases = {
        "an install mode's supported as a string": lambda c: c["spec"]["installModes"][0].update(supported="yes"),
        "an icon without its mediatype": lambda c: c["spec"]["icon"][0].pop("mediatype"),
        "an unknown field in relatedImages": lambda c: c["spec"]["relatedImages"][0].update(digest="sha256:00"),
        "no displayName": lambda c: c["spec"].pop("displayName"),
        "a deployment without a name": lambda c: c["spec"]["install"]["spec"]["deployments"][0].pop("name"),
        "a rule without verbs": lambda c: c["spec"]["install"]["spec"]["clusterPermissions"][0]["rules"][0].pop("verbs"),
        "a descriptor without a path": lambda c: c["spec"]["customresourcedefinitions"]["owned"][0]["specDescriptors"][0].pop("path"),
        "an unknown spec field": lambda c: c["spec"].update(minOpenShiftVersion="4.16"),
    }
    for what, change in cases.items():
        assert broken(change), f"{what}: the schema accepted it"


def test_install_modes_scope_secrets_to_the_target_namespace():
    c = csv()
    modes = {m["type"]: m["supported"] for m in c["spec"]["installModes"]}
    assert modes == {"OwnNamespace": True, "SingleNamespace": True, "MultiNamespace": False, "AllNamespaces": True}, modes
    install = c["spec"]["install"]["spec"]
    (namespaced,) = install["permissions"]
    (cluster,) = install["clusterPermissions"]

    def grants(rules, resource):
        return {v for r in rules if resource in r["resources"] for v in r["verbs"]}

    # Secrets are written only through `permissions` (a Role in the target
    # namespace in OwnNamespace and SingleNamespace mode); cluster-wide only
    # the named kubeconfig read.
    assert grants(cluster["rules"], "secrets") == {"get"}, cluster["rules"]
    assert {"list", "watch", "create", "patch", "delete"} <= grants(namespaced["rules"], "secrets")
    # The leader Lease is namespaced.
    assert {"get", "create", "patch"} <= grants(namespaced["rules"], "leases")
    assert "patch" not in grants(cluster["rules"], "leases")
    # Nothing lets the operator grant itself privilege.
    for r in namespaced["rules"] + cluster["rules"]:
        assert not {"bind", "escalate", "impersonate", "*"} & set(r["verbs"]), r
        if "securitycontextconstraints" in r["resources"]:
            assert set(r["verbs"]) <= {"use", "get"}, r
    # The two lists together are the controller's rules with --openshift-scc.
    proc = subprocess.run([controller_bin(), "rbac", "--openshift-scc"], capture_output=True, text=True, timeout=30, check=True)
    printed = [r for d in yaml.safe_load_all(proc.stdout) if d for r in d["rules"]]
    key = lambda r: json.dumps(r, sort_keys=True)
    assert sorted(map(key, namespaced["rules"] + cluster["rules"])) == sorted(map(key, printed))


def test_rbac_prints_the_roles_of_each_olm_install_mode():
    exe = controller_bin()
    for mode, target, namespaces in (
        ("OwnNamespace", None, ["oooi-system"]),
        ("SingleNamespace", "hcp-infra", ["hcp-infra", "oooi-system"]),
        ("AllNamespaces", None, ["oooi-system"]),
    ):
        args = [exe, "rbac", "--olm-install-mode", mode, "--release-namespace", "oooi-system"]
        if target:
            args += ["--watch-namespace", target]
        proc = subprocess.run(args, capture_output=True, text=True, timeout=30, check=True)
        docs = [d for d in yaml.safe_load_all(proc.stdout) if d]
        assert docs[0]["kind"] == "ClusterRole", docs[0]
        assert [d["namespace"] for d in docs[1:]] == namespaces, proc.stdout
        cluster_secrets = {v for r in docs[0]["rules"] if "secrets" in r["resources"] for v in r["verbs"]}
        assert cluster_secrets == ({"get", "list", "watch", "create", "patch", "delete"} if mode == "AllNamespaces" else {"get"}), (mode, cluster_secrets)
    proc = subprocess.run([exe, "rbac", "--olm-install-mode", "SingleNamespace"], capture_output=True, text=True, timeout=30)
    assert proc.returncode != 0 and "--watch-namespace" in proc.stderr, proc.stderr
