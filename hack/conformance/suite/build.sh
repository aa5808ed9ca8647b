#!/usr/bin/env bash
# Builds what `make conformance` runs, from the k8s.io/kubernetes module at the version pinned in
# hack/conformance/suite/go.mod (the same as hack/kubernetes/go.mod), into the cache directory
# of the Kubernetes components:
#
#   ${HERD_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/herd}/kubernetes/<version>/bin/
#     e2e.test          the upstream end-to-end suite (go test -c k8s.io/kubernetes/test/e2e)
#     ginkgo            the ginkgo CLI at the version kubernetes pins, which runs it in parallel
#     agnhost, nnp      test images' programs (test/images/agnhost, test/images/nonewprivs)
#     sample-apiserver  the aggregated API server of the aggregator test (k8s.io/sample-apiserver)
#
# A stamp file records a hash of the inputs; when it matches the script exits at once. The
# first build takes 15 to 30 minutes on 2 cores (e2e.test links most of Kubernetes).
#
# Environment: HERD_CACHE_DIR, HERD_BUILD_NICE (default 10), FORCE=1, as hack/kubernetes/build.sh.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cd "$here"
self="$here/$(basename "${BASH_SOURCE[0]}")"
die() { echo "hack/conformance/suite/build.sh: $*" >&2; exit 1; }
command -v go >/dev/null 2>&1 || die "go is not on PATH; install Go and retry"

version=$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v1\./ { print $2; exit }' go.mod)
pinned=$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v1\./ { print $2; exit }' ../../kubernetes/go.mod)
[[ -n $version && $version == "$pinned" ]] || die "k8s.io/kubernetes is $version here but $pinned in hack/kubernetes/go.mod: keep them equal"
[[ $version =~ ^v1\.([0-9]+)\. ]] || die "unexpected k8s.io/kubernetes version $version"
minor=${BASH_REMATCH[1]}

bindir="${HERD_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/herd}/kubernetes/$version/bin"
stampfile="$bindir/.conformance-stamp"
outputs=(e2e.test ginkgo agnhost nnp sample-apiserver)
stamp=$( { cat go.mod go.sum e2e.go "$self"; go env GOVERSION GOOS GOARCH; } | sha256sum | cut -d' ' -f1)

up_to_date() {
	[[ ${FORCE:-0} != 1 && -f $stampfile && $(cat "$stampfile") == "$stamp" ]] || return 1
	local o
	for o in "${outputs[@]}"; do [[ -x $bindir/$o ]] || return 1; done
}
if up_to_date; then
	echo "conformance suite $version: up to date in $bindir"
	exit 0
fi
mkdir -p "$bindir"
rm -f "$stampfile"

# The version the suite and agnhost report, as upstream's release build stamps it.
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	ldflags+=" -X $pkg.gitVersion=$version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
done

export CGO_ENABLED=0 GOWORK=off GOFLAGS=-mod=readonly
# build OUTPUT PACKAGE [GO-COMMAND FLAGS...]: one output (go build, or go test -c for a test
# binary), built to a temporary name and moved in place when done.
build() {
	local out=$1 pkg=$2 start=$SECONDS
	shift 2
	[[ $# -gt 0 ]] || set -- build
	printf '%-18s ' "$out"
	if ! nice -n "${HERD_BUILD_NICE:-10}" go "$@" -trimpath -ldflags "$ldflags" -o "$bindir/.$out.tmp" "$pkg"; then
		rm -f "$bindir/.$out.tmp"
		echo
		die "building $out failed (see the compiler output above; is the Go module proxy reachable?)"
	fi
	mv -f "$bindir/.$out.tmp" "$bindir/$out"
	echo "done in $((SECONDS - start)) s"
}

echo "conformance suite $version: building ${outputs[*]} into $bindir"
build ginkgo github.com/onsi/ginkgo/v2/ginkgo
build agnhost k8s.io/kubernetes/test/images/agnhost
build nnp k8s.io/kubernetes/test/images/nonewprivs
build sample-apiserver k8s.io/sample-apiserver
build e2e.test k8s.io/kubernetes/test/e2e test -c -tags selinux,notest

got=$("$bindir/e2e.test" --version 2>&1 | head -1 || true)
[[ $got == *"$version"* ]] || die "e2e.test --version printed '$got', want $version"
echo "$stamp" >"$stampfile"
