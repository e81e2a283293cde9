"""Checks that the user docs (docs/*.md) agree with the chart and the code.

- Every chart value appears in the values table of docs/installation.md, with
  the default values.yaml really has.
- Every oooi manifest in the docs validates against the CRD schema the chart
  ships, and `oooi-controller render` accepts the Quickstart's manifests.
- Every `oooi-controller <command>` the docs mention exists.
"""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
from pathlib import Path

import jsonschema
import kubernetes_validate
import yaml

from test_chart import CHART_SRC as CHART, GROUP, KUBE_VERSION, ROOT, controller_bin

DOCS = ROOT / "docs"
RENDER_ONLY = ("ObservedCluster", "ObservedInfra")
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)


def values_table(text=None):
    """{path: default cell} from the table under '## Values' in installation.md
    (or in `text`, e.g. the chart's README)."""
    text = text if text is not None else (DOCS / "installation.md").read_text()
    section = text.split("\n## Values\n", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        if not line.startswith("| `"):
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        for path in re.findall(r"`([^`]+)`", cells[0]):
            rows[path] = cells[1]
    return rows


def leaf_paths(values, schema, prefix=""):
    """Paths of values.yaml down to where the schema stops naming properties."""
    out = []
    for key, sub in values.items():
        path = f"{prefix}{key}"
        s = schema["properties"][key]
        if isinstance(sub, dict) and "properties" in s and sub:
            out.extend(leaf_paths(sub, s, path + "."))
        else:
            out.append(path)
    return out


def lookup(values, path):
    for part in path.split("."):
        values = values[part]
    return values


def test_values_table_covers_every_value():
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    schema = json.loads((CHART / "values.schema.json").read_text())
    rows = values_table()
    assert rows, "docs/installation.md has no values table"
    for path in rows:
        try:
            lookup(values, path)
        except (KeyError, TypeError):
            raise AssertionError(f"docs/installation.md documents `{path}`, which values.yaml does not have") from None
    missing = [p for p in leaf_paths(values, schema) if not any(p == d or p.startswith(d + ".") for d in rows)]
    assert not missing, f"values missing from the docs/installation.md table: {missing}"


def test_values_table_defaults_are_true():
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    checked = 0
    for path, cell in values_table().items():
        literal = re.fullmatch(r"`([^`]*)`", cell)
        if not literal:
            continue  # prose such as "requests 50m CPU / 64Mi, limit 256Mi"
        want = yaml.safe_load(literal.group(1)) if literal.group(1) != '""' else ""
        have = lookup(values, path)
        assert have == want, f"docs/installation.md says {path} defaults to {literal.group(1)}, values.yaml has {have!r}"
        checked += 1
    assert checked >= 30, f"only {checked} defaults were literal enough to check"


def oooi_manifests():
    """(page, document) for every YAML block in the docs that holds oooi objects."""
    out = []
    for page in sorted(DOCS.glob("*.md")):
        for lang, body in FENCE.findall(page.read_text()):
            if lang != "yaml" or f"apiVersion: {GROUP}/" not in body:
                continue
            for doc in yaml.safe_load_all(body):
                # ObservedCluster/ObservedInfra are render-only fixtures (never
                # applied, no CRD); controller/tests/all/docs_examples.rs renders them.
                if doc and doc.get("kind") in RENDER_ONLY:
                    continue
                if doc and str(doc.get("apiVersion", "")).startswith(GROUP + "/"):
                    out.append((page.name, doc))
    return out


def crd_schemas():
    schemas = {}
    for path in sorted((CHART / "crds").glob("*.yaml")):
        for crd in yaml.safe_load_all(path.read_text()):
            if not crd:
                continue
            for v in crd["spec"]["versions"]:
                schemas[(f"{crd['spec']['group']}/{v['name']}", crd["spec"]["names"]["kind"])] = v["schema"]["openAPIV3Schema"]
    return schemas


def strict(schema):
    """The CRD schema with unknown fields rejected, as the API server prunes
    (and `kubectl --validate=strict` refuses) them."""
    if isinstance(schema, dict):
        out = {k: strict(v) for k, v in schema.items()}
        if out.get("type") == "object" and "properties" in out and "additionalProperties" not in out:
            if not out.get("x-kubernetes-preserve-unknown-fields"):
                out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [strict(v) for v in schema]
    return schema


def test_docs_manifests_fit_the_crds():
    manifests = oooi_manifests()
    kinds = {doc["kind"] for _, doc in manifests}
    assert {"Infra", "InfraClusterAttachment"} <= kinds, f"the docs show no Infra and attachment: {kinds}"
    schemas = crd_schemas()
    assert schemas, "charts/oooi/crds/ holds no CRDs"
    for page, doc in manifests:
        key = (doc["apiVersion"], doc["kind"])
        assert key in schemas, f"{page}: {key} is not a kind the chart's CRDs define"
        body = {k: v for k, v in doc.items() if k not in ("apiVersion", "kind", "metadata")}
        schema = strict(schemas[key])
        schema = {**schema, "properties": {k: v for k, v in schema.get("properties", {}).items() if k not in ("apiVersion", "kind", "metadata")}}
        errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(body), key=lambda e: list(e.path))
        assert not errors, f"{page}: {doc['kind']} {doc['metadata']['name']}: " + "; ".join(
            f"{'.'.join(str(p) for p in e.path) or '(root)'}: {e.message}" for e in errors
        )


