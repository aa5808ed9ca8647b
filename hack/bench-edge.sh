#!/usr/bin/env bash
# Benchmarks herd's edge (herd edge) against Varnish and nginx's proxy_cache (both Debian's) on
# loopback (make bench-edge). Each caches in front of the same origin (hack/bench/edge/origin, one
# port per proxy so that each one's origin requests are counted apart): $OBJECTS objects of 2 to 14
# KiB (about 8 KiB on average), cacheable for an hour, about 2.5 times the $CACHE_MB MiB each cache
# is given (herd: spec.cacheSize; Varnish: -s malloc; nginx: max_size). The proxies are pinned to
# one core (PROXY_CPU), the origin and the load generators to the other (LOAD_CPU).
#   1. coalescing: $BURST requests at once for one object not cached yet, which the origin takes
#      500 ms to answer (hack/bench/edge/burst); the origin counts how many reached it. nginx is given
#      proxy_cache_lock, Varnish coalesces by default.
#   2. warm-up: the Zipf workload of step 4 for $WARM s at a low rate, then the hot set.
#   3. hit throughput: wrk -t1 -c$CONNS for $DURATION s over the $HOT most popular objects (all
#      cached: every request is a hit), proxies in rotating order, $ROUNDS rounds; the median
#      requests/s of each, with its CPU time per request (user+sys from /proc, which stays comparable
#      when other work on the machine, not the proxy, is what limits the rate).
#   4. the Zipf workload: objects drawn from a Zipf distribution of exponent $ZIPF (rank 0 the most
#      popular; hack/bench/lb/loadgen -objects) at the fixed rate $ZIPF_RATE, which all three serve
#      and one core's load generator keeps (it is not derived from the hit throughput: at half of it,
#      23,000 req/s, the generator fell behind its own schedule), each round its own sequence (-seed;
#      the same for every proxy), so that no round replays what the one before or the warm-up
#      asked for, which a cache that keeps the most recent objects would be served back; the same
#      rounds: the p99 counted from when each request was due (coordinated-omission safe), and the
#      origin offload, the share of client requests that did not reach the origin over all rounds.
#      The generator runs SCHED_FIFO (chrt -f 1) on its core, so that the origin beside it does not
#      hold its requests. A round whose generator was behind (loadgen's behind: requests sent more
#      than 2 ms late on a connection that was free) for more than $BEHIND_MAX of its requests is flagged and left out
#      of the median p99; without one unflagged round per proxy the script fails. Sampled every
#      second of these rounds, what each cache holds: objects, the bytes it counts against its bound
#      (herd: its weight; Varnish: SMA g_bytes; nginx: its files' blocks), and the process's resident
#      memory; the most each held is logged against its bound, and a cache found over it by more
#      than 5% is named, since its offload is then that of a larger cache.
#   nginx's max_size is held by its cache manager, after the fact, at most every 10 s (a constant
#   of nginx's; manager_* set how fast it deletes once it looks, not how often it looks). The one
#   bound nginx holds at once is its keys zone: when the zone is full, a new file evicts the least
#   recently used. The zone is sized ($NGINX_ZONE_KB KiB) to hold as many files as the bench's
#   objects fit in max_size: 6,207 at 64 MiB, whose blocks are 64.0 MiB.
# The last line is:
#   edge: hit_rps_vs_varnish=<f> hit_rps_vs_nginx=<f> p99_vs_varnish=<f> origin_offload=<f> coalesced_origin_requests=<int>
# where origin_offload and coalesced_origin_requests are herd's (the others' are logged above it).
# Every process it starts runs at nice $BENCH_NICE (default -15). Everything it starts is stopped
# on exit. Knobs: ROUNDS DURATION CONNS OBJECTS ZIPF ZIPF_RATE
# BEHIND_MAX HOT CACHE_MB NGINX_ZONE_KB WARM BURST PROXY_CPU LOAD_CPU BENCH_NICE.
set -euo pipefail

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-8}
CONNS=${CONNS:-64}
OBJECTS=${OBJECTS:-20000}
ZIPF=${ZIPF:-1.01}
HOT=${HOT:-1000}
CACHE_MB=${CACHE_MB:-64}
ZIPF_RATE=${ZIPF_RATE:-5000}
BEHIND_MAX=${BEHIND_MAX:-0.001}
NGINX_ZONE_KB=${NGINX_ZONE_KB:-$((CACHE_MB * 790 / 64))}
WARM=${WARM:-20}
BURST=${BURST:-1000}
PROXY_CPU=${PROXY_CPU:-0}
LOAD_CPU=${LOAD_CPU:-1}
BENCH_NICE=${BENCH_NICE:--15}
PROXIES=(herd varnish nginx)
declare -A PORT=([herd]=18290 [varnish]=18291 [nginx]=18292)
declare -A ORIGIN=([herd]=18300 [varnish]=18301 [nginx]=18302)
HERD_METRICS=18299
declare -A PID

