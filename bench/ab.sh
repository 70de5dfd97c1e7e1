#!/usr/bin/env bash
# A/B of proxy builds on their request path, pinned so that the figures are steady enough to show a
# change of a few tenths of a microsecond per request (the load bench, unpinned, moves by ±0.7 µs
# from run to run on two cores).
#
#   bench/ab.sh OLD_SKEWGATE NEW_SKEWGATE [...] [haproxy]
#
# `haproxy` (when installed) is measured the same way beside the builds: one thread on CPU 1, h2 to
# the simulator, connections reused. The first argument must be a build (its simulator is used).
# The simulator and h2load share CPU 0; each proxy serves with one worker on CPU 1, all at once
# behind one simulator, measured one after the other in each round. Each round measures every build
# with an h2c client (4 connections, 16 streams each) and an HTTP/1.1 client (64 connections), for
# AB_SECONDS (4) each; ROUNDS (5) rounds. It prints every round's CPU time per GET (user + system, from
# /proc/PID/stat) and the median. Needs h2load (nghttp2-client), taskset and curl.
set -euo pipefail
ROUNDS=${ROUNDS:-5}
SECONDS_EACH=${AB_SECONDS:-4}
SIM_PORT=${SIM_PORT:-18381}
[ $# -ge 1 ] || { sed -n '2,15p' "$0"; exit 2; }
for tool in h2load taskset curl; do
    command -v "$tool" >/dev/null || { echo "ab.sh: $tool is not installed" >&2; exit 2; }
done
. "$(dirname "$0")/setup.sh"
SIM_PREFIX="taskset -c 0" start_sim "$1"

ports=()
serving=()
for i in $(seq 1 $#); do
    bin=${!i}
    port=$((SIM_PORT + 10 * i))
    if [ "$bin" = haproxy ]; then
        taskset -c 1 haproxy -db -f "$(haproxy_cfg "$port")" >"$work/serve$i.log" 2>&1 &
    else
        taskset -c 1 "$bin" serve --routes "$work/routes.yaml" --listen "127.0.0.1:$port" \
            --admin-listen "127.0.0.1:$((port + 1))" --no-access-log --goaway-chance=0 \
            --workers 1 >"$work/serve$i.log" 2>&1 &
    fi
    pids+=($!)
    serving+=($!)
    ports+=("$port")
done
for port in "${ports[@]}"; do wait_port "$port"; done
# A port still held by the processes of a run just ended answers too: each proxy must be alive.
for i in "${!serving[@]}"; do
    kill -0 "${serving[i]}" 2>/dev/null || {
        echo "ab.sh: proxy $((i + 1)) did not start:" >&2
        cat "$work/serve$((i + 1)).log" >&2
        exit 1
    }
done

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# CPU µs per GET of process PID serving PORT, under h2load with the remaining arguments.
measure() {
    local pid=$1 port=$2
    shift 2
    local t0 t1 done_
    t0=$(cpu_ticks "$pid")
    taskset -c 0 h2load -D "$SECONDS_EACH" "$@" \
        "http://127.0.0.1:$port/api/v1/namespaces/default/configmaps/small" >"$work/h2load.txt" 2>&1
    t1=$(cpu_ticks "$pid")
    done_=$(grep -oP 'requests: \d+ total, \d+ started, \K\d+(?= done)' "$work/h2load.txt")
    [ "${done_:-0}" -gt 0 ] || { echo "ab.sh: no request done on port $port" >&2; exit 1; }
    awk -v t="$((t1 - t0))" -v n="$done_" -v hz="$(getconf CLK_TCK)" \
        'BEGIN { printf "%.2f", t / hz * 1e6 / n }'
}

declare -a h2 h1
for _ in $(seq 1 "$ROUNDS"); do
    for i in "${!serving[@]}"; do
        h2[i]+=" $(measure "${serving[i]}" "${ports[i]}" -c 4 -m 16)"
        h1[i]+=" $(measure "${serving[i]}" "${ports[i]}" --h1 -c 64 -m 1)"
    done
done

median() { tr ' ' '\n' | grep . | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
echo "CPU µs per GET, pinned, one worker; every round, then the median"
for i in "${!serving[@]}"; do
    n=$((i + 1))
    echo "${!n}"
    echo "  h2c:     ${h2[i]}   median $(echo "${h2[i]}" | median)"
    echo "  HTTP/1.1:${h1[i]}   median $(echo "${h1[i]}" | median)"
done
