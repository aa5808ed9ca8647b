#!/bin/sh
# Starts or stops a 3-member etcd cluster on loopback (Debian's etcd server) for development and
# tests of the etcd store:
#   hack/etcd-cluster.sh start DIR   # prints the client endpoints, for herd up --etcd-endpoints
#   hack/etcd-cluster.sh stop DIR    # stops the members by their recorded process ids; DIR is kept
set -eu
cd "$(dirname "$0")/.."
exec go run ./hack/etcd-cluster "$@"
