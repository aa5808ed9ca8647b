#!/usr/bin/env bash
# The quick start: sets up everything herd needs on this machine (Debian packages, the pinned
# Kubernetes components, herd itself), builds the example's node image, starts the control plane and
# applies examples/hello/fleet.yaml: a fleet of three real one-node Kubernetes clusters serving the
# hello app behind herd's load balancer. It then prints where to curl and keeps running until Ctrl-C,
# when it deletes the fleet (every instance with it) and stops the control plane.
#
# HERD_DEMO_DIR  where state goes (default /tmp/herd-demo: short, because socket paths are bounded)
# DEMO_EXIT=1    verify the fleet serves, then clean up and exit instead of waiting for Ctrl-C
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"

dir=${HERD_DEMO_DIR:-/tmp/herd-demo}
export HERD_CONFIG="$dir/config"
herd=$PWD/bin/herd
up_pid=""
step() { printf '\n==> %s\n' "$*"; }

if [ "$(id -u)" != 0 ]; then
  echo "herd's local instances need root (network namespaces, cgroups, mounts): run make demo as root" >&2
  exit 1
fi

# cleanup deletes the fleet through herd up, waits until every instance is gone, then stops herd
# up. Ctrl-C reaches every process of the terminal's foreground group: herd up runs in a session
# of its own (setsid below) so that it lives until this asks it to stop, and a second Ctrl-C only
# interrupts the command at hand, which is retried, never the cleanup itself. Its output may go
# nowhere: with `make demo | tee demo.log`, Ctrl-C stops tee too. So SIGPIPE is ignored and no
# failed write or command stops the cleanup (errexit off): it always reaches stop_up.
cleanup() {
  set +e
  trap '' PIPE
  trap 'say "   still deleting the fleet: its instances would keep running otherwise" >&2' INT TERM HUP
  trap - EXIT
  [ -n "$up_pid" ] && kill -0 "$up_pid" 2>/dev/null || return 0
  say "" "==> deleting the fleet and its instances"
  local out="" gone="" i
  # A counted loop, not $(seq ...): a second Ctrl-C that lands on seq would leave no rounds at all.
  for ((i = 0; i < 240; i++)); do
    "$herd" delete fleet hello >/dev/null 2>&1
    if out=$("$herd" get instances 2>/dev/null) && [ -z "$out" ]; then gone=1; break; fi
    sleep 0.5
  done
  if [ -z "$gone" ]; then
    "$herd" get instances 2>/dev/null
    say "these instances are left: herd up (data dir $dir/data) adopts and can delete them" >&2
  fi
  stop_up
}

# stop_up stops herd up and waits until it is gone.
stop_up() {
  say "" "==> stopping the control plane"
  kill -INT "$up_pid" 2>/dev/null
  # wait returns early when a trapped signal arrives: wait again until herd up is gone.
  while kill -0 "$up_pid" 2>/dev/null; do wait "$up_pid" 2>/dev/null; done
}

# say prints its arguments, a line each, and never fails: where output goes may be gone.
say() { printf '%s\n' "$@" 2>/dev/null || true; }
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

step "installing dependencies (hack/install-deps.sh)"
./hack/install-deps.sh
step "building the pinned Kubernetes components (hack/kubernetes/build.sh; 6-8 minutes the first time)"
./hack/kubernetes/build.sh
step "building herd"
make -s build

mkdir -p "$dir"
step "building the node image (herd image build -f examples/hello/image.yaml)"
"$herd" image build -f examples/hello/image.yaml --data-dir "$dir/data"

step "starting the control plane (herd up), log in $dir/up.log"
# Its own session: the terminal's Ctrl-C must not stop it before cleanup has deleted the fleet.
# (Started in the background without job control, so setsid needs no fork and $! is herd up.)
setsid "$herd" up --data-dir "$dir/data" --listen 127.0.0.1:0 >"$dir/up.log" 2>&1 </dev/null &
up_pid=$!
for _ in $(seq 100); do
  "$herd" get fleets >/dev/null 2>&1 && break
  kill -0 "$up_pid" 2>/dev/null || { cat "$dir/up.log" >&2; exit 1; }
  sleep 0.1
done

step "herd apply -f examples/hello/fleet.yaml"
"$herd" apply -f examples/hello/fleet.yaml
# Ready is the fleet's Ready condition: every instance's agent says its workload is ready and the
# load balancer finds it healthy, so it answers through the load balancer. Until then, the count
# of instances that serve.
start=$(date +%s)
until "$herd" wait fleet/hello --for condition=Ready --timeout 1s >/dev/null 2>&1; do
  ready=$("$herd" get fleet hello | awk 'NR==2 {print $2}')
  printf '\r   %ss: %s instances serve ' "$(( $(date +%s) - start ))" "$ready"
  if [ $(( $(date +%s) - start )) -gt 300 ]; then
    echo; "$herd" describe fleet hello; echo "the fleet did not become ready in 5 minutes" >&2; exit 1
  fi
done
printf '\r   %ss: fleet hello is Ready: every instance serves through the load balancer\n' "$(( $(date +%s) - start ))"
"$herd" get instances -o wide

# show prints what url answers, counting in $unanswered the requests not answered with a 2xx.
unanswered=0
show() {
  local out
  out=$(curl -sf --max-time 5 "$1") || { out="no answer"; unanswered=$((unanswered + 1)); }
  printf '   curl %s  ->  %s\n' "$1" "$out"
}

step "the app answers on every instance"
for ip in $("$herd" get instances -o json | sed -n 's/.*"address": "\([0-9.]*\)".*/\1/p'); do
  show "http://$ip:30080/"
done
step "through herd's load balancer"
for _ in 1 2 3; do show http://127.0.0.1:8080/; done

if [ "${DEMO_EXIT:-0}" = 1 ]; then
  [ "$unanswered" = 0 ] || { echo "$unanswered requests were not answered" >&2; exit 1; }
  exit 0
fi
echo
echo "The fleet is serving. Try: curl http://127.0.0.1:8080/   (HERD_CONFIG=$HERD_CONFIG $herd get instances)"
echo "Press Ctrl-C to delete the fleet and stop the control plane."
wait "$up_pid"
