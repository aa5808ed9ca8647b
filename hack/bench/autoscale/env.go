package main

// benchEnv, set by the command, makes the benchmark's test run; without it (go test ./...) the test
// skips, so that make test does not boot these instances a second time.
const benchEnv = "HERD_BENCH_AUTOSCALE"
