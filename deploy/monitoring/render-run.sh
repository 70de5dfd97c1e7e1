#!/usr/bin/env bash
# Renders dashboard.png from a run: two simulated apiservers (1.29, 1.30) and a third backend with
# no apiserver, two skewgate replicas in front as one fleet (--advertise-address), Prometheus
# (Debian's package) scraping them every 2 s, and three minutes of traffic in which a rollout to
# the missing backend aborts (on both replicas), the team-a pin moves from 1.30 to 1.29 with the
# second replica's file 20 s late (the replicas disagree meanwhile), and one bad route file is
# rejected and then fixed.
#
#   deploy/monitoring/render-run.sh [path/to/skewgate]     (needs prometheus, curl, python3 with matplotlib)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
exe="${1:-$here/../../target/release/skewgate}"
work="$(mktemp -d)"
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

"$exe" sim --listen 127.0.0.1:28129 --git-version v1.29.0 >/dev/null 2>&1 & pids+=($!)
"$exe" sim --listen 127.0.0.1:28130 --git-version v1.30.0 >/dev/null 2>&1 & pids+=($!)

routes() { # $1: the team-a pin's backend; $2: extra text
  cat <<EOF
apiVersion: skewgate.io/v1alpha1
kind: RouteTable
metadata: {name: render-run}
backends:
  - {name: v1-29, version: v1.29, endpoints: [http://127.0.0.1:28129]}
  - {name: v1-30, version: v1.30, endpoints: [http://127.0.0.1:28130]}
  - {name: v1-31, version: v1.31, endpoints: [http://127.0.0.1:1]}
writes:
  default: v1-29
  pins: [{name: team-a, namespaces: [team-a], backend: $1}]
reads:
  default: v1-29
  rollouts:
    - {name: canary-1-31, match: {namespaces: [canary]}, to: v1-31, percent: 100,
       abort: {errorRatio: 0.2, window: 1m, minRequests: 50}}
    - {name: half-1-30, match: {namespaces: ["!kube-system"]}, to: v1-30, percent: 50}
$2
EOF
}
mkdir -p "$work/a" "$work/b"
routes v1-30 "" > "$work/a/routes.yaml"
cp "$work/a/routes.yaml" "$work/b/routes.yaml"
"$exe" serve --routes "$work/a/routes.yaml" --listen 127.0.0.1:27443 --admin-listen 127.0.0.1:29443 \
  --advertise-address 192.0.2.10 --no-access-log --reload-poll 1s >"$work/a.log" 2>&1 & pids+=($!)
"$exe" serve --routes "$work/b/routes.yaml" --listen 127.0.0.1:27444 --admin-listen 127.0.0.1:29444 \
  --advertise-address 192.0.2.11 --no-access-log --reload-poll 1s >"$work/b.log" 2>&1 & pids+=($!)
# A route file to replica A now, to B 20 s later.
deliver() { # $1: file
  mv "$1" "$work/a/routes.yaml"
  (sleep 20; cp "$work/a/routes.yaml" "$work/b/routes.tmp" && mv "$work/b/routes.tmp" "$work/b/routes.yaml") &
}

cat > "$work/prometheus.yml" <<EOF
global: {scrape_interval: 2s, evaluation_interval: 2s}
scrape_configs:
  - job_name: skewgate
    static_configs: [{targets: ["127.0.0.1:29443", "127.0.0.1:29444"]}]
EOF
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/tsdb" \
  --web.listen-address=127.0.0.1:29090 >"$work/prometheus.log" 2>&1 & pids+=($!)
sleep 3
start=$(date +%s)

traffic() { # a client in a loop: $1 namespace, $2 the replica's port
  while true; do
    curl -s -o /dev/null "http://127.0.0.1:$2/api/v1/namespaces/$1/configmaps" || true
    curl -s -o /dev/null -X PATCH -H 'Content-Type: application/merge-patch+json' \
      -d '{"data":{"at":"'"$(date +%s%N)"'"}}' \
      "http://127.0.0.1:$2/api/v1/namespaces/$1/configmaps/settings" || true
    sleep 0.05
  done
}
port=27443
for ns in team-a team-b team-c ns-1 ns-2 ns-3 canary; do
  curl -s -o /dev/null -X POST -H 'Content-Type: application/json' \
    -d '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"settings"},"data":{"a":"b"}}' \
    "http://127.0.0.1:27443/api/v1/namespaces/$ns/configmaps" || true
  traffic "$ns" "$port" & pids+=($!)
  port=$((port == 27443 ? 27444 : 27443))
done

sleep 70
routes v1-29 "" > "$work/routes.tmp" && deliver "$work/routes.tmp"    # the pin moves
sleep 40
echo "backends: [oops" > "$work/routes.tmp" && deliver "$work/routes.tmp" # rejected
sleep 30
routes v1-29 "" > "$work/routes.tmp" && deliver "$work/routes.tmp"    # fixed
sleep 40
end=$(date +%s)
python3 "$here/render.py" http://127.0.0.1:29090 "$start" "$end" "$here/dashboard.png"
echo "wrote $here/dashboard.png ($start..$end)"