cd "$(dirname "$0")/.."
# shellcheck source=hack/bench/lib.sh
. hack/bench/lib.sh
bench_init bench-edge

# origin_count prints what the origin port of proxy $1 counted: objects=<int> slow=<int>.
origin_count() { curl -fsS "http://127.0.0.1:${ORIGIN[$1]}/_count"; }

# rss_mib prints the resident memory, in MiB, of a process and its children (nginx's worker,
# Varnish's child).
rss_mib() {
	local kib=0 pid
	for pid in "$1" $(pgrep -P "$1" || true); do
		kib=$((kib + $(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status")))
	done
	echo $((kib >> 10))
}

# held prints what proxy $1's cache holds: objects and bytes as the cache itself counts them
# against its bound, and the proxy's resident memory.
held() {
	local m
	case $1 in
	herd)
		m=$(curl -fsS "http://127.0.0.1:$HERD_METRICS/metrics")
		echo "objects=$(awk '/^herd_edge_memory_entries/ {print $2}' <<<"$m")" \
			"bytes=$(awk '/^herd_edge_memory_bytes/ {printf "%d", $2}' <<<"$m")" \
			"heap_inuse=$(awk '/^go_memstats_heap_inuse_bytes/ {printf "%d", $2}' <<<"$m")"
		;;
	varnish)
		m=$(varnishstat -n "$WORK/varnish" -1 -f MAIN.n_object -f SMA.s0.g_bytes)
		echo "objects=$(awk '$1 == "MAIN.n_object" {print $2}' <<<"$m")" \
			"bytes=$(awk '$1 == "SMA.s0.g_bytes" {print $2}' <<<"$m")"
		;;
	nginx) # the cache manager counts the files' blocks against max_size (find's %b: 512-byte blocks);
		# a file deleted while find walks the tree is not held, and not an error
		find "$WORK/nginx-cache" -type f -printf '%s %b\n' 2>/dev/null |
			awk '{n++; b += $1; k += $2 * 512} END {printf "objects=%d bytes=%d blocks_bytes=%d\n", n, b, k}'
		;;
	esac
	echo "rss_mib=$(rss_mib "${PID[$1]}")"
}

# held_samples appends what proxy $1's cache holds (held, one line) to $2 every second until
# killed: a cache that holds its bound only after the fact (nginx) holds more between its checks
# than at the end.
held_samples() {
	while sleep 1; do
		held "$1" | tr '\n' ' ' >>"$2"
		echo >>"$2"
	done
}

# held_most prints the most objects and bytes (against the bound: nginx's blocks) in the samples
# files $@, and the bytes' ratio to the bound.
held_most() {
	cat "$@" | awk -v bound=$((CACHE_MB << 20)) '{
		o = 0; b = -1; k = -1
		for (i = 1; i <= NF; i++) {
			split($i, kv, "=")
			if (kv[1] == "objects") o = kv[2]
			if (kv[1] == "bytes") b = kv[2]
			if (kv[1] == "blocks_bytes") k = kv[2]
		}
		if (k >= 0) b = k
		if (o > om) om = o
		if (b > bm) bm = b
	} END { printf "objects=%d bytes=%d bound_ratio=%.2f\n", om, bm, bm / bound }'
}

# field prints the value of key $1 in a line of key=value pairs.
field() { tr ' ' '\n' <<<"$2" | awk -F= -v k="$1" '$1 == k {print $2}'; }

