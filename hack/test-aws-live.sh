#!/usr/bin/env bash
# make test-aws-live: TestIntegrationAWS against a real AWS account instead of the twin
# (docs/aws.md, "End to end on a real account"). It runs only when the AWS CLI finds credentials
# (the SDK's default chain: environment, profile, instance role, web identity) and the settings
# are in the environment; otherwise it says that it did not run and why, and exits 2, so that a
# pipeline that asked for it does not take its absence for a pass.
set -uo pipefail
cd "$(dirname "$0")/.."

missing=()
for v in HERD_AWS_REGION HERD_AWS_SUBNETS HERD_AWS_SECURITY_GROUPS HERD_AWS_INSTANCE_TYPES; do
	[ -n "${!v:-}" ] || missing+=("$v")
done
if [ ${#missing[@]} -gt 0 ]; then
	echo "test-aws-live: DID NOT RUN: ${missing[*]} not set (docs/aws.md says what each holds)"
	exit 2
fi
if ! aws sts get-caller-identity --region "$HERD_AWS_REGION" >/dev/null 2>&1; then
	echo "test-aws-live: DID NOT RUN: no AWS credentials found (environment, profile, instance role or web identity)"
	exit 2
fi
HERD_AWS_LIVE=1 exec ${GO:-go} test -count=1 -v -timeout 60m -run '^TestIntegrationAWS$' ./test/e2e
