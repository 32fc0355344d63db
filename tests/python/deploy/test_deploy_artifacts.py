"""Static checks of the deployment artifacts under deploy/ and of docs/deploy.md.

    tests/python/run_pytest.py tests/python/deploy/test_deploy_artifacts.py

Parses every YAML file in deploy/k8s and deploy/docker, the example config
and the Kubernetes ConfigMap's tensord.toml, the Dockerfile and the systemd
unit, and checks what each must say for tensord to run: GPU requests, probes,
ports, health checks, non-root users, config keys that the daemon knows,
stop timeouts longer than the daemon's shutdown grace; the cluster manifests
(deploy/k8s/cluster: a StatefulSet named by a headless Service, selectors
that agree, flags tensord has, the node name from the pod name, the
single-node Deployment's image, ports, probes and token); and security: every
artifact that listens beyond loopback wires a bearer-token file (a mounted
secret), and none turns on --insecure. Needs Debian's
python3 (3.11: tomllib) and python3-yaml. Fails listing every failure.
"""
import pathlib
import re
import tomllib

import yaml

# The daemon's config keys: its flags, with underscores (server/main.cc,
# ConfigurableFlags() in server/config.cc). The example config documents
# every one of them.
CONFIG_KEYS = {
    "listen", "host_devices", "memory_limit", "gpu_memory_limit", "allow_tf32",
    "log_level",
    "metrics_listen", "shutdown_grace_ms", "port_file",
    "auth_token_file", "tls_cert", "tls_key", "tls_client_ca", "insecure",
    "session_ttl", "max_sessions", "session_max_bytes", "session_max_tensors",
    "max_message_bytes", "max_inline_bytes", "max_tensor_bytes", "blas_threads",
    "node_name", "node_token_file", "peers", "peer_address_pattern",
}
PATH_KEYS = ("port_file", "auth_token_file", "tls_cert", "tls_key",
             "tls_client_ca")
LOG_LEVELS = {"trace", "debug", "info", "warn", "error", "off"}
GRPC_PORT, METRICS_PORT = 50051, 9100
HEALTH_SERVICE = "tensord.v1.TensorService"
DEFAULT_GRACE_MS = 5000

# Remarks from before authentication existed; none may survive.
STALE = re.compile(r"not yet|when tensord gains|no authentication yet|"
                   r"not available yet|a later release|coming release",
                   re.IGNORECASE)

failures: list[str] = []


def check(ok: bool, what: str) -> bool:
    if not ok:
        failures.append(what)
    return ok


def port_of(address: str) -> int | None:
    m = re.fullmatch(r"(?:\[[0-9a-fA-F:.]*\]|[^:\s]*):(\d+)", address or "")
    return int(m.group(1)) if m else None


def is_loopback(address: str) -> bool:
    """As tensord's IsLoopback (server/server.cc)."""
    if address.startswith("unix:"):
        return True
    host = address.rpartition(":")[0]
    return host.startswith("127.") or host in ("localhost", "[::1]", "::1")


def truthy(value) -> bool:
    """How absl parses a bool flag from a TOML value or a variable."""
    return str(value).strip().lower() in ("true", "1", "t", "yes", "y")


def check_config(cfg: dict, where: str, exact: bool) -> None:
    keys = set(cfg)
    if exact:
        check(keys == CONFIG_KEYS,
              f"{where}: keys {sorted(keys)} != documented {sorted(CONFIG_KEYS)}")
    else:
        check(keys <= CONFIG_KEYS,
              f"{where}: unknown keys {sorted(keys - CONFIG_KEYS)}")
    for key in ("listen", "metrics_listen"):
        if key in cfg:
            v = cfg[key]
            check(isinstance(v, str) and (v == "" and key == "metrics_listen"
                                          or port_of(v) is not None),
                  f"{where}: {key} = {v!r} is not host:port")
    if "host_devices" in cfg:
        v = cfg["host_devices"]
        check(isinstance(v, int) and not isinstance(v, bool) and v >= 1,
              f"{where}: host_devices = {v!r} is not an integer >= 1")
    for key in ("memory_limit", "gpu_memory_limit"):
        if key in cfg:
            v = cfg[key]
            check(isinstance(v, str) and re.fullmatch(
                r"|\d+(\.\d+)?\s*([KMGT]i?B|B)?", v) is not None,
                  f"{where}: {key} = {v!r} is not a size like '8GiB' or ''")
    if "log_level" in cfg:
        check(cfg["log_level"] in LOG_LEVELS,
              f"{where}: log_level = {cfg['log_level']!r} not in {sorted(LOG_LEVELS)}")
    if "shutdown_grace_ms" in cfg:
        v = cfg["shutdown_grace_ms"]
        check(isinstance(v, int) and not isinstance(v, bool) and v >= 0,
              f"{where}: shutdown_grace_ms = {v!r} is not an integer >= 0")
    for key in PATH_KEYS:
        if key in cfg:
            check(isinstance(cfg[key], str),
                  f"{where}: {key} = {cfg[key]!r} is not a path string")
    if "insecure" in cfg:
        check(isinstance(cfg["insecure"], bool),
              f"{where}: insecure = {cfg['insecure']!r} is not a boolean")
        check(cfg["insecure"] is not True,
              f"{where}: insecure = true serves the network unauthenticated")
    check(bool(cfg.get("tls_cert")) == bool(cfg.get("tls_key")),
          f"{where}: tls_cert and tls_key go together")
    check(not cfg.get("tls_client_ca") or bool(cfg.get("tls_cert")),
          f"{where}: tls_client_ca needs tls_cert and tls_key")
    listen = cfg.get("listen", "127.0.0.1:50051")
    if isinstance(listen, str) and not is_loopback(listen):
        check(bool(cfg.get("auth_token_file") or cfg.get("tls_cert")),
              f"{where}: listen = {listen!r} is not loopback and there is "
              "neither auth_token_file nor tls_cert: tensord refuses to start")


