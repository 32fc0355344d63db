#!/usr/bin/python3
"""Static checks of the deployment artifacts under deploy/.

    check_deploy.py REPO_ROOT

Parses every YAML file in deploy/k8s and deploy/docker, the example config
and the Kubernetes ConfigMap's tensord.toml, the Dockerfile and the systemd
unit, and checks what each must say for tensord to run: GPU requests, probes,
ports, health checks, non-root users, config keys that the daemon knows,
stop timeouts longer than the daemon's shutdown grace, and security: every
artifact that listens beyond loopback wires a bearer-token file (a mounted
secret), and none turns on --insecure. Needs Debian's
python3 (3.11: tomllib) and python3-yaml. Prints one line per failure and
exits 1 if there is any.
"""
import pathlib
import re
import sys
import tomllib

import yaml

# The daemon's config keys: its flags, with underscores (server/main.cc,
# ConfigurableFlags() in server/config.cc). The example config documents
# every one of them.
CONFIG_KEYS = {
    "listen", "host_devices", "memory_limit", "gpu_memory_limit", "log_level",
    "metrics_listen", "shutdown_grace_ms", "port_file",
    "auth_token_file", "tls_cert", "tls_key", "tls_client_ca", "insecure",
    "session_ttl", "max_sessions", "session_max_bytes", "session_max_tensors",
    "max_message_bytes", "max_inline_bytes", "max_tensor_bytes", "blas_threads",
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
    for d in ("deploy/k8s", "deploy/docker"):
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
    readme = root / "README.md"
    if readme.is_file():
        text = readme.read_text(encoding="utf-8")
        m = re.search(r"^## Deploy\n(.*?)(?=^## |\Z)", text, re.M | re.S)
        if check(m is not None, "README.md: no '## Deploy' section"):
            for s in STALE.finditer(m.group(1)):
                check(False, f"README.md (Deploy): stale remark {s.group(0)!r}")
            for needle in ("TENSORD_AUTH_TOKEN_FILE", "--token-file",
                           "/run/secrets/tensord_token", "tensorctl health"):
                check(needle in m.group(1),
                      f"README.md (Deploy): does not mention {needle}")


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
        check(re.fullmatch(r"nvidia/cuda:13\.[\d.]+-devel-ubuntu24\.04", build)
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


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    root = pathlib.Path(sys.argv[1]).resolve()

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
    check_compose(root, docs)
    check_dockerfile(root)
    check_systemd(root, grace_ms)
    check_dockerignore(root)
    check_security_text(root)

    for f in failures:
        print("FAIL:", f)
    if failures:
        return 1
    print(f"ok: {len(docs)} YAML files, the example config, the Dockerfile "
          "(and its .dockerignore), the systemd unit and README's Deploy "
          "section pass")
    return 0


if __name__ == "__main__":
    sys.exit(main())
