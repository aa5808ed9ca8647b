#!/usr/bin/env bash
# Benchmarks herd's load balancer against HAProxy and nginx on loopback (make bench-lb). herd runs twice:
# with its fast HTTP/1.1 engine (herd) and with the net/http one (herd-nethttp, HERD_LB_ENGINE=net/http),
# so the fast engine's worth stays measured.
#
# Three identical Go backends (hack/bench/lb/backend, a minimal keep-alive responder) answer 1 KiB.
# Each proxy balances over them by least connections, with keep-alive on both sides and
# X-Forwarded-For/Proto set, pinned to the same single core (PROXY_CPU); wrk, the fixed-rate load
# generator and the backends share the other core (LOAD_CPU).
#   1. saturation: wrk -t1 -c$CONNS for $DURATION s per round, proxies in rotating order, $ROUNDS rounds;
#      the median requests/s of each proxy is reported, with the proxy's CPU time per request (user+sys,
#      from /proc), which stays comparable when the load side, not the proxy, is what saturates, and
#      what each proxy costs the load core per request: wrk's CPU time and the backends', and the context
#      switches per request of the backends' and the proxy's threads (/proc), which say in how large
#      batches each side's wakeups serve requests, the load core's software-interrupt time and the
#      function-call and rescheduling interrupts the proxy's core received (most of them wakeups of
#      a proxy that slept, which the load core pays for).
#   2. latency: a fixed rate of half HAProxy's median saturation rate, the same rounds; the median p99
#      of each proxy is reported (hack/bench/lb/loadgen, coordinated-omission safe).
#   3. TLS: herd, HAProxy and nginx terminate TLS with the same ECDSA P-256 certificate (ALPN h2 and
#      http/1.1), TLS 1.2 and 1.3 enabled on all three (nginx 1.22's default lacks 1.3), and the same
#      TLS 1.3 cipher suite preferred (TLS13_SUITES). An OpenSSL s_client probe of each logs what an
#      OpenSSL 3.0 client (wrk's library) negotiates. Per proxy per
#      round, hack/bench/lb/handshakes makes new connections of one request each: full handshakes
#      (no session resumed) offering X25519 alone, the group the OpenSSL 3.0 servers can choose, so
#      that each handshake is the same work on all three (new handshakes/s, and the proxy's CPU time
#      per handshake); then the same resuming each worker's last session (resumed handshakes/s); for
#      herd also full handshakes offering X25519MLKEM768 first, as current browsers do (Go's server
#      chooses the post-quantum hybrid, which OpenSSL 3.0 lacks); then wrk with keep-alive measures
#      requests/s over TLS, with the proxy's CPU time per request. Medians of the same rounds. Then
#      hack/bench/lb/loadgen -tls-ca at TLS_RATE (default: half of HAProxy's median keep-alive rate over
#      TLS): each proxy's CPU time per request (and p99) at one rate for all three.
# The last line is:
#   lb: herd_rps=<int> haproxy_rps=<int> nginx_rps=<int> rps_vs_haproxy=<f> rps_vs_nginx=<f> p99_vs_haproxy=<f>
#       herd_nethttp_rps=<int> fast_vs_nethttp_rps=<f> fast_vs_nethttp_p99=<f>
#       tls_handshakes_vs_haproxy=<f> tls_rps_vs_haproxy=<f>
# Every process it starts runs at nice $BENCH_NICE (default -15), so other work on the machine
# disturbs the figures less. Everything it starts is stopped on exit.
# Knobs: ROUNDS DURATION CONNS PROXY_CPU LOAD_CPU BENCH_NICE TLS_RATE HERD_B_FLAGS, and PHASES (or the flag -phases LIST,
# which make bench-lb takes from BENCH_LB_FLAGS): a comma-separated subset of http (saturation and
# latency in cleartext), tls-handshakes and tls-keepalive, all three by default. A subset run prints
# only its own fields on the last line, e.g.
#   make bench-lb BENCH_LB_FLAGS='-phases tls-keepalive'
# measures keep-alive requests over TLS alone, the three proxies taking turns, in about 5 minutes.
# HERD_B_FLAGS adds a fourth TLS proxy, herd-b: herd lb with those extra flags, taking its turn in the
# same rounds, so that a variant is compared with herd round by round (drift between runs is larger
# than the effects such a comparison looks for); the TLS keep-alive phase then logs each herd's
# requests/s over HAProxy's, averaged over the rounds, and how many rounds each came out ahead, e.g.
#   HERD_B_FLAGS='--busy-poll 0' ROUNDS=12 ./hack/bench-lb.sh -phases tls-keepalive
set -euo pipefail

