#!/usr/bin/env bash
# pair.sh — two real kube-apiservers of adjacent minors ("new" and "old") sharing one real etcd, on
# loopback, configured as kubeadm configures them (RBAC, client CA, a separate front-proxy CA
# trusted only for request-header authentication). The binaries are the two newest
# `kube-apiserver-vX.Y.Z.xz` files in $ASSETS (tests/real_pair.rs sets it from
# SKEWGATE_APISERVER_ASSETS; the project's shared envtest has v1.36.3 and v1.35.6).
#
#   pair.sh up   DIR    decompress the binaries into DIR/bin (once), make DIR/pki (once), start etcd
#                       and both apiservers, wait until each answers /readyz, write DIR/env.sh and
#                       DIR/kubeconfig (contexts new, old; user admin in system:masters)
#                       (started again: what is not running, e.g. one apiserver stopped by a test)
#   pair.sh run  DIR COMPONENT VERSION SERVER [FLAG...]
#                       start a real control-plane component against SERVER (an apiserver of the
#                       pair, or skewgate in front of them): COMPONENT is kube-controller-manager or
#                       kube-scheduler, VERSION one whose COMPONENT-VERSION.xz is in $ASSETS. It runs
#                       as kubeadm runs it: its own client certificate (system:kube-controller-manager,
#                       system:kube-scheduler) from the pair's CA, leader election on, no serving
#                       port. NAME (environment; default COMPONENT-VERSION) names its pid file
#                       DIR/run/NAME.pid, its log DIR/logs/NAME.log and its kubeconfig
#                       DIR/NAME.kubeconfig. SERVER_CA (default the pair's ca.crt) is the CA that
#                       SERVER's serving certificate chains to.
#   pair.sh down DIR    stop what `up` and `run` started (by the pid files in DIR/run only)
#
# Each apiserver keeps an audit log, DIR/logs/audit-new.log and audit-old.log (Metadata level,
# one line per answered request, the apiservers' own loopback requests left out).
#
# Ports (environment): NEW_PORT (16443), OLD_PORT (16444), ETCD_PORT (12379), ETCD_PEER_PORT (12380).
# Needs: root (unshare --uts gives each apiserver its own hostname, so the two never share the
# hostname-derived apiserver identity), openssl, xz, curl. etcd: etcd-v*.xz in $ASSETS (the shared
# envtest's 3.6.13, as production runs with Kubernetes 1.35/1.36), else ETCD_BIN, else `etcd` on
# PATH (Debian's etcd-server is 3.4.x: no watch progress requests, so 1.36's watch lists and
# consistent reads from its cache degrade). First start of an apiserver: 15-60 s on two cores.
set -euo pipefail
here=${ASSETS:-$(cd "$(dirname "$0")" && pwd)}
cmd=${1:?usage: pair.sh up|run|down DIR ...}; D=${2:?usage: pair.sh up|run|down DIR ...}
mkdir -p "$D"; D=$(cd "$D" && pwd)
NEW_PORT=${NEW_PORT:-16443}; OLD_PORT=${OLD_PORT:-16444}
ETCD_PORT=${ETCD_PORT:-12379}; ETCD_PEER_PORT=${ETCD_PEER_PORT:-12380}
P=$D/pki; mkdir -p "$D/bin" "$D/run" "$D/logs" "$P"

