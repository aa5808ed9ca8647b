#!/usr/bin/env bash
# Re-fetches the dashboard's charting library, uPlot, at its pinned version from the npm registry,
# checks the tarball against the pinned integrity hash (the one the registry published, as
# package-lock.json would record it) and copies its minified build, stylesheet and licence into
# internal/web/assets/vendor/uplot. The copies are committed, so `go build` needs neither npm nor
# the network; this script only makes them reproducible: run it and `git diff` shows nothing.
#
# Usage: hack/web/vendor.sh   (needs npm, tar, openssl and base64; run from anywhere)
set -euo pipefail

name=uplot
version=1.6.32
integrity=sha512-KIMVnG68zvu5XXUbC4LQEPnhwOxBuLyW1AHtpm6IKTXImkbLgkMy+jabjLgSLMasNuGGzQm/ep3tOkyTxpiQIw==
files=(dist/uPlot.iife.min.js dist/uPlot.min.css LICENSE)

die() { echo "hack/web/vendor.sh: $*" >&2; exit 1; }
command -v npm >/dev/null || die "npm not found: apt-get install npm"

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
dest=$root/internal/web/assets/vendor/uplot
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# npm pack fetches the published tarball without installing or running anything from it.
(cd "$tmp" && npm pack --silent "$name@$version" >/dev/null 2>"$tmp/npm.log") || { cat "$tmp/npm.log" >&2; die "npm pack $name@$version failed"; }
tgz=$tmp/$name-$version.tgz
[[ -f $tgz ]] || die "npm pack did not write $tgz"

got="sha512-$(openssl dgst -sha512 -binary "$tgz" | base64 -w0)"
[[ $got == "$integrity" ]] || die "$name-$version.tgz has integrity $got, want $integrity: refusing to vendor it"

tar -xzf "$tgz" -C "$tmp"
mkdir -p "$dest"
for f in "${files[@]}"; do
	cp "$tmp/package/$f" "$dest/$(basename "$f")"
done
echo "$name $version" >"$dest/VERSION"
echo "vendored $name $version ($integrity) into ${dest#"$root"/}"