def test_strict_crd_check_catches_a_typo():
    # Guards the check above against passing everything.
    schemas = crd_schemas()
    page, doc = next((p, d) for p, d in oooi_manifests() if d["kind"] == "Infra")
    body = {"spec": {**doc["spec"], "netwrokConfig": {}}}
    schema = strict(schemas[(doc["apiVersion"], "Infra")])
    errors = list(jsonschema.Draft7Validator({**schema, "properties": {"spec": schema["properties"]["spec"]}}).iter_errors(body))
    assert any("netwrokConfig" in e.message for e in errors), [e.message for e in errors]


def test_quickstart_manifests_render():
    exe = controller_bin()
    docs = [doc for page, doc in oooi_manifests() if page == "quickstart.md"]
    assert len(docs) >= 2, docs
    with tempfile.TemporaryDirectory() as tmp:
        manifest = Path(tmp) / "quickstart.yaml"
        manifest.write_text(yaml.safe_dump_all(docs, sort_keys=False))
        # The images the chart hands the controller (images.registry set as
        # in the Quickstart's helm install); the Infra names none.
        images = {name: f"registry.example.com/oooi/oooi-{name}:0.1.0" for name in ("dhcp", "dns", "proxy")}
        flags = [f"--{name}-image={ref}" for name, ref in images.items()]
        proc = subprocess.run([exe, "render", "-f", str(manifest), *flags], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, f"`oooi-controller render` refused the Quickstart manifests:\n{proc.stderr}"
    rendered = [d for d in yaml.safe_load_all(proc.stdout) if isinstance(d, dict)]
    deployed = sorted(
        c["image"] for d in rendered if d.get("kind") == "Deployment" for c in d["spec"]["template"]["spec"]["containers"]
    )
    assert deployed == sorted(images.values()), deployed
    rendered_kinds = {d.get("kind") for d in rendered}
    for kind in ("Deployment", "ConfigMap", "DHCPServer", "DNSServer", "ProxyServer"):
        assert kind in rendered_kinds, f"render printed no {kind}: {sorted(k for k in rendered_kinds if k)}"
    # The attachment's names reach the plan.
    assert "api.c1.example.com" in proc.stdout, "render's output does not mention api.c1.example.com"
    # What the Quickstart makes the controller apply is valid: Kubernetes kinds
    # against the 1.35 schemas, derived oooi kinds against the shipped CRDs.
    # (render also prints report documents of its own, in no CRD.)
    schemas = crd_schemas()
    for obj in rendered:
        api = str(obj.get("apiVersion", ""))
        if api.startswith(GROUP + "/"):
            if (api, obj["kind"]) in schemas:
                schema = strict(schemas[(api, obj["kind"])])
                body = {k: v for k, v in obj.items() if k in ("spec",)}
                schema = {**schema, "properties": {"spec": schema["properties"]["spec"]}}
                errors = list(jsonschema.Draft7Validator(schema).iter_errors(body))
                assert not errors, f"render's {obj['kind']} {obj['metadata']['name']}: {[e.message for e in errors]}"
            continue
        try:
            kubernetes_validate.validate(obj, KUBE_VERSION, strict=True)
        except kubernetes_validate.ValidationError as e:
            raise AssertionError(f"render's {obj['kind']} {obj['metadata']['name']}: {'/'.join(map(str, e.path))}: {e.message}") from None


def test_documented_controller_commands_exist():
    exe = controller_bin()
    help_text = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=30, check=True).stdout
    commands = set()
    for page in sorted(DOCS.glob("*.md")):
        commands |= set(re.findall(r"oooi-controller (?:-- )?([a-z]+)\b", page.read_text()))
    # Words after the name that are not subcommands in prose ("oooi-controller is …").
    commands -= {"is", "the", "and", "run's", "pods", "metrics", "image"}
    assert {"run", "render", "crds"} <= commands, commands
    subcommands = set(re.findall(r"^\s{2}([a-z]+)\s", help_text.split("Commands:", 1)[1], re.M))
    unknown = commands - subcommands
    assert not unknown, f"the docs mention `oooi-controller {sorted(unknown)}`, which --help does not list:\n{help_text}"


