"""Runs the shell commands of the install docs as written.

The pages a newcomer follows (README.md, docs/prerequisites.md,
docs/quickstart.md, docs/installation.md, docs/examples.md) hold ```sh blocks.
Every block runs here, in page order, from the repository root, unless an
HTML comment on the line before it says why it cannot:

- `<!-- docs-test: cluster -->`: it needs a Kubernetes API server. Its
  `helm install` and `helm upgrade` commands still go through Helm's engine
  (helm-python-sdk) with the archive, `-f` files and `--set` values they
  name, so a values file or key the chart refuses fails here.
- `<!-- docs-test: lab -->`: the local lab (root, network namespaces, minutes;
  lab/tests/vlan_lab.rs runs it).
- `<!-- docs-test: suite -->`: the whole test suite, which runs this test.
- `<!-- docs-test: opm -->`: it needs `opm`, which neither Debian nor PyPI ships.
- `<!-- docs-test: mirror -->`: it needs `oc-mirror` and a mirror registry.

Other markers prepare a block: `<!-- docs-test: file NAME -->` before a YAML
block writes it to NAME (a manifest the page tells the reader to save), and
`<!-- docs-test: substitute FROM TO -->` runs a block with FROM replaced.
A block with `kubectl`, `helm` or `oc` and no `cluster` marker is refused, as
is an unknown marker.

The blocks run at the repository root as a reader would, but in a mount
namespace of their own with an overlay over the checkout: what they write
(dist/, my-values.yaml, rendered/…) lands in the overlay's upper directory,
a temporary one, and the checkout stays as it was. `target/` is the real
build directory mounted through, so the blocks reuse what the suite built
(the images at this commit are not built again: `tools/dev images` keeps an
image whose inputs are unchanged).

The one change to every command: `registry.example.com` is a
`docker-registry` (Debian) on 127.0.0.1, which skopeo and podman reach over
plain HTTP through a registries.conf of this test (podman through
$CONTAINERS_REGISTRIES_CONF, skopeo through a shim on PATH adding
`--registries-conf`). Afterwards the pushed
images are inspected: their digests equal the ones `skopeo --digestfile`
recorded, they are linux/amd64 and carry both tags, and the values file the
docs write installs them by digest.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import yaml

from test_chart import APP_VERSION, ROOT, merged

PAGES = ["docs/prerequisites.md", "docs/quickstart.md", "docs/installation.md", "docs/examples.md", "README.md"]
MARKER = re.compile(r"^<!-- docs-test: (\w+)(?: (.*?))? -->$")
FENCE = re.compile(r"^```(\w*)$")
SKIP = {
    "cluster": "needs a Kubernetes API server",
    "lab": "the local lab (root, network namespaces; lab/tests/vlan_lab.rs)",
    "suite": "the whole test suite, which runs this test",
    "opm": "needs opm (the Operator Package Manager), which neither Debian nor PyPI ships",
    "mirror": "needs oc-mirror and a cluster's mirror registry, which this machine has neither of",
}
PREPARE = {"file", "substitute"}
NEEDS_CLUSTER = re.compile(r"(^|[;&|(]\s*|\s)(kubectl|helm|oc)\s", re.M)
REGISTRY_HOST = "registry.example.com"
IMAGES = ["controller", "dns", "dhcp", "proxy"]


def blocks(page):
    """(line, lang, body, marker) of every top-level fenced block of `page`;
    marker is (kind, argument) or None."""
    lines = (ROOT / page).read_text().splitlines()
    out = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        start = i
        j = i + 1
        while j < len(lines) and lines[j] != "```":
            j += 1
        body = "\n".join(lines[i + 1 : j]) + "\n"
        prev = lines[start - 1] if start > 0 else ""
        mm = MARKER.match(prev)
        marker = (mm.group(1), mm.group(2)) if mm else None
        out.append((start + 1, m.group(1), body, marker))
        i = j + 1
    return out


def shell_blocks():
    return [(page, line, body, marker) for page in PAGES for line, lang, body, marker in blocks(page) if lang in ("sh", "bash", "shell")]


def test_every_shell_block_is_run_or_marked_with_a_reason():
    found = shell_blocks()
    assert len(found) >= 15, f"only {len(found)} shell blocks in {PAGES}"
    problems = []
    for page, line, body, marker in found:
        where = f"{page}:{line}"
        if marker and marker[0] not in SKIP and marker[0] not in PREPARE:
            problems.append(f"{where}: unknown marker {marker[0]!r} (known: {sorted(SKIP) + sorted(PREPARE)})")
        if NEEDS_CLUSTER.search(body) and (not marker or marker[0] != "cluster"):
            problems.append(f"{where}: the block calls kubectl, helm or oc but is not marked <!-- docs-test: cluster -->:\n{body}")
    for page in PAGES:
        for line, lang, body, marker in blocks(page):
            if marker and marker[0] == "file" and lang != "yaml":
                problems.append(f"{page}:{line}: a `file` marker before a {lang or 'plain'} block")
    assert not problems, "\n".join(problems)
    # Each reason is used, and most blocks run.
    kinds = [m[0] if m else "run" for *_, m in found]
    assert {"cluster", "lab", "suite"} <= set(kinds), kinds
    assert kinds.count("run") >= 10, kinds


def test_the_marker_check_refuses_an_unmarked_cluster_block():
    # Guards the check above.
    assert NEEDS_CLUSTER.search("tools/dev package\nhelm install oooi x.tgz\n")
    assert NEEDS_CLUSTER.search("for x in a; do kubectl get $x; done\n")
    assert not NEEDS_CLUSTER.search("tools/dev images --save dist/\n# helmet\n")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Registry:
    """docker-registry on 127.0.0.1, storage in a temporary directory."""

    def __init__(self, tmp):
        exe = shutil.which("docker-registry")
        assert exe, "docker-registry is not installed: `tools/dev setup test` installs it (Debian package docker-registry)"
        self.port = free_port()
        self.host = f"127.0.0.1:{self.port}"
        config = Path(tmp) / "registry.yml"
        config.write_text(
            yaml.safe_dump(
                {
                    "version": 0.1,
                    "log": {"level": "warn"},
                    "storage": {"filesystem": {"rootdirectory": str(Path(tmp) / "registry")}},
                    "http": {"addr": self.host},
                }
            )
        )
        self.log = open(Path(tmp) / "registry.log", "w")
        self.proc = subprocess.Popen([exe, "serve", str(config)], stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                assert self.proc.poll() is None, f"docker-registry exited: {(Path(tmp) / 'registry.log').read_text()}"
                time.sleep(0.2)
        raise AssertionError("docker-registry did not listen within 20 s")

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=10)
        self.log.close()


def parse_helm(command, resolve=lambda name: ROOT / name):
    """(verb, release, chart, namespace, values) of a `helm install|upgrade`
    command line, or None for other helm verbs."""
    words = shlex.split(command)
    assert words[0] == "helm", words
    if words[1] not in ("install", "upgrade"):
        return None
    verb, args = words[1], words[2:]
    positional, files, sets, namespace = [], [], [], "default"
    i = 0
    while i < len(args):
        a = args[i]
        if a in ("-n", "--namespace"):
            namespace = args[i + 1]
            i += 2
        elif a in ("-f", "--values"):
            files.append(args[i + 1])
            i += 2
        elif a == "--set":
            sets.append(args[i + 1])
            i += 2
        elif a in ("--create-namespace", "--install", "--atomic", "--wait"):
            i += 1
        elif a.startswith("-"):
            raise AssertionError(f"`{command}`: this test does not know the helm flag {a}")
        else:
            positional.append(a)
            i += 1
    release, chart = positional
    values = {}
    for f in files:
        values = merged(values, yaml.safe_load(resolve(f).read_text()) or {})
    for s in sets:
        path, value = s.split("=", 1)
        node = {}
        cur = node
        keys = path.split(".")
        for k in keys[:-1]:
            cur = cur.setdefault(k, {})
        cur[keys[-1]] = yaml.safe_load(value)
        values = merged(values, node)
    return verb, release, chart, namespace, values


def helm_commands(body):
    """The helm command lines of a block, continuation lines joined."""
    joined = re.sub(r"\s*\\\n\s*", " ", body)
    return [line.strip() for line in joined.splitlines() if line.strip().startswith("helm ")]


def render_with_helm(command, resolve):
    import helm_python as helm

    parsed = parse_helm(command, resolve)
    if parsed is None:
        return None
    verb, release, chart, namespace, values = parsed
    out = helm.Chart.load(str(resolve(chart))).render(
        values, name=release, namespace=namespace, is_install=verb == "install", is_upgrade=verb == "upgrade"
    )
    objects = []
    for name, text in out.items():
        if not name.endswith("NOTES.txt"):
            objects.extend(d for d in yaml.safe_load_all(text) if d)
    return values, objects


def test_helm_commands_of_the_docs_parse_as_this_test_reads_them():
    cmd = "helm install oooi target/chart/oooi-0.1.0.tgz -n oooi-system --create-namespace --set images.registry=r.example/o"
    verb, release, chart, ns, values = parse_helm(cmd)
    assert (verb, release, chart, ns, values) == ("install", "oooi", "target/chart/oooi-0.1.0.tgz", "oooi-system", {"images": {"registry": "r.example/o"}})
    assert parse_helm("helm test oooi -n oooi-system") is None
    body = "helm install oooi x.tgz \\\n  --namespace n -f v.yaml\nkubectl get pods\n"
    assert helm_commands(body) == ["helm install oooi x.tgz --namespace n -f v.yaml"]


class Overlay:
    """The checkout as the blocks see it: ROOT itself, overlaid in a mount
    namespace of each block's own, with every write kept in `upper`."""

    def __init__(self, tmp, target):
        self.upper = Path(tmp) / "upper"
        self.work = Path(tmp) / "work"
        self.upper.mkdir()
        self.work.mkdir()
        self.target = target
        link = ROOT / "target"
        # The docs name target/...: the real build directory, mounted over
        # the overlay's (writes to it are the build's, not the checkout's),
        # or, with CARGO_TARGET_DIR elsewhere, a link to it in the overlay.
        self.bind_target = link.is_dir() and not link.is_symlink() and link.resolve() == target
        if not link.exists():
            (self.upper / "target").symlink_to(target)
        else:
            assert link.resolve() == target, f"{link} is not CARGO_TARGET_DIR ({target}): the docs' target/ paths would miss the build"

    def write(self, name, text):
        path = self.upper / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    def path(self, name):
        """Where `name` (relative to the repository root) is as the blocks
        see it: written by them (in the overlay), or the checkout's."""
        written = self.upper / name
        return written if os.path.lexists(written) else ROOT / name

    def run(self, body, env, timeout):
        mounts = f"mount -t overlay oooi-docs -o lowerdir={shlex.quote(str(ROOT))},upperdir={shlex.quote(str(self.upper))},workdir={shlex.quote(str(self.work))} {shlex.quote(str(ROOT))}"
        if self.bind_target:
            mounts += f" && mount --bind {shlex.quote(str(self.target))} {shlex.quote(str(ROOT / 'target'))}"
        script = f'{mounts} && cd {shlex.quote(str(ROOT))} && exec bash -euo pipefail -c "$1"'
        return subprocess.run(
            ["unshare", "--mount", "--propagation", "private", "bash", "-euo", "pipefail", "-c", script, "docs-block", body],
            cwd="/",
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )


