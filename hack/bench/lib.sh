# Helpers shared by the shell benchmarks (hack/bench-lb.sh, hack/bench-edge.sh), sourced by them
# from the repository's root. A script calls bench_init with its name first; the helpers then use
# its WORK (scratch directory) and PIDS (the pids stopped on exit), and the script's BENCH_NICE (the
# priority of everything it starts).

# bench_init NAME makes the benchmark's scratch directory ($WORK, kept at exit only with KEEP_WORK
# set), and the traps that stop what it started and remove the directory on exit or interruption.
bench_init() {
	BENCH_NAME=$1
	WORK=$(mktemp -d "/tmp/herd-$1.XXXXXX")
	PIDS=()
	trap bench_cleanup EXIT
	trap 'exit 130' INT TERM
}

bench_cleanup() {
	stop_all
	[ -n "${KEEP_WORK:-}" ] || rm -rf "$WORK"
}

# log prints a message on stderr, prefixed with the benchmark's name.
log() { echo "$BENCH_NAME: $*" >&2; }

# install_missing installs Debian packages whose command is missing, updating the package lists only
# if a package is not found. Its arguments are command:package pairs.
install_missing() {
	local missing=() cmd pkg pair
	for pair in "$@"; do
		cmd=${pair%%:*} pkg=${pair##*:}
		command -v "$cmd" >/dev/null 2>&1 || [ -x "/usr/sbin/$cmd" ] || missing+=("$pkg")
	done
	[ ${#missing[@]} -eq 0 ] && return
	log "installing ${missing[*]}"
	# RUNLEVEL=1 keeps the packages from starting their system services: only the benchmark runs them.
	export DEBIAN_FRONTEND=noninteractive RUNLEVEL=1
	apt-get install -y "${missing[@]}" >/dev/null 2>&1 || {
		apt-get update >/dev/null
		apt-get install -y "${missing[@]}" >/dev/null
	}
}

wait_port() {
	local port=$1 i
	for i in $(seq 1 100); do
		if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then return 0; fi
		sleep 0.1
	done
	log "nothing listening on 127.0.0.1:$port"
	exit 1
}

# on runs a command on one core at the benchmark's priority.
on() {
	local cpu=$1
	shift
	nice -n "$BENCH_NICE" taskset -c "$cpu" "$@"
}

# start runs a command in the background on one core and records its pid for cleanup. nice and
# taskset exec the command, so the pid is the command's own.
start() {
	local cpu=$1
	shift
	nice -n "$BENCH_NICE" taskset -c "$cpu" "$@" >>"$WORK/$(basename "$1").log" 2>&1 &
	PIDS+=($!)
}

# stop_all stops every process start recorded, and waits for them.
stop_all() {
	local pid
	for pid in "${PIDS[@]}"; do
		kill "$pid" 2>/dev/null || true
	done
	for pid in "${PIDS[@]}"; do
		wait "$pid" 2>/dev/null || true
	done
}

# cpu_ticks prints the CPU time (user+sys, in clock ticks) of a process and its children (nginx's
# worker, Varnish's child).
cpu_ticks() {
	local total=0 pid f
	for pid in "$1" $(pgrep -P "$1" || true); do
		read -ra f <"/proc/$pid/stat"
		total=$((total + f[13] + f[14]))
	done
	echo "$total"
}

# switches prints the context switches (voluntary and involuntary) of every thread of a process and
# its children: each is a sleep and a wakeup, or a preemption, that the process's core pays for.
switches() {
	local pid files=()
	for pid in "$1" $(pgrep -P "$1" || true); do
		files+=(/proc/"$pid"/task/*/status)
	done
	# One awk over every thread's file; a thread that ended since the glob counts nothing.
	{ cat "${files[@]}" 2>/dev/null || true; } | awk '/^(non)?voluntary_ctxt_switches/ {s += $2} END {print s + 0}'
}

# softirq_ticks CPU prints the time core CPU has spent in software interrupts (clock ticks, /proc/stat):
# on loopback a segment's receive path, and the wakeup of the socket's reader, run there on the
# sender's core.
softirq_ticks() { awk -v c="cpu$1" '$1 == c {print $8}' /proc/stat; }

# ipis CPU prints the function-call and rescheduling interrupts core CPU has received: what waking a
# task that sleeps on it costs the other core, which in a virtual machine is an exit of the sender.
ipis() { awk -v col=$(($1 + 2)) '$1 == "CAL:" || $1 == "RES:" {s += $col} END {print s + 0}' /proc/interrupts; }

# rotated prints its arguments after the first, one a line, rotated by round-1: each round another
# proxy goes first.
rotated() {
	local round=$1
	shift
	local n=$# i
	local names=("$@")
	for ((i = 0; i < n; i++)); do
		echo "${names[$(((round - 1 + i) % n))]}"
	done
}

median() { sort -g | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

# medians_of prints the median of a space-separated list of numbers.
medians_of() { tr ' ' '\n' <<<"$1" | grep . | median; }