def test_documented_run_flags_exist():
    exe = controller_bin()
    help_text = subprocess.run([exe, "run", "--help"], capture_output=True, text=True, timeout=30, check=True).stdout
    text = (DOCS / "installation.md").read_text()
    section = text.split("\n## The controller's command line\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `--")]
    assert len(rows) >= 8, rows
    for row in rows:
        flag, env, default = (c.strip().strip("`") for c in row.strip("|").split("|")[:3])
        m = re.search(rf"^\s+{re.escape(flag)}[ =<\n]", help_text, re.M)
        assert m, f"`run {flag}` is documented but not in `oooi-controller run --help`"
        block = help_text[m.end():].split("\n      --", 1)[0]
        assert f"[env: {env}=" in block, f"{flag}: the docs say env {env}:\n{block}"
        if f"[default: " in block:
            assert f"[default: {default}]" in block, f"{flag}: the docs say default {default}:\n{block}"


RBAC_BEGIN = "<!-- generated: oooi-controller rbac --markdown -->"
RBAC_END = "<!-- end generated -->"


def test_documented_rbac_is_what_the_controller_prints():
    # The RBAC table of installation.md lists every rule of every install
    # mode, as `oooi-controller rbac --markdown` prints it from the rules the
    # code uses; refresh it with that command when a rule changes.
    text = (DOCS / "installation.md").read_text()
    assert text.count(RBAC_BEGIN) == 1 and text.count(RBAC_END) == 1, "installation.md has no single generated RBAC table"
    documented = text.split(RBAC_BEGIN, 1)[1].split(RBAC_END, 1)[0].strip("\n")
    proc = subprocess.run([controller_bin(), "rbac", "--markdown"], capture_output=True, text=True, timeout=30, check=True)
    assert documented == proc.stdout.strip("\n"), f"docs/installation.md's RBAC table differs from `oooi-controller rbac --markdown`:\n{proc.stdout}"
    # The table names the verbs that matter to a review.
    assert "securitycontextconstraints (nonroot-v2, oooi-address-agent, restricted-v2), OpenShift only | use |" in documented
    for verb in ("bind", "escalate", "impersonate"):
        assert f" {verb}" not in documented, verb
