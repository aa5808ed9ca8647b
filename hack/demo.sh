#!/usr/bin/env bash
# Runs herd end to end on this machine: builds it, starts the control plane in a scratch data dir,
# applies an example fleet, shows it converge, scales it, deletes it, and stops everything it started.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"

work=$(mktemp -d /tmp/herd-demo.XXXXXX)
export HERD_CONFIG="$work/config"
herd=./bin/herd
up_pid=""
cleanup() {
  if [ -n "$up_pid" ] && kill -0 "$up_pid" 2>/dev/null; then
    kill -INT "$up_pid"; wait "$up_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

step() { printf '\n==> %s\n' "$*"; }

step "building herd"
make -s build

step "starting the control plane (herd up --provider fake), log in $work/up.log"
$herd up --provider fake --data-dir "$work/data" --listen 127.0.0.1:0 >"$work/up.log" 2>&1 &
up_pid=$!
for _ in $(seq 100); do [ -s "$HERD_CONFIG" ] && $herd get fleets >/dev/null 2>&1 && break; sleep 0.1; done

wait_ready() { # fleet desired
  for _ in $(seq 100); do
    ready=$($herd get fleet "$1" | awk 'NR==2 {print $2}')
    [ "$ready" = "$2/$2" ] && return 0
    sleep 0.2
  done
  echo "fleet $1 did not reach $2 ready instances" >&2; return 1
}

step "herd apply -f examples/fleet-fake.yaml"
$herd apply -f examples/fleet-fake.yaml
wait_ready demo 3
$herd get fleets
$herd get instances

step "herd scale fleet demo --replicas 5"
$herd scale fleet demo --replicas 5
wait_ready demo 5
$herd describe fleet demo

step "herd delete fleet demo"
$herd delete fleet demo
for _ in $(seq 100); do [ -z "$($herd get instances 2>/dev/null)" ] && break; sleep 0.1; done
$herd events
echo
echo "demo finished: the control plane is stopped and its scratch directory removed."