write_configs() {
	cat >"$WORK/herd.yaml" <<EOF
apiVersion: herd.dev/v1alpha1
kind: Distribution
metadata: {name: bench}
spec:
  cacheSize: $((CACHE_MB << 20))
  listeners:
    - {port: ${PORT[herd]}}
  origins:
    - {name: origin, url: "http://127.0.0.1:${ORIGIN[herd]}"}
  behaviors:
    - {pathPattern: "*", origin: origin}
EOF
	cat >"$WORK/varnish.vcl" <<EOF
vcl 4.1;
backend origin {
    .host = "127.0.0.1";
    .port = "${ORIGIN[varnish]}";
}
EOF
	# The worker runs as root: it writes the cache under $WORK, which only root may write to.
	# nginx's cache manager holds max_size after the fact: it checks the size at most every 10 s and
	# by default then deletes at most 100 files per 50 ms, which let this bench's cache grow to 2.5
	# times max_size. It is given its tightest pace (manager_*) and a keys zone that holds as many
	# files as max_size does (above), so that the bound holds as well as nginx can hold it.
	cat >"$WORK/nginx.conf" <<EOF
user root;
worker_processes 1;
worker_rlimit_nofile 16384;
pid $WORK/nginx.pid;
error_log $WORK/nginx-error.log warn;
events { worker_connections 8192; }
http {
    access_log off;
    keepalive_requests 1000000;
    keepalive_timeout 60s;
    proxy_cache_path $WORK/nginx-cache levels=1:2 keys_zone=edge:${NGINX_ZONE_KB}k max_size=${CACHE_MB}m inactive=1h use_temp_path=off manager_files=100000 manager_sleep=10ms manager_threshold=1000ms;
    upstream origin {
        server 127.0.0.1:${ORIGIN[nginx]};
        keepalive 256;
    }
    server {
        listen 127.0.0.1:${PORT[nginx]} backlog=4096;
        location / {
            proxy_pass http://origin;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_cache edge;
            proxy_cache_lock on;
            proxy_cache_lock_timeout 10s;
            add_header X-Cache \$upstream_cache_status;
        }
    }
}
EOF
	# wrk's request for the hot set: object 0 to HOT-1 in turn, each request prepared once.
	cat >"$WORK/hot.lua" <<EOF
local n = $HOT
local reqs = {}
local i = 0
function init(args)
    for k = 0, n - 1 do reqs[k] = wrk.format("GET", "/obj/" .. k) end
end
function request()
    i = (i + 1) % n
    return reqs[i]
end
EOF
}

install_missing nginx:nginx wrk:wrk taskset:util-linux curl:curl
[ -x /usr/sbin/varnishd ] || { log "no /usr/sbin/varnishd: make deps (hack/install-deps.sh) installs Varnish"; exit 1; }
ulimit -n "$(ulimit -Hn)" # the burst's connections
log "building"
go build -o "$WORK/origin" ./hack/bench/edge/origin
go build -o "$WORK/burst" ./hack/bench/edge/burst
go build -o "$WORK/loadgen" ./hack/bench/lb/loadgen
write_configs

origins=""
for p in "${PROXIES[@]}"; do origins+="${origins:+,}127.0.0.1:${ORIGIN[$p]}"; done
GOMAXPROCS=1 start "$LOAD_CPU" "$WORK/origin" -addrs "$origins" -objects "$OBJECTS"
GOMAXPROCS=1 start "$PROXY_CPU" bin/herd edge -f "$WORK/herd.yaml" --metrics-addr "127.0.0.1:$HERD_METRICS" \
	--data-dir "$WORK/herd-data"
PID[herd]=$!
start "$PROXY_CPU" /usr/sbin/varnishd -F -j none -n "$WORK/varnish" -a "127.0.0.1:${PORT[varnish]}" \
	-f "$WORK/varnish.vcl" -s "malloc,${CACHE_MB}m" -p thread_pools=1
PID[varnish]=$!
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
start "$PROXY_CPU" "$NGINX" -p "$WORK" -c "$WORK/nginx.conf" -g "daemon off;"
PID[nginx]=$!
for port in "${PORT[@]}" "${ORIGIN[@]}" "$HERD_METRICS"; do
	wait_port "$port"