PHASES=${PHASES:-http,tls-handshakes,tls-keepalive}
while [ $# -gt 0 ]; do
	case $1 in
	-phases) PHASES=${2:?-phases needs a list: http,tls-handshakes,tls-keepalive}; shift 2 ;;
	-phases=*) PHASES=${1#-phases=}; shift ;;
	*) echo "bench-lb: unknown argument $1 (known: -phases http,tls-handshakes,tls-keepalive)" >&2; exit 2 ;;
	esac
done
for ph in ${PHASES//,/ }; do
	case $ph in
	http | tls-handshakes | tls-keepalive) ;;
	*) echo "bench-lb: -phases: unknown phase $ph (known: http, tls-handshakes, tls-keepalive)" >&2; exit 2 ;;
	esac
done
# phase NAME reports whether the run includes that phase.
phase() { [[ ",$PHASES," == *",$1,"* ]]; }

ROUNDS=${ROUNDS:-5}
DURATION=${DURATION:-8}
CONNS=${CONNS:-64}
PROXY_CPU=${PROXY_CPU:-0}
LOAD_CPU=${LOAD_CPU:-1}
BENCH_NICE=${BENCH_NICE:--15}
BACKEND_PORTS=(18081 18082 18083)
declare -A PORT=([herd]=18090 [haproxy]=18091 [nginx]=18092 [herd-nethttp]=18093)
declare -A TLS_PORT=([herd]=18190 [haproxy]=18191 [nginx]=18192)
TLS_PROXIES=(herd haproxy nginx)
HERD_B_FLAGS=${HERD_B_FLAGS:-}
if [ -n "$HERD_B_FLAGS" ]; then
	TLS_PORT[herd-b]=18194
	TLS_PROXIES+=(herd-b)
fi
declare -A PID
# The TLS 1.3 cipher suites HAProxy and nginx choose from, in their order of preference: AES-128-GCM
# first, the suite Go's server chooses on a CPU with AES instructions (its TLS 1.3 order cannot be
# configured), so that the three encrypt alike. Left to themselves, HAProxy prefers AES-256-GCM and
# nginx takes the client's order, which for wrk's OpenSSL 3.0 is AES-256-GCM too.
TLS13_SUITES=TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256
PROXIES=(herd herd-nethttp haproxy nginx)

cd "$(dirname "$0")/.."
# shellcheck source=hack/bench/lib.sh
. hack/bench/lib.sh
bench_init bench-lb

