# herd's build, test and benchmark entry points. Every target is safe to run on a fresh clone.
GO ?= go
BIN := bin
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X herd.dev/herd/internal/version.Version=$(VERSION)

.PHONY: build test test-short test-disk test-tenancy test-discovery test-aws-live lint demo bench-controller bench-instance bench-lb bench-failover \
	bench-tenants bench-autoscale bench-ha bench-global bench-dns bench-regions bench-aws bench-edge conformance kubernetes deps

# herd, and beside it herd-agent, which every local instance runs (a binary of its own so that
# instances do not carry the image builder's Helm and Kustomize in their memory). Without the
# symbol table and DWARF (-s -w): a third smaller on disk, and on every machine's disk image;
# panics still print their stacks.
build:
	$(GO) build -ldflags "-s -w $(LDFLAGS)" -o $(BIN)/ ./cmd/herd ./cmd/herd-agent

# Unit and integration tests. Integration tests are named TestIntegration*; those with real
# instances need root, the Debian packages (make deps) and the Kubernetes components (make kubernetes),
# which this target sets up first. hack/testreport runs go test -json, prints what go test prints
# without -v, and last the line
#   tests: run=<int> skipped=<int> allowed_skips=<int>
# It fails when a test fails and when a test skips that hack/testreport/allowed-skips.txt does not
# name; under CI (CI=true) also when that list names a test that did not report. It also fails when
# the run leaves a process (it is killed), a network namespace or a mount behind.
test: deps kubernetes build
	$(GO) build -o $(BIN)/testreport ./hack/testreport
	$(BIN)/testreport -go $(GO) -allow hack/testreport/allowed-skips.txt -- -count=1 -timeout 55m ./...

# Tenancy end to end on real instances (TestIntegrationTenancy, build tag tenancy; needs root, about
# ten instance boots: minutes): two tenants' answers each from its own instances only, checked on
# every answer during a rolling update and while one tenant's instance is killed; a new tenant's
# first request answered by the warm pool; tenant b's p99 with tenant a flooded
# (docs/benchmarks/tenancy.md). Not part of make test, which keeps tenancy's fake-provider and load
# balancer tests.
test-tenancy: deps kubernetes
	$(GO) test -tags tenancy -count=1 -v -timeout 30m -run '^TestIntegrationTenancy$$' ./test/e2e

# Fleet discovery end to end on real instances (TestIntegrationDiscovery alone; make test runs it
# too; needs root, four instances in two regions): fleet web calls http://api.herd.internal/ (and
# :PORT) from inside its pod and gets api's answer from its own region, and from the other region
# once api's instance in its own is killed; fleet batch, which api's spec.discovery.allowFrom leaves
# out, gets "no such host" for the name and 403 from api's load balancer at its address.
test-discovery: deps kubernetes
	$(GO) test -count=1 -v -timeout 15m -run '^TestIntegrationDiscovery$$' ./test/e2e

# TestIntegrationAWS against a real AWS account instead of the twin it runs on in make test
# (docs/aws.md, "End to end on a real account"): the hello fleet on provider: aws serves through
# herd's load balancer, an instance terminated from outside is replaced with no failed request,
# herd up restarted adopts its instances, a scale-up to 10 makes no duplicate and leaks nothing,
# and the fleet's delete leaves no instance; the steps only the twin can cause (no capacity,
# throttling, lag, a spot notice, counting RunInstances) are skipped with a line that says so.
# It needs credentials the AWS CLI finds and HERD_AWS_REGION, HERD_AWS_SUBNETS,
# HERD_AWS_SECURITY_GROUPS, HERD_AWS_INSTANCE_TYPES (HERD_AWS_AMI, HERD_AWS_TARGET_GROUP,
# HERD_AWS_INSTANCE_PROFILE, HERD_AWS_HERD_UP optional), and must run where herd up reaches the
# subnets. Without them it prints "test-aws-live: DID NOT RUN: <why>" and exits 2. Not part of
# make test: it launches paid instances.
test-aws-live: deps kubernetes build
	./hack/test-aws-live.sh

# Unit tests only: integration tests skip themselves under -short.
test-short:
	$(GO) test -short -count=1 ./...