def daemon_config_keys(root: pathlib.Path) -> set[str] | None:
    """The keys tensord itself accepts (kFlags in server/config.cc), or None
    where that list cannot be found."""
    path = root / "server/config.cc"
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return None
    m = re.search(r"kFlags\s*=\s*\{(.*?)\}", text, re.DOTALL)
    return set(re.findall(r'"(\w+)"', m.group(1))) if m else None


def load_yaml_files(root: pathlib.Path) -> dict[pathlib.Path, list]:
    docs = {}
    for d in ("deploy/k8s", "deploy/k8s/cluster", "deploy/docker"):
        files = sorted((root / d).glob("*.y*ml"))
        check(bool(files), f"{d}: no YAML files")
        for path in files:
            try:
                with open(path, encoding="utf-8") as f:
                    docs[path] = [doc for doc in yaml.safe_load_all(f) if doc]
            except yaml.YAMLError as e:
                check(False, f"{path.relative_to(root)}: {e}")
                continue
            check(bool(docs[path]), f"{path.relative_to(root)}: empty")
    return docs


def check_k8s(root: pathlib.Path, docs: dict[pathlib.Path, list]) -> None:
    by_kind: dict[str, list[dict]] = {}
    for path, items in docs.items():
        if path.parent.name != "k8s":
            continue
        for doc in items:
            where = path.relative_to(root)
            if not check(isinstance(doc, dict) and "kind" in doc
                         and "apiVersion" in doc,
                         f"{where}: a document without kind/apiVersion"):
                continue
            by_kind.setdefault(doc["kind"], []).append(doc)

    kust = by_kind.get("Kustomization", [])
    for k in kust:
        for res in k.get("resources", []):
            check((root / "deploy/k8s" / res).is_file(),
                  f"kustomization.yaml: resource {res} does not exist")

    # ConfigMap: tensord.toml parses and holds only known keys.
    grace_ms = DEFAULT_GRACE_MS
    config_maps = {c["metadata"]["name"]: c for c in by_kind.get("ConfigMap", [])}
    for name, cm in config_maps.items():
        text = (cm.get("data") or {}).get("tensord.toml")
        if not check(text is not None, f"ConfigMap {name}: no tensord.toml"):
            continue
        try:
            cfg = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            check(False, f"ConfigMap {name}: tensord.toml: {e}")
            continue
        check_config(cfg, f"ConfigMap {name} tensord.toml", exact=False)
        grace_ms = cfg.get("shutdown_grace_ms", grace_ms)

    deployments = by_kind.get("Deployment", [])
    if not check(len(deployments) == 1, "deploy/k8s: expected one Deployment"):
        return
    dep = deployments[0]
    spec = dep["spec"]
    pod = spec["template"]["spec"]
    labels = spec["template"]["metadata"].get("labels", {})
    check(spec.get("replicas", 1) == 1,
          "Deployment: tensors live in the pod: replicas must be 1")
    check(spec.get("strategy", {}).get("type") == "Recreate",
          "Deployment: strategy must be Recreate (a GPU is not free for a surge)")
    check(spec["selector"]["matchLabels"].items() <= labels.items(),
          "Deployment: selector does not match the pod labels")
    containers = pod.get("containers", [])
    if not check(len(containers) == 1, "Deployment: expected one container"):
        return
    c = containers[0]
    check(bool(c.get("image")), "Deployment: container has no image")

    ports = {p.get("name"): p.get("containerPort") for p in c.get("ports", [])}
    check(ports.get("grpc") == GRPC_PORT, f"Deployment: no port grpc={GRPC_PORT}")
    check(ports.get("metrics") == METRICS_PORT,
          f"Deployment: no port metrics={METRICS_PORT}")
    env = {e["name"]: e.get("value") for e in c.get("env", [])}
    check(port_of(env.get("TENSORD_LISTEN", "")) == GRPC_PORT,
          "Deployment: TENSORD_LISTEN does not listen on the grpc port")
    check(port_of(env.get("TENSORD_METRICS_LISTEN", "")) == METRICS_PORT,
          "Deployment: TENSORD_METRICS_LISTEN does not listen on the metrics port")

    res = c.get("resources", {})
    for part in ("requests", "limits"):
        gpus = res.get(part, {}).get("nvidia.com/gpu")
        check(gpus is not None and int(gpus) >= 1,
              f"Deployment: resources.{part} has no nvidia.com/gpu")
        for r in ("cpu", "memory"):
            check(r in res.get(part, {}), f"Deployment: resources.{part}.{r} missing")

    for probe in ("livenessProbe", "readinessProbe"):
        p = c.get(probe) or {}
        check(p.get("grpc", {}).get("port") == GRPC_PORT,
              f"Deployment: {probe} is not a gRPC probe on {GRPC_PORT}")
    check((c.get("readinessProbe") or {}).get("grpc", {}).get("service")
          == HEALTH_SERVICE,
          f"Deployment: readinessProbe should ask for service {HEALTH_SERVICE}")

    psc, csc = pod.get("securityContext", {}), c.get("securityContext", {})
    check(psc.get("runAsNonRoot") is True or csc.get("runAsNonRoot") is True,
          "Deployment: runAsNonRoot is not set")
    check(psc.get("runAsUser", csc.get("runAsUser", 0)) != 0,
          "Deployment: runs as uid 0")
    check(csc.get("readOnlyRootFilesystem") is True,
          "Deployment: readOnlyRootFilesystem is not set")
    check(csc.get("allowPrivilegeEscalation") is False,
          "Deployment: allowPrivilegeEscalation is not false")

    ann = spec["template"]["metadata"].get("annotations", {})
    check(ann.get("prometheus.io/scrape") == "true"
          and ann.get("prometheus.io/port") == str(METRICS_PORT),
          "Deployment: Prometheus scrape annotations missing or wrong port")

    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    mounts = {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}
    cfg_vol = volumes.get(mounts.get("/etc/tensord", ""), {})
    check(cfg_vol.get("configMap", {}).get("name") in config_maps,
          "Deployment: /etc/tensord is not the ConfigMap")

    # Authentication: the pod listens on 0.0.0.0, so it must name a token
    # file that is a key of a mounted Secret.
    secrets = {s["metadata"]["name"]: s for s in by_kind.get("Secret", [])}
    token = env.get("TENSORD_AUTH_TOKEN_FILE") or ""
    if is_loopback(env.get("TENSORD_LISTEN", "127.0.0.1:50051")):
        pass
    elif check(token.startswith("/"),
               "Deployment: listens beyond loopback without "
               "TENSORD_AUTH_TOKEN_FILE (tensord refuses to start)"):
        mount = max((m for m in c.get("volumeMounts", [])
                     if token.startswith(m["mountPath"].rstrip("/") + "/")),
                    key=lambda m: len(m["mountPath"]), default=None)
        vol = volumes.get(mount["name"], {}) if mount else {}
        secret = vol.get("secret") or {}
        if check(bool(secret.get("secretName")),
                 f"Deployment: TENSORD_AUTH_TOKEN_FILE {token} is not in a "
                 "mounted Secret volume"):
            rel = token[len(mount["mountPath"].rstrip("/")) + 1:]
            items = {i["path"]: i["key"] for i in secret.get("items", [])}
            key = items.get(rel, rel) if items else rel
            name = secret["secretName"]
            check(mount.get("readOnly") is True,
                  "Deployment: the token volume is not mounted readOnly")
            if check(name in secrets,
                     f"Deployment: Secret {name} is not documented in deploy/k8s"):
                check(key in (secrets[name].get("stringData")
                              or secrets[name].get("data") or {}),
                      f"Secret {name}: no key {key!r} (TENSORD_AUTH_TOKEN_FILE)")
            mode = secret.get("defaultMode", 0o644)
            check(mode & 0o004 == 0 and (mode & 0o040 or psc.get("runAsUser") == 0),
                  f"Deployment: token volume defaultMode {oct(mode)} should be "
                  "group-readable (fsGroup) and not world-readable")
    check(not truthy(env.get("TENSORD_INSECURE", "")),
          "Deployment: TENSORD_INSECURE is set")
    check("--insecure" not in " ".join(map(str, c.get("args", []) + c.get("command", []))),
          "Deployment: the container passes --insecure")
    check(not env.get("TENSORD_TLS_CERT"),
          "Deployment: with TLS the native gRPC probes (plaintext) fail; "
          "use exec probes with tensorctl --tls-ca")
    # A placeholder Secret in the applied set would overwrite the real token.
    for k in kust:
        for res in k.get("resources", []):
            path = root / "deploy/k8s" / res
            if path in docs and any(d.get("kind") == "Secret" for d in docs[path]):
                check(False, f"kustomization.yaml: {res} holds a placeholder "
                      "Secret; create the real one with kubectl instead")

    tgp = pod.get("terminationGracePeriodSeconds", 30)
    check(tgp * 1000 > grace_ms,
          f"Deployment: terminationGracePeriodSeconds {tgp}s <= shutdown grace {grace_ms} ms")

    services = by_kind.get("Service", [])
    if not check(len(services) == 1, "deploy/k8s: expected one Service"):
        return
    svc = services[0]["spec"]
    check(svc.get("selector", {}).items() <= labels.items() and svc.get("selector"),
          "Service: selector does not select the Deployment's pods")
    svc_ports = {p.get("port"): p for p in svc.get("ports", [])}
    for port, name in ((GRPC_PORT, "grpc"), (METRICS_PORT, "metrics")):
        p = svc_ports.get(port)
        if check(p is not None, f"Service: no port {port}"):
            target = p.get("targetPort", port)
            check(target in (name, ports.get(name)),
                  f"Service: port {port} targets {target!r}, not the {name} port")

    for s in by_kind.get("Secret", []):
        check("token" in (s.get("stringData") or s.get("data") or {}),
              "Secret: no token key")


