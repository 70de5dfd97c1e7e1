#!/usr/bin/env bash
# Instructions per proxied GET of one or more builds of skewgate, counted by valgrind's callgrind:
# user-space work only (no kernel, no cache or scheduling effects), the same to within 0.1 % from
# run to run, so that a change of a few hundred instructions per request shows, where CPU time
# moves by more than that between runs.
#
#   bench/instructions.sh OLD_SKEWGATE NEW_SKEWGATE [...]
#   KEEP=DIR bench/instructions.sh ...   also keeps callgrind's files in DIR, for callgrind_annotate
#
# Each build serves with one worker under callgrind, behind one simulator; after a warm-up of 2,000
# requests, COUNT (10,000) GETs are counted, over h2c (4 connections, 4 streams each) and over
# HTTP/1.1 (16 connections). HAProxy, when installed, is counted the same way after the builds (one
# thread, h2 to the simulator, reused: as the load bench configures it), as the yardstick
# (HAPROXY=0 leaves it out). LOAD_BIN=<the load bench's binary, target/release/deps/load-*> also
# counts its yardsticks: `bare` (hyper and h2 only), `bare-h2` (h2's server instead of hyper's, h2c
# only), `bare+frames` (frames upstream) and `floor` (the frame relay, h2c only).
# Beside each count, the locked instructions per GET (`lock`-prefixed and `xchg`: atomic
# read-modify-writes, which callgrind counts as one instruction each but which cost a few
# nanoseconds each here, more when another core wrote the line): found by objdump in the serving
# binary, and counted by callgrind per instruction address.
# Needs valgrind, h2load (nghttp2-client), curl and objdump (binutils).
set -euo pipefail
COUNT=${COUNT:-10000}
SIM_PORT=${SIM_PORT:-18381}
PORT=$((SIM_PORT + 20))
[ $# -ge 1 ] || { sed -n '2,12p' "$0"; exit 2; }
for tool in valgrind callgrind_control h2load curl objdump; do
    command -v "$tool" >/dev/null || { echo "instructions.sh: $tool is not installed" >&2; exit 2; }
done
. "$(dirname "$0")/setup.sh"
start_sim "$1"
url="http://127.0.0.1:$PORT/api/v1/namespaces/default/configmaps/small"

# The proxy each count starts: skewgate build $1, HAProxy when $1 is `haproxy`, or the load bench's
# yardstick when $1 is `bare` or `floor`.
serve_cmd() {
    if [ "${1#bare}" != "$1" ] || [ "$1" = floor ]; then
        local mode=(--bare "127.0.0.1:$PORT")
        case $1 in
            floor) mode=(--relay-floor "127.0.0.1:$PORT") ;;
            bare-h2) mode+=(--bare-server h2) ;;
            bare+frames) mode+=(--bare-upstream frames) ;;
        esac
        echo "$LOAD_BIN" "${mode[@]}" --relay-upstream "127.0.0.1:$SIM_PORT"
    elif [ "$1" = haproxy ]; then
        echo haproxy -db -f "$(haproxy_cfg "$PORT")"
    else
        echo "$1" serve --routes "$work/routes.yaml" --listen "127.0.0.1:$PORT" \
            --admin-listen "127.0.0.1:$((PORT + 1))" --no-access-log --goaway-chance=0 --workers 1
    fi
}

h2c_only() { [ "$1" = floor ] || [ "$1" = bare-h2 ]; }

# Instructions per GET of build $1 (or HAProxy) under h2load with the remaining arguments.
count() {
    local bin=$1 out="$work/callgrind.out"
    shift
    rm -f "$out"*
    # Instrumented only while the counted requests run: start-up and warm-up are left out.
    # shellcheck disable=SC2046
    valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$out" \
        --dump-instr=yes --compress-pos=no --compress-strings=no \
        $(serve_cmd "$bin") >"$work/serve.log" 2>&1 &
    local pid=$!
    # The floor and bare-h2 speak h2c only.
    if h2c_only "$bin"; then wait_port "$PORT" --http2-prior-knowledge; else wait_port "$PORT"; fi
    h2load -n 2000 "$@" "$url" >/dev/null 2>&1
    callgrind_control -i on "$pid" >/dev/null 2>&1
    local done_
    done_=$(h2load -n "$COUNT" "$@" "$url" | grep -oP 'requests: \d+ total, \d+ started, \K\d+(?= done)')
    callgrind_control -i off "$pid" >/dev/null 2>&1
    callgrind_control -d "$pid" >/dev/null 2>&1
    kill "$pid"
    wait "$pid" 2>/dev/null || true
    if [ -n "${KEEP:-}" ]; then
        mkdir -p "$KEEP"
        local name=$bin
        [ -x "$bin" ] && name=$(basename "$(dirname "$bin")")
        for f in "$out"*; do cp "$f" "$KEEP/$name-$proto-$(basename "$f")"; done
    fi
    local total locked
    total=$(grep -h '^totals:' "$out"* | awk -v n="$done_" '{ s += $2 } END { printf "%.0f", s / n }')
    locked=$(locked_per_get "$(serve_cmd "$bin" | cut -d' ' -f1)" "$done_" "$out"*)
    echo "$total (locked $locked)"
}

# Locked instructions per GET in binary $1 over $2 GETs, from callgrind files $3...: the count of
# each instruction of $1 that objdump shows with a `lock` prefix or as `xchg`. Calls' lines (the
# cost of the callee, after `calls=`) are not the caller's own instructions.
locked_per_get() {
    local bin n
    bin=$(command -v "$1")
    n=$2
    shift 2
    objdump -d --no-show-raw-insn "$bin" | awk '/^ *[0-9a-f]+:\t(lock|xchg)/ { sub(":", "", $1); print $1 }' \
        >"$work/locked.txt"
    awk -v obj="$(basename "$bin")" -v n="$n" '
        FNR == NR { locked["0x" $1] = 1; next }
        /^ob=/ { ours = index($0, obj) > 0; next }
        /^calls=/ { skip = 1; next }
        /^0x/ {
            if (skip) { skip = 0; next }
            if (ours && ($1 in locked)) s += $NF
            next
        }
        END { printf "%.0f", s / n }' "$work/locked.txt" "$@"
}

targets=("$@")
if [ "${HAPROXY:-1}" != 0 ] && command -v haproxy >/dev/null; then targets+=(haproxy); fi
if [ -n "${LOAD_BIN:-}" ]; then targets+=(bare bare-h2 bare+frames floor); fi
echo "instructions per GET (callgrind, one worker, $COUNT requests)"
for bin in "${targets[@]}"; do
    h2=$(proto=h2c count "$bin" -c 4 -m 4)
    h1=-
    h2c_only "$bin" || h1=$(proto=h1 count "$bin" --h1 -c 16 -m 1)
    printf '%s\n  h2c:      %s\n  HTTP/1.1: %s\n' "$bin" "$h2" "$h1"
done