# herd image disk end to end (hack/testdisk; needs root and a Debian mirror): builds the hello
# example's disk twice and wants the same digest, boots it under QEMU (KVM where /dev/kvm exists,
# else TCG, or when KVM cannot run the machine: about 6 minutes on 2 cores in all) with a NoCloud
# seed naming the instance, and waits until the agent reports Ready and the app answers through a
# forwarded port, on a disk 2 GiB bigger than the image whose root must have grown to it at boot.
# Not part of make test; .ci/run runs it after make test when time allows. TEST_DISK_FLAGS adds flags (-twice=false, -keep, -boot-timeout). Its last line is:
#   disk: size_mb=<int> allocated_mb=<int> boot_to_serving_s=<float> accel=<kvm|tcg>
test-disk: build deps kubernetes
	$(GO) build -o $(BIN)/testdisk ./hack/testdisk
	$(BIN)/testdisk -herd $(BIN)/herd $(TEST_DISK_FLAGS)

# gofmt, go vet (also with the tenancy tag), and hack/doclinks: every relative Markdown link names a
# file (and a heading) that exists, and every docs/*.md path the tree mentions is a file.
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags tenancy ./test/e2e
	$(GO) run ./hack/doclinks

# The quick start: herd end to end on this machine.
demo:
	./hack/demo.sh

# The controller at 50,000 fake instances on bbolt and 5,000 on a real 3-member etcd cluster (Debian's
# etcd, from make deps). Its last line is the figures.
bench-controller: build
	$(GO) run ./hack/bench/controller

# herd's controller on the EC2 twin: 1,000 instances in 4 regions taken up under throttling and
# DescribeInstances lag, a steady window, then deleted (no real instances). Its last line is
#   aws: instances=<int> steady_calls_per_min=<float> create_calls_per_instance=<float> duplicates=<int> leaked=<int>
bench-aws:
	$(GO) run ./hack/bench/aws $(BENCH_AWS_FLAGS)

# herd's load balancer against HAProxy and nginx (hack/bench-lb.sh says how). BENCH_LB_FLAGS adds flags:
# -phases tls-keepalive runs keep-alive requests over TLS alone (phases: http, tls-handshakes, tls-keepalive);
# TLS_RATE sets the fixed rate at which the TLS round compares the proxies' CPU time per request.
bench-lb: build
	./hack/bench-lb.sh $(BENCH_LB_FLAGS)

# herd's edge (herd edge) against Varnish (Debian's, from make deps) and nginx's proxy_cache in front
# of one origin: the same Zipf-distributed objects, 2.5 times the size of each cache, one core each,
# the load generators on the other core (hack/bench-edge.sh says how). Its last line is
#   edge: hit_rps_vs_varnish=<float> hit_rps_vs_nginx=<float> p99_vs_varnish=<float> origin_offload=<float> coalesced_origin_requests=<int>
# The p99 is of Zipf rounds at a fixed ZIPF_RATE (5,000 req/s); a round whose load generator fell
# behind its schedule is flagged and left out, and with no round left for a proxy it fails.
bench-edge: build deps
	./hack/bench-edge.sh

# Tenancy, in two parts (needs root). On the fake provider: one fleet of 5,000 tenants through
# herd's controller and load balancer, traffic to all of them, each answer checked against its
# tenant's instances, and the load balancer with and without tenancy under the same load. On real
# local instances (TestIntegrationTenancy, as make test-tenancy runs it): a new tenant's first
# request answered by the warm pool's one booted instance, tenant b's p99 with tenant a flooded,
# and every answer's instance checked during a rolling update and a kill. Last line:
#   tenants: tenants=<int> cross_tenant_answers=<int> cold_first_answer_ms=<float> lb_rps_vs_untenanted=<float>
bench-tenants: deps kubernetes
	$(GO) build -o $(BIN)/bench-e2e ./hack/bench/e2e
	$(GO) build -o $(BIN)/bench-tenants ./hack/bench/tenants
	$(BIN)/bench-tenants -e2e $(BIN)/bench-e2e $(BENCH_TENANTS_FLAGS)

# Boot time, idle memory and idle CPU of one real local instance of examples/hello (needs root).
# Idle CPU is the median of five back-to-back 30 s windows, printed with each process's CPU, how
# often it woke (its threads' voluntary context switches, which do not depend on what a wakeup
# costs on the machine of the day) and the work that explains it (API and etcd requests, the kubelet's relists and runtime calls,
# garbage collections) over the same 150 s, while the agent is scraped every 2 s as herd up does;
# about 5 minutes in all. Installs what is missing first; its last line is
#   instance: boot_to_ready_s=<float> idle_rss_mb=<int> idle_cpu_cores=<float>
# It runs as make's own child, not under go run (which dies on SIGTERM without passing it on), so
# that SIGTERM or Ctrl-C reaches it and it deletes what it created before it exits.
# BENCH_INSTANCE_FLAGS adds flags (-runs, -idle, -window, -windows, -scrape, -logs DIR to keep
# each instance's logs).
bench-instance: build deps kubernetes
	$(GO) build -o $(BIN)/bench-instance ./hack/bench/instance
	$(BIN)/bench-instance -herd $(BIN)/herd $(BENCH_INSTANCE_FLAGS)