# --- deploy/k8s/cluster: many nodes as one (issue 13) ---------------------------

CLUSTER_DIR = "deploy/k8s/cluster"
NODE_NAME_VALUE = "$(POD_NAME)"


def daemon_flags(root: pathlib.Path) -> set[str] | None:
    """tensord's own flags, with underscores: the ABSL_FLAG names in
    server/ (what `tensord --help` lists), or None where none are found."""
    names = set()
    for path in sorted((root / "server").rglob("*.cc")):
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        names.update(re.findall(r"\bABSL_FLAG\(\s*[\w:<>]+\s*,\s*(\w+)\s*,", text))
    return names or None


def flag_args(words: list) -> dict[str, str | None]:
    """{flag name with underscores: value} of `--name=value` / `--name value`
    words, as absl reads them (a bare `--name` takes the next word when that
    is not a flag itself)."""
    out: dict[str, str | None] = {}
    words = [str(w) for w in words]
    for i, w in enumerate(words):
        if not w.startswith("--"):
            continue
        name, eq, value = w[2:].partition("=")
        if not eq:
            nxt = words[i + 1] if i + 1 < len(words) else None
            value = nxt if nxt is not None and not nxt.startswith("-") else None
        out[name.replace("-", "_")] = value
    return out


def k8s_docs_in(docs: dict[pathlib.Path, list], d: pathlib.Path,
                root: pathlib.Path) -> dict[str, list[dict]]:
    by_kind: dict[str, list[dict]] = {}
    for path, items in docs.items():
        if path.parent != d:
            continue
        for doc in items:
            if check(isinstance(doc, dict) and "kind" in doc and "apiVersion" in doc,
                     f"{path.relative_to(root)}: a document without kind/apiVersion"):
                by_kind.setdefault(doc["kind"], []).append(doc)
    return by_kind


