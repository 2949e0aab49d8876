#!/usr/bin/env bash
# Checks the deployment files of docs/scaling.md without a cluster (scripts/test.sh runs both parts):
#   scripts/check-deploy.sh balancers    haproxy -c on deploy/haproxy/haproxy.cfg and on the copy in
#                                        deploy/kubernetes/haproxy.yaml's ConfigMap (which must differ from it only
#                                        in its servers, its resolvers and its health frontend); nginx -t on
#                                        deploy/nginx/nginx.conf
#   scripts/check-deploy.sh kubernetes   every manifest under deploy/kubernetes/ against the Kubernetes schemas of
#                                        1.30 (the first with appArmorProfile) and of the newest kubernetes-validate
#                                        carries, strict (unknown fields fail), in a network namespace of its own so
#                                        that nothing is fetched
# Needs haproxy and nginx (Debian 12's) and .venv-k8s (kubernetes-validate), which scripts/setup.sh installs.
set -euo pipefail
cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.."

venv=.venv-k8s
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

case "${1:-}" in
balancers)
    haproxy -c -q -f deploy/haproxy/haproxy.cfg
    echo "deploy/haproxy/haproxy.cfg: valid"
    "$venv/bin/python" - "$tmp/kubernetes-haproxy.cfg" <<'PY'
import re, sys, yaml
shipped = open("deploy/haproxy/haproxy.cfg").read()
[config] = [d for d in yaml.safe_load_all(open("deploy/kubernetes/haproxy.yaml")) if d["kind"] == "ConfigMap"]
cluster = config["data"]["haproxy.cfg"]
open(sys.argv[1], "w").write(cluster)

def core(text):
    """The configuration less its comments, servers, and the cluster's own sections (resolvers, health)."""
    lines, skipping = [], False
    for line in text.splitlines():
        if re.match(r"^(resolvers |frontend health)", line):
            skipping = True
        elif re.match(r"^\S", line):
            skipping = False
        if skipping or line.lstrip().startswith("#") or not line.strip() or line.startswith("    server "):
            continue
        lines.append(line)
    return lines

if core(shipped) != core(cluster):
    import difflib
    print("\n".join(difflib.unified_diff(core(shipped), core(cluster), "deploy/haproxy/haproxy.cfg",
                                         "deploy/kubernetes/haproxy.yaml", lineterm="")))
    sys.exit("deploy/kubernetes/haproxy.yaml's haproxy.cfg differs from deploy/haproxy/haproxy.cfg beyond its servers")
PY
    haproxy -c -q -f "$tmp/kubernetes-haproxy.cfg"
    echo "deploy/kubernetes/haproxy.yaml's haproxy.cfg: valid, and the same as deploy/haproxy/haproxy.cfg but its servers"
    nginx -q -t -c "$PWD/deploy/nginx/nginx.conf"
    echo "deploy/nginx/nginx.conf: valid"
    ;;
kubernetes)
    mapfile -t manifests < <(find deploy/kubernetes -name '*.yaml' | sort)
    newest="$("$venv/bin/python" -c 'import kubernetes_validate.utils as u; print(u.latest_version())')"
    for version in 1.30.0 "$newest"; do
        unshare --net "$venv/bin/kubernetes-validate" --strict --quiet -k "$version" "${manifests[@]}"
        echo "${#manifests[@]} manifests: valid against Kubernetes $version (strict, offline)"
    done
    ;;
*)
    echo "usage: $0 balancers|kubernetes" >&2
    exit 2
    ;;
esac