done
log "$(/usr/sbin/varnishd -V 2>&1 | head -1); $("$NGINX" -v 2>&1); $(wrk -v 2>&1 | head -1 || true)"
log "proxies on cpu $PROXY_CPU; origin, wrk, loadgen and burst on cpu $LOAD_CPU; $OBJECTS objects, ${CACHE_MB} MiB caches;" \
	"$ROUNDS rounds of ${DURATION}s; nice $BENCH_NICE; load average $(cut -d' ' -f1-3 /proc/loadavg)"

# 1. Coalescing, on cold caches.
declare -A COALESCED
for p in "${PROXIES[@]}"; do
	out=$(on "$LOAD_CPU" "$WORK/burst" -n "$BURST" -url "http://127.0.0.1:${PORT[$p]}/slow/burst" || true)
	COALESCED[$p]=$(field slow "$(origin_count "$p")")
	log "coalescing $p: $BURST requests at once ($out) made ${COALESCED[$p]} origin requests"
done

# 2. Warm-up: the Zipf workload, then the hot set.
for p in "${PROXIES[@]}"; do
	GOMAXPROCS=1 on "$LOAD_CPU" "$WORK/loadgen" -addr "127.0.0.1:${PORT[$p]}" -path /obj/ -objects "$OBJECTS" \
		-zipf "$ZIPF" -rate 2000 -duration "${WARM}s" -warmup 0s -conns "$CONNS" >/dev/null
	on "$LOAD_CPU" wrk -t1 -c"$CONNS" -d2s -s "$WORK/hot.lua" "http://127.0.0.1:${PORT[$p]}" >/dev/null
	log "warmed $p: $(origin_count "$p")"
done

# 3. Hit throughput.
declare -A RPS CPU
TICK_US=$((1000000 / $(getconf CLK_TCK)))
for round in $(seq 1 "$ROUNDS"); do
	mapfile -t order < <(rotated "$round" "${PROXIES[@]}")
	for p in "${order[@]}"; do
		before=$(field objects "$(origin_count "$p")")
		t0=$(cpu_ticks "${PID[$p]}")
		out=$(on "$LOAD_CPU" wrk -t1 -c"$CONNS" -d"${DURATION}s" -s "$WORK/hot.lua" "http://127.0.0.1:${PORT[$p]}")
		t1=$(cpu_ticks "${PID[$p]}")
		misses=$(($(field objects "$(origin_count "$p")") - before))
		rps=$(awk '/^Requests\/sec:/ {print $2}' <<<"$out")
		reqs=$(awk '/requests in/ {print $1}' <<<"$out")
		cpu=$(awk -v t=$((t1 - t0)) -v us="$TICK_US" -v n="$reqs" 'BEGIN {printf "%.1f", t * us / n}')
		errs=$(awk '/Non-2xx|Socket errors/' <<<"$out")
		log "hit round $round $p: ${rps} req/s, ${cpu} us CPU/request, $misses origin requests ${errs}"
		RPS[$p]+="$rps "
		CPU[$p]+="$cpu "
	done
done
declare -A RPS_MED CPU_MED
for p in "${PROXIES[@]}"; do
	RPS_MED[$p]=$(medians_of "${RPS[$p]}")
	CPU_MED[$p]=$(medians_of "${CPU[$p]}")
done
slowest=$(for p in "${PROXIES[@]}"; do echo "${RPS_MED[$p]}"; done | sort -g | head -1)
if awk -v r="$ZIPF_RATE" -v s="$slowest" 'BEGIN {exit !(r > s / 2)}'; then
	log "ZIPF_RATE $ZIPF_RATE is over half the slowest proxy's hit throughput ($slowest): the machine is busy, the p99s measure it"
fi