write_configs() {
	local servers_haproxy="" servers_nginx="" targets_herd="" i=0 port
	for port in "${BACKEND_PORTS[@]}"; do
		i=$((i + 1))
		servers_haproxy+="    server b$i 127.0.0.1:$port check inter 1s"$'\n'
		servers_nginx+="        server 127.0.0.1:$port;"$'\n'
		targets_herd+="          - {id: b$i, address: 127.0.0.1:$port}"$'\n'
	done
	local p
	for p in herd herd-nethttp; do
		cat >"$WORK/$p.yaml" <<EOF
listeners:
  - name: bench/http
    fleet: bench
    address: 127.0.0.1:${PORT[$p]}
    healthCheck: {path: /healthz, interval: 1s}
    groups:
      - name: r1
        targets:
$targets_herd
EOF
	done
	# tls_listener PORT prints herd's TLS listener on PORT.
	tls_listener() {
		cat <<EOF
  - name: bench/https
    fleet: bench
    address: 127.0.0.1:$1
    tls: {certFile: $WORK/cert.pem, keyFile: $WORK/key.pem}
    healthCheck: {path: /healthz, interval: 1s}
    groups:
      - name: r1
        targets:
$targets_herd
EOF
	}
	tls_listener "${TLS_PORT[herd]}" >>"$WORK/herd.yaml"
	if [ -n "$HERD_B_FLAGS" ]; then
		{
			echo "listeners:"
			tls_listener "${TLS_PORT[herd-b]}"
		} >"$WORK/herd-b.yaml"
	fi
	cat >"$WORK/haproxy.cfg" <<EOF
global
    nbthread 1
    maxconn 4096
    ssl-default-bind-ciphersuites $TLS13_SUITES
defaults
    mode http
    option http-keep-alive
    option forwardfor
    http-reuse always
    timeout connect 2s
    timeout client 60s
    timeout server 60s
    timeout http-request 10s
    timeout http-keep-alive 60s
frontend fe
    bind 127.0.0.1:${PORT[haproxy]}
    http-request set-header X-Forwarded-Proto http
    default_backend be
frontend fe_tls
    bind 127.0.0.1:${TLS_PORT[haproxy]} ssl crt $WORK/cert-key.pem alpn h2,http/1.1
    http-request set-header X-Forwarded-Proto https
    default_backend be
backend be
    balance leastconn
    option httpchk GET /healthz
$servers_haproxy
EOF
	cat >"$WORK/nginx.conf" <<EOF
worker_processes 1;
pid $WORK/nginx.pid;
error_log $WORK/nginx-error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    keepalive_requests 1000000;
    keepalive_timeout 60s;
    upstream be {
        least_conn;
$servers_nginx
        keepalive 256;
        keepalive_requests 1000000;
    }
    server {
        listen 127.0.0.1:${PORT[nginx]};
        listen 127.0.0.1:${TLS_PORT[nginx]} ssl http2;
        ssl_certificate $WORK/cert.pem;
        ssl_certificate_key $WORK/key.pem;
        ssl_protocols TLSv1.2 TLSv1.3;
        ssl_prefer_server_ciphers on;
        ssl_conf_command Ciphersuites $TLS13_SUITES;
        location / {
            proxy_pass http://be;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host \$host;
            proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
            proxy_set_header X-Forwarded-Proto \$scheme;
        }
    }
}
EOF
}

install_missing haproxy:haproxy nginx:nginx wrk:wrk taskset:util-linux openssl:openssl
# One ECDSA P-256 certificate for every proxy's TLS listener (HAProxy wants it beside its key).
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 -subj /CN=localhost \
	-addext subjectAltName=IP:127.0.0.1 -keyout "$WORK/key.pem" -out "$WORK/cert.pem" 2>/dev/null
cat "$WORK/cert.pem" "$WORK/key.pem" >"$WORK/cert-key.pem"
log "building"
go build -o "$WORK/backend" ./hack/bench/lb/backend
go build -o "$WORK/loadgen" ./hack/bench/lb/loadgen
go build -o "$WORK/handshakes" ./hack/bench/lb/handshakes
write_configs
HAPROXY=$(command -v haproxy || echo /usr/sbin/haproxy)
NGINX=$(command -v nginx || echo /usr/sbin/nginx)

BACKEND_PIDS=()
for port in "${BACKEND_PORTS[@]}"; do
	GOMAXPROCS=1 start "$LOAD_CPU" "$WORK/backend" -addr "127.0.0.1:$port"
	BACKEND_PIDS+=($!)
done
GOMAXPROCS=1 start "$PROXY_CPU" bin/herd lb --admin-addr "" -f "$WORK/herd.yaml"
PID[herd]=$!
# start logs by command name: the second herd logs to its own file.
GOMAXPROCS=1 HERD_LB_ENGINE=net/http nice -n "$BENCH_NICE" taskset -c "$PROXY_CPU" \
	bin/herd lb --admin-addr "" -f "$WORK/herd-nethttp.yaml" >>"$WORK/herd-nethttp.log" 2>&1 &
PIDS+=($!)
PID[herd-nethttp]=$!
if [ -n "$HERD_B_FLAGS" ]; then
	# shellcheck disable=SC2086 # the flags are words
	GOMAXPROCS=1 nice -n "$BENCH_NICE" taskset -c "$PROXY_CPU" \
		bin/herd lb --admin-addr "" -f "$WORK/herd-b.yaml" $HERD_B_FLAGS >>"$WORK/herd-b.log" 2>&1 &
	PIDS+=($!)
	PID[herd-b]=$!
