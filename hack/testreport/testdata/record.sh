#!/usr/bin/env bash
# Records the go test -json streams that testreport's tests read, from the packages in src/.
set -uo pipefail
cd "$(dirname "$0")/src"
for p in pass skip fail broken notests; do
	go test -json -count=1 "./$p" >"../$p.jsonl"
done
go test -json -count=1 -timeout 2s ./hang >../hang.jsonl
