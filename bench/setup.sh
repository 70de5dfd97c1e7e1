# What bench/ab.sh and bench/instructions.sh share, sourced by both: a work directory removed on
# exit with the processes in `pids`, a route table with one backend (the simulator on $SIM_PORT),
# and the simulator started ($SIM_PREFIX before it, e.g. `taskset -c 0`) with one ConfigMap to GET.
# Needs curl.
work=$(mktemp -d)
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

cat >"$work/routes.yaml" <<YAML
apiVersion: skewgate.io/v1alpha1
kind: RouteTable
backends:
  - name: sim
    endpoints: [http://127.0.0.1:$SIM_PORT]
writes:
  default: sim
reads:
  default: sim
YAML

# Waits until something answers HTTP on port $1 (up to 40 s: a build under valgrind starts slowly);
# curl's options follow the port (e.g. --http2-prior-knowledge).
wait_port() {
    for _ in $(seq 1 400); do
        curl -s -o /dev/null "${@:2}" "http://127.0.0.1:$1/" && return 0
        sleep 0.1
    done
    echo "$(basename "$0"): nothing listens on port $1" >&2
    exit 1
}

# Starts the simulator of skewgate build $1 and creates the ConfigMap the benches GET.
start_sim() {
    ${SIM_PREFIX:-} "$1" sim --listen "127.0.0.1:$SIM_PORT" >"$work/sim.log" 2>&1 &
    pids+=($!)
    wait_port "$SIM_PORT"
    curl -s --http2-prior-knowledge -XPOST -H 'content-type: application/json' \
        -d '{"metadata":{"name":"small"},"data":{"k":"v"}}' \
        "http://127.0.0.1:$SIM_PORT/api/v1/namespaces/default/configmaps" >/dev/null
}

# Writes HAProxy's configuration for port $1 to $work/haproxy$1.cfg and prints its path: one thread,
# HTTP/1.1 and h2c on one port (HAProxy tells h2c by its preface, as skewgate does), h2 to the
# simulator, connections reused (as the load bench configures it).
haproxy_cfg() {
    local cfg="$work/haproxy$1.cfg"
    printf '%s\n' global '  nbthread 1' defaults '  mode http' '  timeout connect 5s' \
        '  timeout client 60s' '  timeout server 60s' '  http-reuse always' frontend\ fe \
        "  bind 127.0.0.1:$1" \
        '  default_backend be' backend\ be "  server sim 127.0.0.1:$SIM_PORT proto h2" >"$cfg"
    echo "$cfg"
}