fi
start "$PROXY_CPU" "$HAPROXY" -db -f "$WORK/haproxy.cfg"
PID[haproxy]=$!
start "$PROXY_CPU" "$NGINX" -p "$WORK" -c "$WORK/nginx.conf" -g "daemon off;"
PID[nginx]=$!
for port in "${BACKEND_PORTS[@]}" "${PORT[@]}" "${TLS_PORT[@]}"; do
	wait_port "$port"
done
sleep 2 # first health checks
log "$("$HAPROXY" -v | head -1); $("$NGINX" -v 2>&1); $(wrk -v 2>&1 | head -1 || true)"
log "proxies on cpu $PROXY_CPU; wrk, loadgen and backends on cpu $LOAD_CPU; $ROUNDS rounds of ${DURATION}s; nice $BENCH_NICE"

TICK_US=$((1000000 / $(getconf CLK_TCK)))
# backends_sum FUNC prints the sum of FUNC (cpu_ticks or switches) over the backends.
backends_sum() {
	local total=0 pid
	for pid in "${BACKEND_PIDS[@]}"; do
		total=$((total + $("$1" "$pid")))
	done
	echo "$total"
}
# wrk_round PROXY URL runs wrk against URL and prints the requests/s, the proxy's CPU time per
# request (us), the load core's: wrk's and the backends' (us), the context switches per request of
# the backends and of the proxy, the load core's software-interrupt time per request (us) and the
# function-call and rescheduling interrupts the proxy's core received per request, then wrk's error
# lines. When the load core is what saturates, the proxy that costs it less per request serves more;
# the backends' switches say how many requests each of their wakeups serves, and the proxy core's
# interrupts how often the load core had to wake a sleeping proxy. The last two are the whole
# machine's counters: a quiet run is what makes them the proxy's.
wrk_round() {
	local p=$1 url=$2 t0 t1 b0 b1 s0 s1 ps0 ps1 q0 q1 i0 i1 out reqs wrk_s
	q0=$(softirq_ticks "$LOAD_CPU")
	i0=$(ipis "$PROXY_CPU")
	t0=$(cpu_ticks "${PID[$p]}")
	b0=$(backends_sum cpu_ticks)
	s0=$(backends_sum switches)
	ps0=$(switches "${PID[$p]}")
	# times, in the same subshell, gives wrk's user and system time (its children's).
	out=$(
		on "$LOAD_CPU" wrk -t1 -c"$CONNS" -d"${DURATION}s" "$url"
		times
	)
	t1=$(cpu_ticks "${PID[$p]}")
	b1=$(backends_sum cpu_ticks)
	s1=$(backends_sum switches)
	ps1=$(switches "${PID[$p]}")
	q1=$(softirq_ticks "$LOAD_CPU")
	i1=$(ipis "$PROXY_CPU")
	reqs=$(awk '/requests in/ {print $1}' <<<"$out")
	wrk_s=$(tail -1 <<<"$out" | awk '{
		for (i = 1; i <= 2; i++) { split($i, a, /[ms]/); s += a[1] * 60 + a[2] }
		print s }')
	echo "$(awk '/^Requests\/sec:/ {print $2}' <<<"$out")" \
		"$(awk -v t=$((t1 - t0)) -v us="$TICK_US" -v n="$reqs" 'BEGIN {printf "%.1f", t * us / n}')" \
		"$(awk -v s="$wrk_s" -v n="$reqs" 'BEGIN {printf "%.1f", s * 1e6 / n}')" \
		"$(awk -v t=$((b1 - b0)) -v us="$TICK_US" -v n="$reqs" 'BEGIN {printf "%.1f", t * us / n}')" \
		"$(awk -v s=$((s1 - s0)) -v n="$reqs" 'BEGIN {printf "%.3f", s / n}')" \
		"$(awk -v s=$((ps1 - ps0)) -v n="$reqs" 'BEGIN {printf "%.3f", s / n}')" \
		"$(awk -v t=$((q1 - q0)) -v us="$TICK_US" -v n="$reqs" 'BEGIN {printf "%.1f", t * us / n}')" \
		"$(awk -v s=$((i1 - i0)) -v n="$reqs" 'BEGIN {printf "%.3f", s / n}')" \
		"$(awk '/Non-2xx|Socket errors/' <<<"$out" | tr '\n' ' ')"
}
FIELDS=""