# 4. The Zipf workload at a fixed rate.
log "Zipf workload at $ZIPF_RATE req/s"
declare -A P99 SENT FETCHED
for round in $(seq 1 "$ROUNDS"); do
	mapfile -t order < <(rotated "$round" "${PROXIES[@]}")
	for p in "${order[@]}"; do
		before=$(field objects "$(origin_count "$p")")
		held_samples "$p" "$WORK/held-$p-$round" &
		sampler=$!
		PIDS+=("$sampler")
		taskset -pc "$LOAD_CPU" "$sampler" >/dev/null
		# The generator runs SCHED_FIFO: the origin shares its core at the same nice, and without it a
		# request due while the origin ran waited for the origin's slice.
		out=$(GOMAXPROCS=1 on "$LOAD_CPU" chrt -f 1 "$WORK/loadgen" -addr "127.0.0.1:${PORT[$p]}" -path /obj/ -objects "$OBJECTS" \
			-zipf "$ZIPF" -seed $((round + 1)) -rate "$ZIPF_RATE" -duration "${DURATION}s" -warmup 1s -conns "$CONNS")
		kill "$sampler" 2>/dev/null || true
		wait "$sampler" 2>/dev/null || true
		fetched=$(($(field objects "$(origin_count "$p")") - before))
		sent=$(field sent "$out")
		SENT[$p]=$((${SENT[$p]:-0} + sent))
		FETCHED[$p]=$((${FETCHED[$p]:-0} + fetched))
		if awk -v b="$(field behind "$out")" -v n="$(field ok "$out")" -v m="$BEHIND_MAX" 'BEGIN {exit !(b > m * n)}'; then
			log "zipf round $round $p: $out origin_requests=$fetched FLAGGED: the load generator fell behind, p99 left out"
			continue
		fi
		log "zipf round $round $p: $out origin_requests=$fetched"
		P99[$p]+="$(field p99_us "$out") "
	done
done
declare -A P99_MED OFFLOAD
for p in "${PROXIES[@]}"; do
	P99_MED[$p]=$(medians_of "${P99[$p]:-0}")
	OFFLOAD[$p]=$(awk -v f="${FETCHED[$p]}" -v s="${SENT[$p]}" 'BEGIN {printf "%.4f", 1 - f / s}')
	log "$p: median ${RPS_MED[$p]} hits/s, ${CPU_MED[$p]} us CPU/hit; median p99 ${P99_MED[$p]} us at $ZIPF_RATE req/s;" \
		"origin offload ${OFFLOAD[$p]} (${FETCHED[$p]} of ${SENT[$p]}); ${COALESCED[$p]} origin requests for $BURST at once"
done
for p in "${PROXIES[@]}"; do
	log "$p holds: $(held "$p" | tr '\n' ' ')(cache bound $((CACHE_MB << 20)))"
	for round in $(seq 1 "$ROUNDS"); do
		log "$p held at most in Zipf round $round: $(held_most "$WORK/held-$p-$round")"
	done
	most=$(held_most "$WORK"/held-"$p"-*)
	log "$p held at most in the Zipf rounds: $most (of its bound $((CACHE_MB << 20)))"
	if awk -v r="$(field bound_ratio "$most")" 'BEGIN {exit !(r > 1.05)}'; then
		log "$p held more than its bound: its origin offload is that of a larger cache"
	fi
done
log "herd's own counters: $(curl -fsS "http://127.0.0.1:$HERD_METRICS/metrics" | awk '/^herd_edge_/ {printf "%s=%s ", $1, $2}')"
log "load average $(cut -d' ' -f1-3 /proc/loadavg)"
for p in "${PROXIES[@]}"; do
	if [ -z "${P99[$p]:-}" ]; then
		log "$p: the load generator fell behind in every Zipf round, no p99 to compare: no result (run it on a quieter machine, or lower ZIPF_RATE)"
		exit 1
	fi
done
awk -v h="${RPS_MED[herd]}" -v v="${RPS_MED[varnish]}" -v n="${RPS_MED[nginx]}" \
	-v hp="${P99_MED[herd]}" -v vp="${P99_MED[varnish]}" -v o="${OFFLOAD[herd]}" -v c="${COALESCED[herd]}" 'BEGIN {
	printf "edge: hit_rps_vs_varnish=%.2f hit_rps_vs_nginx=%.2f p99_vs_varnish=%.2f origin_offload=%.4f coalesced_origin_requests=%d\n",
		h / v, h / n, hp / vp, o, c }'
