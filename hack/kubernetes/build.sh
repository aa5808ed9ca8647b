#!/usr/bin/env bash
# Builds the upstream Kubernetes components that herd's local instances run,
# at the version pinned in hack/kubernetes/go.mod, into herd's cache directory:
#
#   ${HERD_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/herd}/kubernetes/<version>/bin/
#
# internal/kubebin finds them there. A stamp file records a hash of everything
# that shapes the binaries (go.mod, go.sum, this script, the Go version); when
# it matches and every binary is present the script exits at once.
#
# The first build downloads about 220 MB of modules (1 GB unpacked in the module
# cache) and takes 7 to 9 minutes on 2 cores; Go's build cache makes later
# builds of the same inputs take seconds.
#
# Environment:
#   HERD_CACHE_DIR   herd's cache directory (default $XDG_CACHE_HOME/herd or ~/.cache/herd)
#   HERD_BUILD_NICE  niceness of the compiler processes (default 10; 0 for full speed)
#   FORCE=1          rebuild even when the stamp matches
#
# patches/*.patch change upstream's code (see each file's header for why); they are applied to a
# copy of the module, so the module cache stays as downloaded. A patch names files as in the
# Kubernetes repository: staging/src/k8s.io/NAME/... is the k8s.io/NAME module (k8s.io/apiserver,
# ...), which is then copied and patched too.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cd "$here"
self="$here/$(basename "${BASH_SOURCE[0]}")"

# kube-combined (./combined, this module's own command) runs several of the others in one
# process; herd's instances run it when it is built.
components=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl kube-combined)

# pkg prints the Go package of component $1.
pkg() {
	case $1 in
	kube-combined) echo ./combined ;;
	*) echo "k8s.io/kubernetes/cmd/$1" ;;
	esac
}

die() { echo "hack/kubernetes/build.sh: $*" >&2; exit 1; }

command -v go >/dev/null 2>&1 || die "go is not on PATH; install Go (see go.mod for the version) and retry"
command -v patch >/dev/null 2>&1 || die "patch is not on PATH; make deps installs it (Debian's patch)"

version=$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v1\./ { print $2; exit }' go.mod)
[[ -n $version ]] || die "cannot find the k8s.io/kubernetes version in $here/go.mod"
[[ $version =~ ^v1\.([0-9]+)\.([0-9]+)$ ]] || die "unexpected k8s.io/kubernetes version $version in go.mod"
minor=${BASH_REMATCH[1]}
staging="v0.${minor}.${BASH_REMATCH[2]}"

# Every staging module must be replaced by the release of the same patch level.
bad=$(awk -v want="$staging" '$2 == "=>" && $1 ~ /^k8s\.io\// && $4 != want { print $1 " " $4 }' go.mod)
[[ -z $bad ]] || die "staging modules in go.mod must be at $staging to match k8s.io/kubernetes $version: $bad"

cache_root=${HERD_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/herd}
bindir="$cache_root/kubernetes/$version/bin"
stampfile="$bindir/.stamp"