if phase http; then
	# Warm every proxy's connection pools and the page cache.
	for p in "${PROXIES[@]}"; do
		on "$LOAD_CPU" wrk -t1 -c"$CONNS" -d2s "http://127.0.0.1:${PORT[$p]}/" >/dev/null
	done
	declare -A RPS P99 CPU WRK BE
	for round in $(seq 1 "$ROUNDS"); do
		# Rotate the order each round so no proxy always goes first.
		mapfile -t order < <(rotated "$round" "${PROXIES[@]}")
		for p in "${order[@]}"; do
			read -r rps cpu wrk be bsw psw sirq ipi errs < <(wrk_round "$p" "http://127.0.0.1:${PORT[$p]}/")
			log "saturation round $round $p: ${rps} req/s, ${cpu} us CPU/request; load core ${wrk} us wrk + ${be} us backends per request;" \
				"context switches per request: backends ${bsw}, proxy ${psw}; load core softirq ${sirq} us, interrupts to the proxy core ${ipi} per request ${errs}"
			RPS[$p]+="$rps "
			CPU[$p]+="$cpu "
			WRK[$p]+="$wrk "
			BE[$p]+="$be "
		done
	done
	declare -A RPS_MED CPU_MED
	for p in "${PROXIES[@]}"; do
		RPS_MED[$p]=$(medians_of "${RPS[$p]}")
		CPU_MED[$p]=$(medians_of "${CPU[$p]}")
	done
	RATE=$(awk -v r="${RPS_MED[haproxy]}" 'BEGIN {printf "%d", r / 2}')
	log "fixed-rate latency at $RATE req/s (half of HAProxy's saturation)"
	for round in $(seq 1 "$ROUNDS"); do
		mapfile -t order < <(rotated "$round" "${PROXIES[@]}")
		for p in "${order[@]}"; do
			out=$(GOMAXPROCS=1 on "$LOAD_CPU" "$WORK/loadgen" -addr "127.0.0.1:${PORT[$p]}" -rate "$RATE" \
				-duration "${DURATION}s" -warmup 2s -conns "$CONNS")
			log "latency round $round $p: $out"
			p99=$(tr ' ' '\n' <<<"$out" | awk -F= '$1 == "p99_us" {print $2}')
			P99[$p]+="$p99 "
		done
	done
	declare -A P99_MED
	for p in "${PROXIES[@]}"; do
		P99_MED[$p]=$(medians_of "${P99[$p]}")
		log "$p: median ${RPS_MED[$p]} req/s, ${CPU_MED[$p]} us CPU/request" \
			"(load core: $(medians_of "${WRK[$p]}") us wrk + $(medians_of "${BE[$p]}") us backends); median p99 ${P99_MED[$p]} us at $RATE req/s"
	done
	FIELDS+=$(awk -v h="${RPS_MED[herd]}" -v a="${RPS_MED[haproxy]}" -v n="${RPS_MED[nginx]}" \
		-v hp="${P99_MED[herd]}" -v ap="${P99_MED[haproxy]}" \
		-v g="${RPS_MED[herd-nethttp]}" -v gp="${P99_MED[herd-nethttp]}" 'BEGIN {
		printf " herd_rps=%d haproxy_rps=%d nginx_rps=%d rps_vs_haproxy=%.2f rps_vs_nginx=%.2f p99_vs_haproxy=%.2f",
			h, a, n, h / a, h / n, hp / ap
		printf " herd_nethttp_rps=%d fast_vs_nethttp_rps=%.2f fast_vs_nethttp_p99=%.2f", g, h / g, hp / gp }')
fi