def selected(selector: dict | None, labels: dict) -> bool:
    """Whether a non-empty equality selector selects pods with `labels`."""
    return bool(selector) and selector.items() <= labels.items()


def token_secret(c: dict, pod: dict, token: str):
    """(mount, secret volume source) holding the file `token`, or (None, {})."""
    mount = max((m for m in c.get("volumeMounts", [])
                 if token.startswith(m["mountPath"].rstrip("/") + "/")),
                key=lambda m: len(m["mountPath"]), default=None)
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    vol = volumes.get(mount["name"], {}) if mount else {}
    return mount, vol.get("secret") or {}


def check_k8s_cluster(root: pathlib.Path, docs: dict[pathlib.Path, list]) -> None:
    d = root / CLUSTER_DIR
    if not check(d.is_dir(), f"{CLUSTER_DIR}: missing (the StatefulSet of issue 13)"):
        return
    cl = k8s_docs_in(docs, d, root)
    single = k8s_docs_in({p: v for p, v in docs.items()
                          if p.parent == root / "deploy/k8s"},
                         root / "deploy/k8s", root)
    W = CLUSTER_DIR

    # kustomization.yaml lists every manifest of the directory, and only
    # files that exist, and no placeholder Secret.
    kust = cl.get("Kustomization", [])
    if check(len(kust) == 1, f"{W}: expected one kustomization.yaml"):
        listed = [str(r) for r in kust[0].get("resources", [])]
        files = sorted(p.name for p in d.glob("*.y*ml")
                       if p.name not in ("kustomization.yaml", "kustomization.yml"))
        for name in files:
            check(name in listed, f"{W}/kustomization.yaml: does not list {name} "
                  "(kubectl apply -k would leave it out)")
        for res in listed:
            path = d / res
            if check(path.is_file(), f"{W}/kustomization.yaml: resource {res} "
                     "does not exist"):
                check(not any(doc.get("kind") == "Secret" for doc in docs.get(path, [])),
                      f"{W}/kustomization.yaml: {res} holds a placeholder Secret; "
                      "create the real one with kubectl instead")

    sets = cl.get("StatefulSet", [])
    if not check(len(sets) == 1, f"{W}: expected one StatefulSet"):
        return
    sts = sets[0]
    name = sts["metadata"].get("name")
    check(name == "tensord", f"{W}: StatefulSet is named {name!r}, not 'tensord' "
          "(the pods are tensord-0..N-1)")
    spec = sts.get("spec", {})
    replicas = spec.get("replicas", 1)
    check(isinstance(replicas, int) and not isinstance(replicas, bool)
          and replicas >= 2,
          f"{W}: StatefulSet replicas = {replicas!r}; a cluster example needs >= 2")
    tmpl = spec.get("template", {})
    pod = tmpl.get("spec", {})
    labels = (tmpl.get("metadata") or {}).get("labels") or {}
    containers = pod.get("containers", [])
    if not check(len(containers) == 1, f"{W}: StatefulSet: expected one container"):
        return
    c = containers[0]
    ports = {p.get("name"): p.get("containerPort") for p in c.get("ports", [])}
    env_list = c.get("env", [])
    env = {e["name"]: e.get("value") for e in env_list}

    # The same conventions as the single-node Deployment.
    deps = single.get("Deployment", [])
    dep_pod, dep_c, dep_labels, dep_meta = {}, {}, {}, {}
    if check(len(deps) == 1, "deploy/k8s: expected one Deployment to compare "
             "the cluster with"):
        dep_meta = deps[0]["spec"]["template"]["metadata"]
        dep_pod = deps[0]["spec"]["template"]["spec"]
        dep_labels = dep_meta.get("labels", {})
        dep_cs = dep_pod.get("containers", [])
        dep_c = dep_cs[0] if dep_cs else {}
    check(dep_labels.items() <= labels.items(),
          f"{W}: StatefulSet pod labels {labels} lack the Deployment's {dep_labels}")
    check(c.get("image") == dep_c.get("image"),
          f"{W}: StatefulSet image {c.get('image')!r} is not the Deployment's "
          f"{dep_c.get('image')!r}")
    check(ports.get("grpc") == GRPC_PORT and ports.get("metrics") == METRICS_PORT,
          f"{W}: StatefulSet ports {ports} are not grpc={GRPC_PORT}, "
          f"metrics={METRICS_PORT}")
    dep_ports = {p.get("name"): p.get("containerPort") for p in dep_c.get("ports", [])}
    check(ports == dep_ports,
          f"{W}: StatefulSet ports {ports} differ from the Deployment's {dep_ports}")
    check(port_of(env.get("TENSORD_LISTEN", "")) == GRPC_PORT,
          f"{W}: TENSORD_LISTEN does not listen on the grpc port {GRPC_PORT}")
    check(port_of(env.get("TENSORD_METRICS_LISTEN", "")) == METRICS_PORT,
          f"{W}: TENSORD_METRICS_LISTEN does not listen on the metrics port")
    for what, mine, theirs in (
            ("pod securityContext", pod.get("securityContext"),
             dep_pod.get("securityContext")),
            ("container securityContext", c.get("securityContext"),
             dep_c.get("securityContext")),
            ("tolerations", pod.get("tolerations"), dep_pod.get("tolerations")),
            ("automountServiceAccountToken", pod.get("automountServiceAccountToken"),
             dep_pod.get("automountServiceAccountToken")),
            ("Prometheus annotations", (tmpl.get("metadata") or {}).get("annotations"),
             dep_meta.get("annotations"))):
        check(mine == theirs,
              f"{W}: StatefulSet {what} {mine!r} differs from the Deployment's {theirs!r}")

    # Selectors: the StatefulSet's, both Services' and the PDB's select
    # these pods, and none the single-node Deployment's.
    sel = (spec.get("selector") or {}).get("matchLabels")
    check(selected(sel, labels),
          f"{W}: StatefulSet selector {sel} does not match its pod labels {labels}")
    services = {s["metadata"]["name"]: s for s in cl.get("Service", [])}
    for sname, s in services.items():
        ssel = (s.get("spec") or {}).get("selector")
        check(selected(ssel, labels),
              f"{W}: Service {sname} selector {ssel} does not select the "
              f"StatefulSet's pods {labels}")
    pdbs = cl.get("PodDisruptionBudget", [])
    if check(len(pdbs) == 1, f"{W}: expected one PodDisruptionBudget"):
        pdb = pdbs[0]
        check(pdb.get("apiVersion") == "policy/v1",
              f"{W}: PodDisruptionBudget apiVersion {pdb.get('apiVersion')} is not policy/v1")
        psel = ((pdb.get("spec") or {}).get("selector") or {}).get("matchLabels")
        check(selected(psel, labels),
              f"{W}: PodDisruptionBudget selector {psel} does not select the "
              f"StatefulSet's pods {labels}")
        pspec = pdb.get("spec") or {}
        check(("maxUnavailable" in pspec) != ("minAvailable" in pspec),
              f"{W}: PodDisruptionBudget needs one of maxUnavailable/minAvailable")
    if dep_labels:
        for what, s in ([("StatefulSet", sel)]
                        + [(f"Service {n}", (v.get("spec") or {}).get("selector"))
                           for n, v in services.items()]
                        + [("PodDisruptionBudget",
                            ((p.get("spec") or {}).get("selector") or {}).get("matchLabels"))
                           for p in pdbs]):
            check(not selected(s, dep_labels),
                  f"{W}: {what} selector {s} also selects the single-node "
                  f"Deployment's pods {dep_labels}")

    # Discovery: serviceName is a headless Service; clients have a ClusterIP.
    svc_name = spec.get("serviceName")
    headless = services.get(svc_name)
    if check(headless is not None,
             f"{W}: StatefulSet serviceName {svc_name!r} is not a Service here "
             "(the per-pod DNS names hang off it)"):
        hspec = headless.get("spec") or {}
        check(hspec.get("clusterIP") == "None",
              f"{W}: Service {svc_name} (serviceName) is not headless: "
              f"clusterIP is {hspec.get('clusterIP')!r}, not None")
        hports = {p.get("port"): p for p in hspec.get("ports", [])}
        p = hports.get(GRPC_PORT)
        check(p is not None and p.get("targetPort", GRPC_PORT) in ("grpc", GRPC_PORT),
              f"{W}: headless Service {svc_name} has no port {GRPC_PORT} to the grpc port")
    clients = [n for n, s in services.items()
               if (s.get("spec") or {}).get("clusterIP") != "None"
               and (s.get("spec") or {}).get("type", "ClusterIP") == "ClusterIP"]
    if check(len(clients) == 1, f"{W}: expected one ClusterIP Service for "
             f"clients, found {clients}"):
        cports = {p.get("port"): p for p in services[clients[0]]["spec"].get("ports", [])}
        for port, pname in ((GRPC_PORT, "grpc"), (METRICS_PORT, "metrics")):
            p = cports.get(port)
            if check(p is not None, f"{W}: Service {clients[0]}: no port {port}"):
                target = p.get("targetPort", port)
                check(target in (pname, ports.get(pname)),
                      f"{W}: Service {clients[0]}: port {port} targets {target!r}, "
                      f"not the {pname} port")

    # The command line: only flags tensord has; the node name is the pod
    # name through the downward API.
    words = list(c.get("command", [])) + list(c.get("args", []))
    given = flag_args(words)
    known = daemon_flags(root)
    if check(known is not None, f"{W}: no ABSL_FLAG found under server/ to check "
             "the container's flags against"):
        for flag in given:
            check(flag in known, f"{W}: the container passes --{flag.replace('_', '-')}, "
                  "which is not a tensord flag (server/*.cc ABSL_FLAG)")
    check(given.get("node_name") == NODE_NAME_VALUE,
          f"{W}: the container does not pass --node-name={NODE_NAME_VALUE} "
          f"(its args: {c.get('args')})")
    pod_name = next((e for e in env_list if e["name"] == "POD_NAME"), {})
    field = ((pod_name.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
    check(field == "metadata.name",
          f"{W}: env POD_NAME does not come from the downward API's metadata.name "
          f"(fieldRef.fieldPath is {field!r})")
    for word in words:
        for var in re.findall(r"(?<!\$)\$\((\w+)\)", str(word)):
            check(var in env, f"{W}: {word!r} names $({var}), which is not in the "
                  "container's env (Kubernetes would pass it literally)")

    # GPUs and resources.
    res = c.get("resources", {})
    gpus = [res.get(part, {}).get("nvidia.com/gpu") for part in ("requests", "limits")]
    check(all(g is not None and int(g) >= 1 for g in gpus) and gpus[0] == gpus[1],
          f"{W}: nvidia.com/gpu requests/limits {gpus} are not the same count >= 1")
    for part in ("requests", "limits"):
        for r in ("cpu", "memory"):
            check(r in res.get(part, {}), f"{W}: resources.{part}.{r} missing")

    # Probes: Kubernetes' gRPC probes on the grpc port the Services reach.
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        g = (c.get(probe) or {}).get("grpc") or {}
        check(g.get("port") == GRPC_PORT and ports.get("grpc") == GRPC_PORT,
              f"{W}: {probe} is not a gRPC probe on the grpc port {GRPC_PORT}")
    check(((c.get("readinessProbe") or {}).get("grpc") or {}).get("service")
          == HEALTH_SERVICE,
          f"{W}: readinessProbe should ask for service {HEALTH_SERVICE}")

    # The config: a ConfigMap of this directory at /etc/tensord.
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    mounts = {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}
    config_maps = {m["metadata"]["name"]: m for m in cl.get("ConfigMap", [])}
    cm_name = volumes.get(mounts.get("/etc/tensord", ""), {}).get("configMap", {}).get("name")
    grace_ms = DEFAULT_GRACE_MS
    if check(cm_name in config_maps,
             f"{W}: /etc/tensord is not a ConfigMap of {W} (it is {cm_name!r})"):
        text = (config_maps[cm_name].get("data") or {}).get("tensord.toml")
        if check(text is not None, f"{W}: ConfigMap {cm_name}: no tensord.toml"):
            try:
                cfg = tomllib.loads(text)
                check_config(cfg, f"{W}: ConfigMap {cm_name} tensord.toml", exact=False)
                grace_ms = cfg.get("shutdown_grace_ms", grace_ms)
            except tomllib.TOMLDecodeError as e:
                check(False, f"{W}: ConfigMap {cm_name}: tensord.toml: {e}")
    tgp = pod.get("terminationGracePeriodSeconds", 30)
    check(tgp * 1000 > grace_ms,
          f"{W}: terminationGracePeriodSeconds {tgp}s <= shutdown grace {grace_ms} ms")

    # The client token: the Deployment's Secret, mounted as it mounts it.
    token = env.get("TENSORD_AUTH_TOKEN_FILE") or ""
    dep_env = {e["name"]: e.get("value") for e in dep_c.get("env", [])}
    dep_token = dep_env.get("TENSORD_AUTH_TOKEN_FILE") or ""
    check(token == dep_token and token.startswith("/"),
          f"{W}: TENSORD_AUTH_TOKEN_FILE {token!r} is not the Deployment's "
          f"{dep_token!r} (tensord refuses 0.0.0.0 without a token)")
    mount, secret = token_secret(c, pod, token)
    dep_mount, dep_secret = token_secret(dep_c, dep_pod, dep_token)
    if check(bool(secret.get("secretName")),
             f"{W}: TENSORD_AUTH_TOKEN_FILE {token!r} is not in a mounted Secret volume"):
        check(mount.get("readOnly") is True,
              f"{W}: the token volume is not mounted readOnly")
        check(secret == dep_secret and mount.get("mountPath") == (dep_mount or {}).get("mountPath"),
              f"{W}: the token Secret volume {secret} at {mount.get('mountPath')} is "
              f"not the Deployment's {dep_secret} at {(dep_mount or {}).get('mountPath')}")
        secrets = {s["metadata"]["name"]: s for s in single.get("Secret", [])}
        name = secret["secretName"]
        if check(name in secrets, f"{W}: Secret {name} is not documented in deploy/k8s"):
            check("token" in (secrets[name].get("stringData")
                              or secrets[name].get("data") or {}),
                  f"Secret {name}: no key 'token' (the cluster's TENSORD_AUTH_TOKEN_FILE)")
    check(not truthy(env.get("TENSORD_INSECURE", "")), f"{W}: TENSORD_INSECURE is set")
    check("insecure" not in given, f"{W}: the container passes --insecure")
    check(not env.get("TENSORD_TLS_CERT"),
          f"{W}: with TLS the native gRPC probes (plaintext) fail; "
          "use exec probes with tensorctl --tls-ca")


def check_compose(root: pathlib.Path, docs: dict[pathlib.Path, list]) -> None:
    path = root / "deploy/docker/compose.yaml"
    if not check(path in docs and docs[path], "deploy/docker/compose.yaml missing"):
        return
    compose = docs[path][0]
    svc = (compose.get("services") or {}).get("tensord")
    if not check(isinstance(svc, dict), "compose: no service 'tensord'"):
        return
    devices = (((svc.get("deploy") or {}).get("resources") or {})
               .get("reservations") or {}).get("devices") or []
    check(any(d.get("driver") == "nvidia" and "gpu" in d.get("capabilities", [])
              for d in devices),
          "compose: no nvidia GPU reservation under deploy.resources.reservations")
    hc = svc.get("healthcheck") or {}
    test = hc.get("test")
    test = " ".join(test) if isinstance(test, list) else str(test)
    check("tensorctl" in test and "health" in test,
          "compose: healthcheck does not run `tensorctl health`")
    published = " ".join(str(p) for p in svc.get("ports", []))
    for port in (GRPC_PORT, METRICS_PORT):
        check(f":{port}" in published, f"compose: port {port} not published")
    env = svc.get("environment") or {}
    if isinstance(env, list):
        env = dict(e.split("=", 1) for e in env)
    check(port_of(env.get("TENSORD_LISTEN", "")) == GRPC_PORT,
          "compose: TENSORD_LISTEN is not on port 50051")
    check("build" in svc and "image" in svc, "compose: needs build and image")
    # Authentication: a Compose secret, mounted under /run/secrets, named by
    # TENSORD_AUTH_TOKEN_FILE.
    check(not truthy(env.get("TENSORD_INSECURE", "")), "compose: TENSORD_INSECURE is set")
    command = svc.get("command") or []
    command = " ".join(command) if isinstance(command, list) else str(command)
    check("--insecure" not in command, "compose: the command passes --insecure")
    token = str(env.get("TENSORD_AUTH_TOKEN_FILE") or "")
    targets = {}
    for s in svc.get("secrets") or []:
        if isinstance(s, str):
            targets[f"/run/secrets/{s}"] = s
        else:
            target = s.get("target") or s["source"]
            targets[target if target.startswith("/") else f"/run/secrets/{target}"] = s["source"]
    if is_loopback(str(env.get("TENSORD_LISTEN", "127.0.0.1:50051"))):
        return
    if check(token in targets,
             f"compose: TENSORD_AUTH_TOKEN_FILE {token!r} is not one of the "
             f"service's secrets {sorted(targets)}"):
        top = (compose.get("secrets") or {}).get(targets[token]) or {}
        if check("file" in top or "environment" in top,
                 f"compose: secret {targets[token]} has no file/environment"):
            if "file" in top:
                f = (path.parent / top["file"]).resolve()
                if f.is_relative_to(root):
                    rel = "/" + str(f.relative_to(root))
                    ignored = dockerignore_lines(
                        root / "deploy/docker/Dockerfile.dockerignore")
                    check(rel in ignored,
                          f"compose: the token file {rel} is inside the build "
                          "context but not in deploy/docker/Dockerfile.dockerignore")
    grace_ms = int(env.get("TENSORD_SHUTDOWN_GRACE_MS", DEFAULT_GRACE_MS))
    m = re.fullmatch(r"(\d+)s", str(svc.get("stop_grace_period", "10s")))
    check(m is not None and int(m.group(1)) * 1000 > grace_ms,
          "compose: stop_grace_period must exceed TENSORD_SHUTDOWN_GRACE_MS")


def dockerignore_lines(path: pathlib.Path) -> list[str]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return []
    return [s.strip() for s in text.splitlines()
            if s.strip() and not s.strip().startswith("#")]


def check_dockerignore(root: pathlib.Path) -> None:
    """BuildKit reads deploy/docker/Dockerfile.dockerignore instead of the
    root .dockerignore for that Dockerfile: it must keep the root's patterns
    and keep a token made in the repository root out of the context."""
    own = root / "deploy/docker/Dockerfile.dockerignore"
    if not check(own.is_file(), "deploy/docker/Dockerfile.dockerignore missing"):
        return
    lines = dockerignore_lines(own)
    missing = [l for l in dockerignore_lines(root / ".dockerignore") if l not in lines]
    check(not missing, f"Dockerfile.dockerignore lacks /.dockerignore's {missing}")
    check("/token" in lines, "Dockerfile.dockerignore does not exclude /token")


def uncommented(text: str) -> str:
    """The text without comments ('#' at a line start or after a space)."""
    return "\n".join(re.sub(r"(^|\s)#.*", "", line) for line in text.splitlines())


def check_security_text(root: pathlib.Path) -> None:
    """No artifact turns on --insecure; no remark from before authentication
    existed is left in deploy/ or the deploy docs."""
    for path in sorted(p for p in (root / "deploy").rglob("*") if p.is_file()):
        where = path.relative_to(root)
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        body = uncommented(text)
        check("--insecure" not in body and "TENSORD_INSECURE" not in body,
              f"{where}: passes --insecure / TENSORD_INSECURE")
        for m in STALE.finditer(text):
            check(False, f"{where}: stale remark {m.group(0)!r}")
    guide = root / "docs" / "deploy.md"
    if check(guide.is_file(), "docs/deploy.md is missing"):
        text = guide.read_text(encoding="utf-8")
        for s in STALE.finditer(text):
            check(False, f"docs/deploy.md: stale remark {s.group(0)!r}")
        for needle in ("TENSORD_AUTH_TOKEN_FILE", "--token-file",
                       "/run/secrets/tensord_token", "tensorctl health"):
            check(needle in text, f"docs/deploy.md: does not mention {needle}")


def dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined."""
    out, cur = [], ""
    for line in text.splitlines():
        s = line.strip()
        if not cur and (not s or s.startswith("#")):
            continue
        if cur and s.startswith("#"):
            continue
        cur += " " + s[:-1] if s.endswith("\\") else " " + s
        if not s.endswith("\\"):
            word, _, rest = cur.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
            cur = ""
    return out


def check_dockerfile(root: pathlib.Path) -> None:
    path = root / "deploy/docker/Dockerfile"
    if not check(path.is_file(), "deploy/docker/Dockerfile missing"):
        return
    ins = dockerfile_instructions(path.read_text(encoding="utf-8"))
    args = {}
    for word, rest in ins:
        if word == "FROM":
            break
        if word == "ARG" and "=" in rest:
            k, v = rest.split("=", 1)
            args[k] = v
    subst = lambda s: re.sub(r"\$\{(\w+)\}", lambda m: args.get(m.group(1), m.group(0)), s)
    froms = [subst(rest).split() for word, rest in ins if word == "FROM"]
    if check(len(froms) == 2, f"Dockerfile: {len(froms)} FROM stages, expected 2"):
        build, run = froms[0][0], froms[1][0]
        # cuDNN's variant of the CUDA image: conv2d and pooling on cuDNN.
        check(re.fullmatch(r"nvidia/cuda:13\.[\d.]+-cudnn-devel-ubuntu24\.04", build)
              is not None, f"Dockerfile: build stage is {build}")
        check(run == build.replace("-devel-", "-runtime-"),
              f"Dockerfile: runtime stage {run} does not match {build}")
        check(len(froms[0]) == 3 and froms[0][1].upper() == "AS",
              "Dockerfile: build stage is not named")
    # Stage of each instruction: 0 = before the first FROM.
    stage, per_stage = 0, {1: [], 2: []}
    for word, rest in ins:
        if word == "FROM":
            stage += 1
        elif stage in per_stage:
            per_stage[stage].append((word, rest))
    for n in (1, 2):
        text = " ".join(rest for _, rest in per_stage[n])
        check("install-deps.sh" in text and "deploy/install-deps.sh" in text,
              f"Dockerfile: stage {n} does not use deploy/install-deps.sh")
    build_runs = " ".join(r for w, r in per_stage[1] if w == "RUN")
    check("make build" in build_runs and "TENSORD_CUDA=ON" in build_runs
          and "BUILD_TYPE=Release" in build_runs,
          "Dockerfile: build stage does not run `make build BUILD_TYPE=Release TENSORD_CUDA=ON`")
    final = per_stage[2]
    users = [r for w, r in final if w == "USER"]
    check(bool(users) and users[-1].split(":")[0] not in ("root", "0"),
          "Dockerfile: runtime stage does not switch to a non-root USER")
    check(bool(users) and users[-1].split(":")[0].isdigit(),
          "Dockerfile: USER should be numeric (Kubernetes runAsNonRoot checks it)")
    exposed = " ".join(r for w, r in final if w == "EXPOSE").split()
    for port in (GRPC_PORT, METRICS_PORT):
        check(str(port) in exposed, f"Dockerfile: EXPOSE {port} missing")
    hc = " ".join(r for w, r in final if w == "HEALTHCHECK")
    check("tensorctl" in hc and "health" in hc,
          "Dockerfile: HEALTHCHECK does not run `tensorctl health`")
    ep = " ".join(r for w, r in final if w == "ENTRYPOINT")
    check("tensord" in ep, "Dockerfile: ENTRYPOINT is not tensord")
    env = {}
    for w, r in final:
        if w == "ENV":
            for pair in r.split():
                k, _, v = pair.partition("=")
                env[k] = v.strip('"')
    check(env.get("TENSORD_LISTEN") == f"0.0.0.0:{GRPC_PORT}",
          "Dockerfile: TENSORD_LISTEN=0.0.0.0:50051 not set")
    if not is_loopback(env.get("TENSORD_LISTEN", "127.0.0.1:50051")):
        # Forgetting the token must fail at start, not serve openly.
        check(env.get("TENSORD_AUTH_TOKEN_FILE", "").startswith("/run/secrets/"),
              "Dockerfile: listens on 0.0.0.0 but TENSORD_AUTH_TOKEN_FILE is "
              "not set to a file under /run/secrets/")
    check(not truthy(env.get("TENSORD_INSECURE", "")),
          "Dockerfile: TENSORD_INSECURE is set")
    for w in ("ENTRYPOINT", "CMD"):
        check("--insecure" not in " ".join(r for x, r in final if x == w),
              f"Dockerfile: {w} passes --insecure")


def check_systemd(root: pathlib.Path, grace_ms: int) -> None:
    path = root / "deploy/systemd/tensord.service"
    if not check(path.is_file(), "deploy/systemd/tensord.service missing"):
        return
    settings: dict[str, list[str]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if "=" in line and not line.lstrip().startswith(("#", ";")):
            k, v = line.split("=", 1)
            settings.setdefault(k.strip(), []).append(v.strip())
    one = lambda k: (settings.get(k) or [""])[-1]
    check(one("Type") == "notify", "tensord.service: Type is not notify")
    check(one("ExecStart").split()[:1] == ["/usr/local/bin/tensord"],
          "tensord.service: ExecStart is not /usr/local/bin/tensord")
    check(one("DevicePolicy") == "closed", "tensord.service: DevicePolicy != closed")
    check(any("nvidia" in v for v in settings.get("DeviceAllow", [])),
          "tensord.service: no DeviceAllow for the NVIDIA devices")
    m = re.fullmatch(r"(\d+)s?", one("TimeoutStopSec"))
    check(m is not None and int(m.group(1)) * 1000 > grace_ms,
          f"tensord.service: TimeoutStopSec must exceed shutdown_grace_ms ({grace_ms})")
    check("--insecure" not in one("ExecStart"),
          "tensord.service: ExecStart passes --insecure")
    # The documented (commented-out) token option: a credential, named by
    # TENSORD_AUTH_TOKEN_FILE in the credentials directory.
    text = path.read_text(encoding="utf-8")
    cred = re.search(r"^#?LoadCredential=([\w.-]+):(\S+)", text, re.M)
    if check(cred is not None,
             "tensord.service: no LoadCredential= for the token (documented option)"):
        check(re.search(rf"^#?Environment=TENSORD_AUTH_TOKEN_FILE=%d/{re.escape(cred.group(1))}\s*$",
                        text, re.M) is not None,
              f"tensord.service: no Environment=TENSORD_AUTH_TOKEN_FILE=%d/{cred.group(1)}")


def test_deploy_artifacts():
    failures.clear()
    root = pathlib.Path(__file__).resolve().parents[3]

    grace_ms = DEFAULT_GRACE_MS
    example = root / "deploy/config/tensord.toml"
    try:
        with open(example, "rb") as f:
            cfg = tomllib.load(f)
        check_config(cfg, "deploy/config/tensord.toml", exact=True)
        # The daemon refuses unknown keys at start: every key documented here
        # must be one it knows.
        known = daemon_config_keys(root)
        if known is not None:
            check(set(cfg) <= known,
                  f"deploy/config/tensord.toml: keys {sorted(set(cfg) - known)} "
                  "are not accepted by server/config.cc")
        grace_ms = cfg.get("shutdown_grace_ms", grace_ms)
    except (OSError, tomllib.TOMLDecodeError) as e:
        check(False, f"deploy/config/tensord.toml: {e}")

    docs = load_yaml_files(root)
    check_k8s(root, docs)
    check_k8s_cluster(root, docs)
    check_compose(root, docs)
    check_dockerfile(root)
    check_systemd(root, grace_ms)
    check_dockerignore(root)
    check_security_text(root)

    assert not failures, "\n".join(failures)
    print(f"ok: {len(docs)} YAML files (the cluster's StatefulSet too), the "
          "example config, the Dockerfile (and its .dockerignore), the systemd "
          "unit and docs/deploy.md pass")