def run_block(overlay, where, body, env, subst):
    for old, new in subst:
        body = body.replace(old, new)
    proc = overlay.run(body, env, timeout=3600)
    assert proc.returncode == 0, f"{where} failed (exit {proc.returncode}):\n{body}\n--- stdout\n{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-6000:]}"
    return proc


def test_a_block_writes_into_the_overlay_not_the_checkout():
    tmp = tempfile.mkdtemp(prefix="oooi-docs-overlay-")
    try:
        target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target")).resolve()
        overlay = Overlay(tmp, target)
        name = f"docs-overlay-probe-{os.getpid()}"
        proc = overlay.run(f"test -f README.md && echo written > {name} && cat {name}", dict(os.environ), timeout=60)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout == "written\n"
        assert not (ROOT / name).exists(), "the block wrote into the checkout"
        assert overlay.path(name).read_text() == "written\n"
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def skopeo_inspect(ref, env, raw=False):
    args = ["skopeo", "inspect", "--tls-verify=false"] + (["--raw"] if raw else []) + [ref]
    proc = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"skopeo inspect {ref}: {proc.stderr}"
    return proc.stdout


def test_docs_shell_blocks_run_as_written():
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target")).resolve()
    tmp = tempfile.mkdtemp(prefix="oooi-docs-commands-")
    overlay = Overlay(tmp, target)
    registry = Registry(tmp)
    try:
        conf = Path(tmp) / "registries.conf"
        conf.write_text(f'[[registry]]\nlocation = "{registry.host}"\ninsecure = true\n')
        # podman reads $CONTAINERS_REGISTRIES_CONF; skopeo 1.9 only its
        # --registries-conf flag, which a shim first on PATH adds.
        shim = Path(tmp) / "bin"
        shim.mkdir()
        real = shutil.which("skopeo")
        assert real, "skopeo is not installed: `tools/dev setup test` installs it"
        (shim / "skopeo").write_text(f'#!/bin/sh\nexec {real} --registries-conf {conf} "$@"\n')
        (shim / "skopeo").chmod(0o755)
        env = {**os.environ, "CONTAINERS_REGISTRIES_CONF": str(conf), "PATH": f"{shim}:{os.environ['PATH']}"}
        env.pop("OOOI_FILTER_WASM", None)  # as on a fresh shell: tools/dev builds the filter
        subst = [(REGISTRY_HOST, registry.host)]
        ran, rendered = [], []
        for page in PAGES:
            for line, lang, body, marker in blocks(page):
                where = f"{page}:{line}"
                kind, arg = marker if marker else (None, None)
                if kind == "file":
                    overlay.write(arg, body)
                    continue
                if lang not in ("sh", "bash", "shell"):
                    continue
                if kind == "cluster":
                    for cmd in helm_commands(body):
                        r = render_with_helm(cmd.replace(REGISTRY_HOST, registry.host), overlay.path)
                        if r is not None:
                            rendered.append((where, cmd, *r))
                    continue
                if kind in SKIP:
                    continue
                extra = []
                if kind == "substitute":
                    old, new = arg.split(" ", 1)
                    extra = [(old, new)]
                run_block(overlay, where, body, env, subst + extra)
                ran.append(where)
        assert len(ran) >= 10, ran
        assert len(rendered) >= 3, [r[:2] for r in rendered]

        # What the blocks built and pushed.
        tag = overlay.path("dist/tag").read_text().strip()
        assert re.fullmatch(rf"{re.escape(APP_VERSION)}-g[0-9a-f]{{10}}(-dirty)?", tag), tag
        for name in IMAGES:
            digest = overlay.path(f"dist/oooi-{name}.digest").read_text().strip()
            assert re.fullmatch(r"sha256:[0-9a-f]{64}", digest), digest
            for t in (tag, APP_VERSION):
                info = yaml.safe_load(skopeo_inspect(f"docker://{registry.host}/oooi/oooi-{name}:{t}", env))
                assert info["Digest"] == digest, f"oooi-{name}:{t} is {info['Digest']} in the registry, the digest file says {digest}"
                assert info["Architecture"] == "amd64" and info["Os"] == "linux", info
        # The values file installs every image by that digest.
        installs = [r for r in rendered if " -f my-values.yaml" in r[1]]
        assert installs, [r[1] for r in rendered]
        for where, cmd, values, objects in installs:
            dep = next(o for o in objects if o["kind"] == "Deployment")
            image = dep["spec"]["template"]["spec"]["containers"][0]["image"]
            want = overlay.path("dist/oooi-controller.digest").read_text().strip()
            # The tag part is the chart's appVersion, the revision tag of
            # the same checkout; the digest pins the image.
            assert image == f"{registry.host}/oooi/oooi-controller:{tag}@{want}", f"{where}: {image}"
            env_images = {e["name"]: e["value"] for e in dep["spec"]["template"]["spec"]["containers"][0]["env"] if e["name"].endswith("_IMAGE")}
            for name in ("dhcp", "dns", "proxy"):
                d = overlay.path(f"dist/oooi-{name}.digest").read_text().strip()
                assert env_images[f"OOOI_{name.upper()}_IMAGE"].endswith(f"@{d}"), env_images
        # The upstream-Envoy variant: built from its small context, pushed.
        ctx = target / "images" / "context" / "proxy-upstream"
        files = sorted(p.name for p in ctx.iterdir())
        assert files == ["oooi-addr-agent", "oooi-envoy-gate"], files
        size = sum(p.stat().st_size for p in ctx.iterdir())
        assert size < 32 * 1024 * 1024, f"upstream-Envoy context is {size} bytes"
        skopeo_inspect(f"docker://{registry.host}/oooi/envoy-oooi:v1.40.0", env)
    finally:
        registry.stop()
        shutil.rmtree(tmp, ignore_errors=True)