if phase tls-handshakes || phase tls-keepalive; then
	# TLS: what an OpenSSL 3.0 client (wrk's library) negotiates with each.
	for p in "${TLS_PROXIES[@]}"; do
		out=$(openssl s_client -connect "127.0.0.1:${TLS_PORT[$p]}" -alpn http/1.1 </dev/null 2>/dev/null || true)
		log "openssl s_client to $p: $(awk '/^New, / {sub(/^New, /, ""); sub(/Cipher is /, ""); v=$0} /^Server Temp Key/ {sub(/.*: /, ""); g=$0}
			/^Peer signature type/ {sub(/.*: /, ""); s=$0} /^Server public key is/ {k=$5} END {printf "%s, %s, %s %s-bit certificate", v, g, s, k}' <<<"$out")"
	done
fi
# handshakes ROUND PROXY KIND ARGS... runs the handshake generator against PROXY and logs its line with
# the proxy's CPU time per handshake; it prints the handshakes/s and that CPU time.
handshakes() {
	local round=$1 p=$2 kind=$3 t0 t1 out ok
	shift 3
	t0=$(cpu_ticks "${PID[$p]}")
	out=$(on "$LOAD_CPU" "$WORK/handshakes" -addr "127.0.0.1:${TLS_PORT[$p]}" -duration "${DURATION}s" -conns "$CONNS" "$@")
	t1=$(cpu_ticks "${PID[$p]}")
	ok=$(tr ' ' '\n' <<<"$out" | awk -F= '$1 == "ok" {print $2}')
	cpu=$(awk -v t=$((t1 - t0)) -v us="$TICK_US" -v n="$ok" 'BEGIN {printf "%.0f", t * us / n}')
	log "tls round $round $p $kind: $out proxy_cpu_us_per_handshake=$cpu" >&2
	echo "$(tr ' ' '\n' <<<"$out" | awk -F= '$1 == "handshakes_per_s" {print $2}') $cpu"
}
declare -A HS HS_CPU RESUMED PQ PQ_CPU RPS_TLS CPU_TLS WRK_TLS BE_TLS BSW_TLS PSW_TLS SIRQ_TLS IPI_TLS
if phase tls-keepalive; then
	# Warm each proxy's TLS listener and its connection pools.
	for p in "${TLS_PROXIES[@]}"; do
		on "$LOAD_CPU" wrk -t1 -c"$CONNS" -d2s "https://127.0.0.1:${TLS_PORT[$p]}/" >/dev/null
	done
fi
for round in $(seq 1 "$ROUNDS"); do
	mapfile -t order < <(rotated "$round" "${TLS_PROXIES[@]}")
	for p in "${order[@]}"; do
		if phase tls-handshakes; then
			read -r hs cpu < <(handshakes "$round" "$p" full -groups X25519)
			HS[$p]+="$hs "
			HS_CPU[$p]+="$cpu "
			read -r hs _ < <(handshakes "$round" "$p" resumed -groups X25519 -resume)
			RESUMED[$p]+="$hs "
			if [ "$p" = herd ]; then
				read -r hs cpu < <(handshakes "$round" "$p" full-hybrid -groups X25519MLKEM768,X25519)
				PQ[$p]+="$hs "
				PQ_CPU[$p]+="$cpu "
			fi
		fi
		if phase tls-keepalive; then
			read -r rps cpu wrk be bsw psw sirq ipi errs < <(wrk_round "$p" "https://127.0.0.1:${TLS_PORT[$p]}/")
			log "tls round $round $p keep-alive: ${rps} req/s, ${cpu} us CPU/request; load core ${wrk} us wrk + ${be} us backends per request;" \
				"context switches per request: backends ${bsw}, proxy ${psw}; load core softirq ${sirq} us, interrupts to the proxy core ${ipi} per request ${errs}"
			BSW_TLS[$p]+="$bsw "
			SIRQ_TLS[$p]+="$sirq "
			IPI_TLS[$p]+="$ipi "
			PSW_TLS[$p]+="$psw "
			RPS_TLS[$p]+="$rps "
			CPU_TLS[$p]+="$cpu "
			WRK_TLS[$p]+="$wrk "
			BE_TLS[$p]+="$be "
		fi
	done