# Kills -9 one of three real local instances of examples/hello under load through herd's load
# balancer (the end-to-end test TestIntegrationFailover, which builds its own herd; needs root). Its
# last line is the figures. This and the other end-to-end benchmarks run bench-e2e as make's own
# child, not under go run (which dies on SIGTERM without passing it on): Ctrl-C or SIGTERM reaches
# the test, whose cleanups delete what it made before it exits.
bench-failover: deps kubernetes
	$(GO) build -o $(BIN)/bench-e2e ./hack/bench/e2e
	$(BIN)/bench-e2e -test TestIntegrationFailover -figures failover

# Steps the load on a fleet of real local instances of examples/hello from 0.6x to 4x its
# autoscaling target through herd's load balancer, without and with a warm pool (the end-to-end test
# TestIntegrationAutoscale, which builds its own herd; needs root). Its last line is the figures.
bench-autoscale: deps kubernetes
	$(GO) build -o $(BIN)/bench-e2e ./hack/bench/e2e
	$(BIN)/bench-e2e -test TestIntegrationAutoscale -figures autoscale

# Three herd up replicas on a 3-member etcd (Debian's, with 50/500 ms heartbeat/election and a
# 1 s leader lease), a fleet of real instances of examples/hello under load and a rolling update:
# SIGKILL the leader mid-rollout with a client running herd scale in a loop, then take etcd
# members away (the end-to-end test TestIntegrationHATakeover; needs root). Its last line is the
# figures.
bench-ha: deps kubernetes
	$(GO) build -o $(BIN)/bench-e2e ./hack/bench/e2e
	$(BIN)/bench-e2e -test TestIntegrationHATakeover -figures ha

# Global routing on real instances in regions 10 ms and 60 ms away (TestIntegrationGlobal; needs
# root): herd dns in a network of its own answers dig and Go's resolver in two client networks by
# each policy; the primary region is partitioned under load, and the last line says how fast DNS
# withdrew it and brought it back, and what the front door's clients saw:
#   global: dns_withdraw_s=<float> dns_return_s=<float> front_failed_requests=<int> front_failover_ms=<int>
bench-global: deps kubernetes
	$(GO) build -o $(BIN)/bench-e2e ./hack/bench/e2e
	$(BIN)/bench-e2e -test TestIntegrationGlobal -figures global

# herd's authoritative DNS (herd dns) against CoreDNS (v1.12.0, pinned in hack/bench/dns, with its file
# plugin, built from the Go module proxy) and Knot (Debian), serving the same zone, each pinned to one
# core, driven by dnsperf (Debian) from the other. Its last line is the figures.
bench-dns: build deps
	$(GO) run ./hack/bench/dns -herd $(BIN)/herd

# Regions as failure domains: a fleet of real instances of examples/hello in two regions 10 ms and
# 60 ms away, each behind its own herd lb, with clients in a client network: one region is
# partitioned under load on the other, herd up is killed -9 under load and started again, and a
# canary of a bad revision is rolled out as a wave (TestIntegrationRegions; needs root). Its last
# line is the figures:
#   regions: partition_failed_requests=<int> detect_unreachable_s=<float> cp_down_failed_requests=<int> wave_stopped=<true|false>
bench-regions: deps kubernetes
	$(GO) build -o $(BIN)/bench-e2e ./hack/bench/e2e
	$(BIN)/bench-e2e -test TestIntegrationRegions -figures regions

# The upstream conformance suite of the pinned Kubernetes ([Conformance] tests of e2e.test, built with
# its test images from the k8s.io/kubernetes module) against one real local instance (needs root).
# Not part of make test: it takes hours on 2 cores. Prints every failure with its reason; its last
# line is the counts. Pass flags through CONFORMANCE_FLAGS, e.g. CONFORMANCE_FLAGS='-focus "Pods.*\[Conformance\]"'.
conformance: build deps kubernetes
	./hack/conformance/suite/build.sh
	$(GO) run ./hack/conformance -herd $(BIN)/herd $(CONFORMANCE_FLAGS)

# Debian packages needed by real instances and benchmarks.
deps:
	./hack/install-deps.sh

# Builds the pinned upstream Kubernetes components into herd's cache directory.
kubernetes:
	./hack/kubernetes/build.sh