down() {
  local comps; comps=$(cd "$D/run" && ls ./*.pid 2>/dev/null | sed 's#^./##; s#\.pid$##' | grep -vx 'new\|old\|etcd' || true)
  for n in $comps new old etcd; do
    f=$D/run/$n.pid; [ -f "$f" ] || continue
    pid=$(cat "$f"); if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then kill "$pid"; fi
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    rm -f "$f"
  done
}
[ "$cmd" = down ] && { down; exit 0; }

unxz_bin() { # file-in-here target
  [ -x "$2" ] || { xz -dc "$here/$1" > "$2.tmp" && chmod +x "$2.tmp" && mv "$2.tmp" "$2"; }
}
leaf() { # name subject signer extensions (in the current directory)
  openssl req -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.csr" -subj "$2" 2>/dev/null
  printf '%b\n' "$4" > "$1.ext"
  openssl x509 -req -in "$1.csr" -CA "$3.crt" -CAkey "$3.key" -CAcreateserial -out "$1.crt" -days 3650 -extfile "$1.ext" 2>/dev/null
  rm -f "$1.csr" "$1.ext"; }

if [ "$cmd" = run ]; then
  comp=${3:?usage: pair.sh run DIR COMPONENT VERSION SERVER [FLAG...]}; ver=${4:?VERSION}; server=${5:?SERVER}; shift 5
  [ -f "$P/.done" ] || { echo "no pair in $D: pair.sh up $D first" >&2; exit 1; }
  case $comp in
    kube-controller-manager) who=system:kube-controller-manager
      flags=(--authentication-kubeconfig="@KC" --authorization-kubeconfig="@KC" --leader-elect=true
             --use-service-account-credentials=true --service-account-private-key-file="$P/sa.key"
             --root-ca-file="$P/ca.crt" --cluster-signing-cert-file="$P/ca.crt" --cluster-signing-key-file="$P/ca.key"
             --controllers='*,-nodeipam,-nodelifecycle,-cloud-node-lifecycle,-service-lb-controller,-route'
             --bind-address=127.0.0.1 --secure-port=0) ;;
    kube-scheduler) who=system:kube-scheduler
      flags=(--authentication-kubeconfig="@KC" --authorization-kubeconfig="@KC" --leader-elect=true
             --bind-address=127.0.0.1 --secure-port=0) ;;
    *) echo "COMPONENT: kube-controller-manager or kube-scheduler" >&2; exit 2 ;;
  esac
  [ -f "$here/$comp-$ver.xz" ] || { echo "no $comp-$ver.xz in $here" >&2; exit 2; }
  # Under its own name, in a folder per version: client-go's User-Agent names the binary's file
  # (`kube-controller-manager/v1.36.3 ...`), as kubeadm's static pods run it; a binary named
  # kube-controller-manager-v1.36.3 would call itself that, and be no component to skewgate.
  mkdir -p "$D/bin/$ver"; unxz_bin "$comp-$ver.xz" "$D/bin/$ver/$comp"
  [ -f "$P/$comp.crt" ] || ( cd "$P" && leaf "$comp" "/CN=$who" ca 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth' )
  name=${NAME:-$comp-$ver}; kc=$D/$name.kubeconfig
  cat > "$kc" <<KC
apiVersion: v1
kind: Config
clusters:
- {name: c, cluster: {server: "$server", certificate-authority: "${SERVER_CA:-$P/ca.crt}"}}
users:
- {name: u, user: {client-certificate: "$P/$comp.crt", client-key: "$P/$comp.key"}}
contexts:
- {name: c, context: {cluster: c, user: u}}
current-context: c
KC
  for i in "${!flags[@]}"; do flags[$i]=${flags[$i]//@KC/$kc}; done
  [ -f "$D/run/$name.pid" ] && kill -0 "$(cat "$D/run/$name.pid")" 2>/dev/null && { echo "$name already runs" >&2; exit 1; }
  setsid sh -c 'echo $$ > "$0"; exec "$@"' "$D/run/$name.pid" "$D/bin/$ver/$comp" --kubeconfig="$kc" "${flags[@]}" "$@" \
    </dev/null >>"$D/logs/$name.log" 2>&1 &
  for _ in $(seq 1 50); do [ -s "$D/run/$name.pid" ] && break; sleep 0.1; done
  echo "$name started against $server (pid $(cat "$D/run/$name.pid"), log $D/logs/$name.log)"
  exit 0
fi
[ "$cmd" = up ] || { echo "usage: pair.sh up|run|down DIR ..." >&2; exit 2; }

versions=$(cd "$here" && ls kube-apiserver-v*.xz 2>/dev/null | sed 's/^kube-apiserver-//; s/\.xz$//' | sort -V | tail -2)
NEW_VERSION=$(echo "$versions" | tail -1); OLD_VERSION=$(echo "$versions" | head -1)
[ -n "$NEW_VERSION" ] && [ "$NEW_VERSION" != "$OLD_VERSION" ] || { echo "two kube-apiserver-v*.xz needed in $here" >&2; exit 1; }
for v in $NEW_VERSION:new $OLD_VERSION:old; do
  unxz_bin "kube-apiserver-${v%%:*}.xz" "$D/bin/kube-apiserver-${v##*:}"
done
etcd_xz=$(cd "$here" && ls etcd-v*.xz 2>/dev/null | sort -V | tail -1 || true)
if [ -z "${ETCD_BIN:-}" ] && [ -n "$etcd_xz" ]; then
  unxz_bin "$etcd_xz" "$D/bin/etcd"; ETCD_BIN=$D/bin/etcd
fi
ETCD_BIN=${ETCD_BIN:-etcd}

if [ ! -f "$P/.done" ]; then
  ( cd "$P"
    ca() { openssl req -x509 -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.crt" -days 3650 -subj "/CN=$2" \
             -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign 2>/dev/null; }
    ca ca kubernetes-ca
    ca front-proxy-ca front-proxy-ca
    leaf apiserver /CN=kube-apiserver ca 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,IP:10.96.0.1'
    leaf admin '/O=system:masters/CN=admin' ca 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth'
    leaf front-proxy-client /CN=front-proxy-client front-proxy-ca 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth'
    openssl genrsa -out sa.key 2048 2>/dev/null; openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
    chmod 600 ./*.key; touch .done )
fi

alive() { [ -f "$D/run/$1.pid" ] && kill -0 "$(cat "$D/run/$1.pid")" 2>/dev/null; }
if ! alive etcd; then
  command -v "$ETCD_BIN" >/dev/null || { echo "no etcd: etcd-v*.xz in $here, ETCD_BIN, or apt-get install -y etcd-server" >&2; exit 1; }
  mkdir -p "$D/etcd-data"; chmod 700 "$D/etcd-data"
  setsid sh -c 'echo $$ > "$0"; exec "$@"' "$D/run/etcd.pid" "$ETCD_BIN" --name pair --data-dir "$D/etcd-data" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "pair=http://127.0.0.1:$ETCD_PEER_PORT" --quota-backend-bytes 4294967296 \
    </dev/null >>"$D/logs/etcd.log" 2>&1 &
  for _ in $(seq 1 100); do curl -fsS "http://127.0.0.1:$ETCD_PORT/health" 2>/dev/null | grep -q true && break; sleep 0.2; done
fi

# The apiservers' own record of what reached which version, for the tests to judge from: every
# request but the apiservers' own loopback traffic, at Metadata, once answered.
cat > "$D/audit-policy.yaml" <<'POLICY'
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted]
rules:
  - level: None
    users: ["system:apiserver"]
  - level: Metadata
POLICY

start() { # role port
  alive "$1" && return
  setsid unshare --uts sh -c 'echo $$ > "$0"; hostname "$1"; shift; exec "$@"' "$D/run/$1.pid" "kas-$1" \
    "$D/bin/kube-apiserver-$1" --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
    --secure-port="$2" --bind-address=127.0.0.1 --advertise-address=127.0.0.1 \
    --tls-cert-file="$P/apiserver.crt" --tls-private-key-file="$P/apiserver.key" --client-ca-file="$P/ca.crt" \
    --service-account-key-file="$P/sa.pub" --service-account-signing-key-file="$P/sa.key" \
    --service-account-issuer=https://kubernetes.default.svc --service-cluster-ip-range=10.96.0.0/12 \
    --authorization-mode=Node,RBAC \
    --requestheader-client-ca-file="$P/front-proxy-ca.crt" --requestheader-allowed-names=front-proxy-client \
    --requestheader-username-headers=X-Remote-User --requestheader-group-headers=X-Remote-Group \
    --requestheader-extra-headers-prefix=X-Remote-Extra- \
    --endpoint-reconciler-type=none \
    --audit-policy-file="$D/audit-policy.yaml" --audit-log-path="$D/logs/audit-$1.log" \
    --audit-log-maxsize=200 --audit-log-maxbackup=1 ${EXTRA_FLAGS:-} </dev/null >>"$D/logs/$1.log" 2>&1 &
}
start new "$NEW_PORT"; start old "$OLD_PORT"
for r in new:$NEW_PORT old:$OLD_PORT; do
  for i in $(seq 1 180); do
    curl -fsS --cacert "$P/ca.crt" --cert "$P/admin.crt" --key "$P/admin.key" "https://127.0.0.1:${r#*:}/readyz" >/dev/null 2>&1 && break
    # No pid file yet: its shell has not started (a loaded machine); only a written pid that is gone is an exit.
    [ -f "$D/run/${r%%:*}.pid" ] || { [ "$i" = 180 ] && { echo "${r%%:*} did not start in 180 s" >&2; exit 1; }; sleep 1; continue; }
    alive "${r%%:*}" || { echo "${r%%:*} exited; see $D/logs/${r%%:*}.log" >&2; tail -5 "$D/logs/${r%%:*}.log" >&2; exit 1; }
    [ "$i" = 180 ] && { echo "${r%%:*} not ready after 180 s" >&2; exit 1; }
    sleep 1
  done
done

b64() { base64 -w0 < "$1"; }
cat > "$D/kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters:
- {name: new, cluster: {server: "https://127.0.0.1:$NEW_PORT", certificate-authority-data: $(b64 "$P/ca.crt")}}
- {name: old, cluster: {server: "https://127.0.0.1:$OLD_PORT", certificate-authority-data: $(b64 "$P/ca.crt")}}
users:
- {name: admin, user: {client-certificate-data: $(b64 "$P/admin.crt"), client-key-data: $(b64 "$P/admin.key")}}
contexts:
- {name: new, context: {cluster: new, user: admin}}
- {name: old, context: {cluster: old, user: admin}}
current-context: new
KC
cat > "$D/env.sh" <<ENV
export PAIR=$D PKI=$P KUBECONFIG=$D/kubeconfig
export NEW_URL=https://127.0.0.1:$NEW_PORT OLD_URL=https://127.0.0.1:$OLD_PORT ETCD_URL=http://127.0.0.1:$ETCD_PORT
export NEW_VERSION=$NEW_VERSION OLD_VERSION=$OLD_VERSION
ENV
echo "pair up: new https://127.0.0.1:$NEW_PORT ($NEW_VERSION), old https://127.0.0.1:$OLD_PORT ($OLD_VERSION), etcd :$ETCD_PORT; . $D/env.sh"