done
if phase tls-handshakes; then
	for p in "${TLS_PROXIES[@]}"; do
		log "$p over TLS: median $(medians_of "${HS[$p]}") full handshakes/s (X25519) at $(medians_of "${HS_CPU[$p]}") us proxy CPU each, $(medians_of "${RESUMED[$p]}") resumed handshakes/s"
	done
	log "herd over TLS with X25519MLKEM768: median $(medians_of "${PQ[herd]}") full handshakes/s at $(medians_of "${PQ_CPU[herd]}") us CPU each"
	FIELDS+=$(awk -v h="$(medians_of "${HS[herd]}")" -v a="$(medians_of "${HS[haproxy]}")" \
		'BEGIN {printf " tls_handshakes_vs_haproxy=%.2f", h / a}')
fi
if phase tls-keepalive; then
	# The same rate for all three, so that their CPU time per request is compared at equal batching:
	# at saturation each proxy runs at its own rate, and a busy machine moves those rates apart.
	TLS_RATE=${TLS_RATE:-$(awk -v r="$(medians_of "${RPS_TLS[haproxy]}")" 'BEGIN {printf "%d", r / 2}')}
	declare -A FIXED_CPU FIXED_P99
	for round in $(seq 1 "$ROUNDS"); do
		mapfile -t order < <(rotated "$round" "${TLS_PROXIES[@]}")
		for p in "${order[@]}"; do
			t0=$(cpu_ticks "${PID[$p]}")
			out=$(GOMAXPROCS=1 on "$LOAD_CPU" "$WORK/loadgen" -addr "127.0.0.1:${TLS_PORT[$p]}" -tls-ca "$WORK/cert.pem" \
				-rate "$TLS_RATE" -duration "${DURATION}s" -warmup 0s -conns "$CONNS")
			t1=$(cpu_ticks "${PID[$p]}")
			sent=$(tr ' ' '\n' <<<"$out" | awk -F= '$1 == "sent" {print $2}')
			cpu=$(awk -v t=$((t1 - t0)) -v us="$TICK_US" -v n="$sent" 'BEGIN {printf "%.1f", t * us / n}')
			log "tls round $round $p at $TLS_RATE req/s: $out proxy_cpu_us_per_request=$cpu"
			FIXED_CPU[$p]+="$cpu "
			FIXED_P99[$p]+="$(tr ' ' '\n' <<<"$out" | awk -F= '$1 == "p99_us" {print $2}') "
		done
	done
	for p in "${TLS_PROXIES[@]}"; do
		log "$p over TLS: median $(medians_of "${RPS_TLS[$p]}") keep-alive req/s at $(medians_of "${CPU_TLS[$p]}") us proxy CPU/request" \
			"(load core: $(medians_of "${WRK_TLS[$p]}") us wrk + $(medians_of "${BE_TLS[$p]}") us backends;" \
			"context switches per request: backends $(medians_of "${BSW_TLS[$p]}"), proxy $(medians_of "${PSW_TLS[$p]}");" \
			"load core softirq $(medians_of "${SIRQ_TLS[$p]}") us, interrupts to the proxy core $(medians_of "${IPI_TLS[$p]}") per request);" \
			"at $TLS_RATE req/s $(medians_of "${FIXED_CPU[$p]}") us proxy CPU/request, p99 $(medians_of "${FIXED_P99[$p]}") us"
	done
	if [ -n "$HERD_B_FLAGS" ]; then
		log "herd and herd-b ($HERD_B_FLAGS) over TLS, requests/s over HAProxy's of the same round: $(awk \
			-v h="${RPS_TLS[herd]}" -v b="${RPS_TLS[herd-b]}" -v a="${RPS_TLS[haproxy]}" 'BEGIN {
			n = split(h, hs, " "); split(b, bs, " "); split(a, as, " ")
			for (i = 1; i <= n; i++) { sh += hs[i] / as[i]; sb += bs[i] / as[i]; if (hs[i] > bs[i]) w++ }
			printf "herd mean %.3f, herd-b mean %.3f; herd ahead in %d of %d rounds", sh / n, sb / n, w, n }')"
	fi
	FIELDS+=$(awk -v h="$(medians_of "${RPS_TLS[herd]}")" -v a="$(medians_of "${RPS_TLS[haproxy]}")" \
		'BEGIN {printf " tls_rps_vs_haproxy=%.2f", h / a}')
fi
echo "lb:$FIELDS"