stamp=$(cat go.mod go.sum "$self" combined/*.go patches/*.patch) || die "cannot read go.mod, go.sum, combined/*.go, patches/*.patch or $self"
stamp=$( { echo "$stamp"; go env GOVERSION GOOS GOARCH; } | sha256sum | cut -d' ' -f1)

have_all() {
	local c
	for c in "${components[@]}"; do
		[[ -x $bindir/$c ]] || return 1
	done
}

if [[ ${FORCE:-0} != 1 && -f $stampfile && $(cat "$stampfile") == "$stamp" ]] && have_all; then
	echo "kubernetes $version: up to date in $bindir"
	exit 0
fi

mkdir -p "$bindir" || die "cannot create $bindir"
rm -f "$stampfile"

# A fixed build date (the release's commit time from the module proxy) keeps
# the binaries reproducible, so the same inputs give the same files.
build_date=$(go list -m -f '{{if .Time}}{{.Time.UTC.Format "2006-01-02T15:04:05Z"}}{{end}}' k8s.io/kubernetes 2>/dev/null || true)
[[ -n $build_date ]] || build_date=1970-01-01T00:00:00Z

ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	ldflags+=" -X $pkg.gitVersion=$version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
	ldflags+=" -X $pkg.buildDate=$build_date"
done

echo "kubernetes $version: building ${#components[@]} components into $bindir"
echo "(the first build downloads ~220 MB of modules and takes 7-9 minutes on 2 cores)"

pkgs=()
for c in "${components[@]}"; do pkgs+=("$(pkg "$c")"); done
start=$SECONDS
printf '[0/%d] %-24s ' "${#components[@]}" "modules"
# Listing the dependencies downloads exactly the modules the build needs.
if ! out=$(CGO_ENABLED=0 go list -tags selinux,notest -deps "${pkgs[@]}" 2>&1 >/dev/null); then
	echo
	echo "$out" >&2
	die "downloading modules failed; is the Go module proxy reachable? (GOPROXY=$(go env GOPROXY))"
fi
echo "done in $((SECONDS - start)) s"

# The patches, applied to a copy of the k8s.io/kubernetes module (hard links to the module
# cache's files, but for the files patched), which a copy of go.mod names in place of the
# downloaded module. It is in this directory, named relative to it, so that the binaries
# record the same path on every machine (and stay reproducible), and Go's build cache serves
# the next build. A staging module a patch changes is copied where the repository has it,
# staging/src/k8s.io/NAME in the copy of k8s.io/kubernetes, so that every patch applies to the
# one tree, and named in the copy of go.mod too.
moddir=$(go list -m -f '{{.Dir}}' k8s.io/kubernetes) || die "cannot find the k8s.io/kubernetes module's directory"
work=.patched
# Only the copy's directories are made writable: its files are the module cache's.
writable_dirs() { [[ ! -d $1 ]] || find "$1" -type d -exec chmod u+w {} +; }
writable_dirs "$work" && rm -rf "$work" || die "cannot remove $work"
mkdir -p "$work" && cp -al "$moddir" "$work/kubernetes" && writable_dirs "$work/kubernetes" ||
	die "cannot copy $moddir to $work"
cp go.mod "$work/go.mod" && cp go.sum "$work/go.sum" &&
	go mod edit -modfile="$work/go.mod" -replace "k8s.io/kubernetes=./$work/kubernetes" ||
	die "cannot write $work/go.mod"
# origin prints the downloaded file that $1 (a path in the repository) is a copy of, and copies
# the staging module that holds it into the tree once.
origin() {
	local f=$1
	if [[ $f =~ ^staging/src/(k8s\.io/[^/]+)/(.*)$ ]]; then
		local mod=${BASH_REMATCH[1]} rest=${BASH_REMATCH[2]} dir
		dir=$(go list -m -f '{{.Dir}}' "$mod") && [[ -n $dir ]] || return 1
		if [[ ! -d $work/kubernetes/staging/src/$mod ]]; then
			mkdir -p "$work/kubernetes/staging/src/k8s.io" &&
				cp -al "$dir" "$work/kubernetes/staging/src/$mod" &&
				writable_dirs "$work/kubernetes/staging/src/$mod" &&
				go mod edit -modfile="$work/go.mod" -replace "$mod=./$work/kubernetes/staging/src/$mod" || return 1
		fi
		echo "$dir/$rest"
		return
	fi
	echo "$moddir/$f"
}
# copied: the files already copied, which an earlier patch may have changed (two patches may
# change one file).
declare -A copied=()
for p in patches/*.patch; do
	for f in $(awk '/^\+\+\+ b\// { sub(/^b\//, "", $2); print $2 }' "$p"); do
		[[ -z ${copied[$f]:-} ]] || continue
		# A copy of its own, not a link to the module cache's file, before it is changed.
		src=$(origin "$f") && cp --remove-destination "$src" "$work/kubernetes/$f" && chmod u+w "$work/kubernetes/$f" ||
			die "$p: cannot copy $f"
		copied[$f]=1
	done
	patch --quiet --forward -p1 -d "$work/kubernetes" <"$p" >/dev/null || die "$p does not apply to k8s.io/kubernetes $version"
done

total_start=$SECONDS
i=0
for c in "${components[@]}"; do
	i=$((i + 1))
	start=$SECONDS
	printf '[%d/%d] %-24s ' "$i" "${#components[@]}" "$c"
	# Upstream builds every one of these statically with these tags.
	if ! CGO_ENABLED=0 nice -n "${HERD_BUILD_NICE:-10}" go build -trimpath -modfile "$work/go.mod" \
		-tags selinux,notest -ldflags "$ldflags" \
		-o "$bindir/.$c.tmp" "$(pkg "$c")"; then
		rm -f "$bindir/.$c.tmp"
		echo
		die "building $c failed (see the compiler output above)"
	fi
	mv -f "$bindir/.$c.tmp" "$bindir/$c"
	echo "done in $((SECONDS - start)) s"
done

got=$("$bindir/kube-apiserver" --version 2>&1 || true)
[[ $got == "Kubernetes $version" ]] || die "kube-apiserver --version printed '$got', want 'Kubernetes $version'"

echo "$stamp" >"$stampfile"
echo "kubernetes $version: built in $((SECONDS - total_start)) s into $bindir"
