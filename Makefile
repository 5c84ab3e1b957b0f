# Two entry points: `make quickstart` runs the main job, `make test` runs every check.
# Both create .venv and install what they need (Python packages, Node for the interop tests, Java for Spark).

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
ALIONS := interop/ali-ons
ALIONS_STAMP := $(ALIONS)/node_modules/.installed
NSQJS := interop/nsqjs
NSQJS_STAMP := $(NSQJS)/node_modules/.installed

.PHONY: quickstart test lint typecheck pytest bench clean java maven rocketmq-jars grpc-protos

quickstart: $(STAMP) java
	$(PY) -m tidemq.demo

test: $(STAMP) $(ALIONS_STAMP) $(NSQJS_STAMP) chromium lint typecheck pytest

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/ruff format --check src tests benchmarks

typecheck: $(STAMP)
	$(VENV)/bin/mypy

pytest: $(STAMP) $(ALIONS_STAMP) $(NSQJS_STAMP) java rocketmq-jars chromium
	$(PY) -m pytest -q

# The chaos suite's long run (tests/chaos/, docs/reliability.md): 100 SIGKILL rounds under sync-flush load on
# RocketMQ remoting, NSQ TCP and gRPC, kills during consumption, disk full; writes its table into the doc.
.PHONY: chaos
chaos: $(STAMP)
	TIDEMQ_CHAOS=long $(PY) -m pytest -q -s -m chaos tests/chaos

bench: $(STAMP)
	$(PY) benchmarks/broker_bench.py

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
		{ echo "Python 3.11 or newer is required (PYTHON=$(PYTHON))"; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev,spark]'
	touch $@

# The web console's browser tests (tests/console/) drive Debian's headless chromium through its chromedriver;
# never a browser download.
.PHONY: chromium
chromium:
	@test -x /usr/bin/chromium -a -x /usr/bin/chromedriver || { apt-get update -q && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver; }

# Spark (tidemq.spark, the quickstart pipeline and its tests) runs on a JVM: Java 17 from Debian if none.
java:
	@command -v java >/dev/null 2>&1 || { mkdir -p /usr/share/man/man1 && apt-get update -q && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q openjdk-17-jre-headless; }

# Real Apache RocketMQ for the java_broker tests: each generation's name server and broker jars, pinned by
# interop/rocketmq-java/broker-<version>/pom.xml, resolved from Maven Central into .cache/ (git-ignored).
ROCKETMQ_VERSIONS := 5.3.3 4.9.7
ROCKETMQ_JARS := $(ROCKETMQ_VERSIONS:%=.cache/rocketmq/%/.resolved)
MAVEN_REPO := $(CURDIR)/.cache/m2

rocketmq-jars: $(ROCKETMQ_JARS)

.cache/rocketmq/%/.resolved: interop/rocketmq-java/broker-%/pom.xml | maven
	@mkdir -p $(@D)
	@rm -rf $@ $(@D)/lib
	@mvn -q -B -Dmaven.repo.local=$(MAVEN_REPO) -f $< dependency:copy-dependencies \
		-DoutputDirectory=$(CURDIR)/$(@D)/lib > $(@D)/resolve.log 2>&1 || { \
		echo "cannot resolve Apache RocketMQ $* (org.apache.rocketmq:rocketmq-broker:$*, rocketmq-namesrv:$*):" \
			"$$(grep -m1 -o 'Could not .*' $(@D)/resolve.log || tail -n1 $(@D)/resolve.log)"; exit 1; }
	@touch $@

# The Apache RocketMQ 5.3.3 proxy (the 5.x SDKs' gRPC endpoint) that tests/rocketmq_proxy.py runs in cluster
# mode in front of a 5.3.3 cluster: pinned by interop/rocketmq-java/proxy-5.3.3/pom.xml, resolved into .cache/.
.PHONY: rocketmq-proxy-jars
ROCKETMQ_PROXY := .cache/rocketmq-proxy/5.3.3/.resolved
pytest: rocketmq-proxy-jars

rocketmq-proxy-jars: $(ROCKETMQ_PROXY)

$(ROCKETMQ_PROXY): interop/rocketmq-java/proxy-5.3.3/pom.xml | maven
	@mkdir -p $(@D)
	@rm -rf $@ $(@D)/lib
	@mvn -q -B -Dmaven.repo.local=$(MAVEN_REPO) -f $< dependency:copy-dependencies \
		-DoutputDirectory=$(CURDIR)/$(@D)/lib > $(@D)/resolve.log 2>&1 || { \
		echo "cannot resolve the Apache RocketMQ 5.3.3 proxy (org.apache.rocketmq:rocketmq-proxy:5.3.3):" \
			"$$(grep -m1 -o 'Could not .*' $(@D)/resolve.log || tail -n1 $(@D)/resolve.log)"; exit 1; }
	@touch $@

maven: java
	@command -v mvn >/dev/null 2>&1 || { apt-get update -q && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q maven; }

# The Node clients of the interop tests (ali-ons, nsqjs), each pinned by its lockfile.
interop/%/node_modules/.installed: interop/%/package-lock.json
	command -v npm >/dev/null 2>&1 || { apt-get update -q && apt-get install -y -q nodejs npm; }
	cd interop/$* && npm ci --no-audit --no-fund --loglevel=error
	touch $@

clean:
	rm -rf $(VENV) $(ALIONS)/node_modules $(NSQJS)/node_modules var .cache

# tidemq against Redis Streams, RabbitMQ, NATS JetStream, the Apache RocketMQ 5.3.3 Java broker and Apache
# Kafka 4.1.1 (benchmarks/peers; not part of `make test`): the Debian servers when missing, the Java peers'
# jars, their Python clients, then every workload.
# bench-quick is the tidemq-only subset (about 30 s, no apt).
.PHONY: bench-peers bench-quick
BENCH_STAMP := $(VENV)/.bench-installed

# The Java peers' jars and the Go peer are named literally: their variables are defined further down.
bench-peers: $(BENCH_STAMP) .cache/rocketmq/5.3.3/.resolved .cache/kafka/4.1.1/.resolved \
		.cache/rocketmq-go-bench/peer
	@{ command -v redis-server && command -v nats-server && test -x /usr/lib/rabbitmq/bin/rabbitmq-server; } \
		>/dev/null 2>&1 || { apt-get update -q && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q redis-server rabbitmq-server nats-server; }
	$(PY) benchmarks/peers/run.py

# Apache Kafka 4.1.1 (KRaft) for the kafka peer: kafka_2.13 and its dependencies, pinned by
# benchmarks/peers/kafka/pom.xml, resolved from Maven Central into .cache/kafka/ (git-ignored).
KAFKA_VERSION := 4.1.1
KAFKA_JARS := .cache/kafka/$(KAFKA_VERSION)/.resolved
.PHONY: kafka-jars
kafka-jars: $(KAFKA_JARS)

$(KAFKA_JARS): benchmarks/peers/kafka/pom.xml | maven
	@mkdir -p $(@D)
	@rm -rf $@ $(@D)/lib
	@mvn -q -B -Dmaven.repo.local=$(MAVEN_REPO) -f $< dependency:copy-dependencies \
		-DoutputDirectory=$(CURDIR)/$(@D)/lib > $(@D)/resolve.log 2>&1 || { \
		echo "cannot resolve Apache Kafka $(KAFKA_VERSION) (org.apache.kafka:kafka_2.13:$(KAFKA_VERSION)):" \
			"$$(grep -m1 -o 'Could not .*' $(@D)/resolve.log || tail -n1 $(@D)/resolve.log)"; exit 1; }
	@touch $@

bench-quick: $(STAMP)
	$(PY) benchmarks/peers/run.py --quick

# The scale ladder (benchmarks/scale.py, docs/performance.md "Scale ladder"): throughput and broker RSS as
# topics, clients, groups, backlog and pending timers grow; PNGs into var/scale/. SCALE_ARGS=--quick for ~2 min.
.PHONY: bench-scale
SCALE_ARGS ?=
bench-scale: $(BENCH_STAMP)
	$(PY) benchmarks/scale.py $(SCALE_ARGS)

$(BENCH_STAMP): $(STAMP)
	$(PY) -m pip install -q -e '.[bench]'
	touch $@

# Real clients against `tidemq server` (tests/interop/test_interop_java_client.py, tests/interop/test_interop_go_client.py):
# Apache RocketMQ's Java client 4.9.8 (interop/rocketmq-java/client-4.9.8, Maven) and rocketmq-client-go
# v2.1.2 (interop/rocketmq-go, pinned by go.sum), each built into .cache/ (git-ignored) with its downloads.
JAVA_PEER_DIR := interop/rocketmq-java/client-4.9.8
JAVA_PEER := .cache/rocketmq-java-client/peer.jar
GO_PEER_DIR := interop/rocketmq-go
GO_PEER := .cache/rocketmq-go-client/peer
GO_CACHE := $(CURDIR)/.cache/go
GO_ENV := GOPATH=$(GO_CACHE) GOMODCACHE=$(GO_CACHE)/mod GOCACHE=$(GO_CACHE)/build GOFLAGS='-mod=readonly -modcacherw'

.PHONY: rocketmq-java-client rocketmq-go-client javac golang
pytest: rocketmq-java-client rocketmq-go-client

rocketmq-java-client: $(JAVA_PEER)

$(JAVA_PEER): $(JAVA_PEER_DIR)/pom.xml $(wildcard $(JAVA_PEER_DIR)/src/main/java/tidemq/interop/*.java) | maven javac
	@mkdir -p $(@D)
	@rm -rf $(@D)/lib $@
	@mvn -q -B -Dmaven.repo.local=$(MAVEN_REPO) -f $< -DbuildDir=$(CURDIR)/$(@D) package > $(@D)/build.log 2>&1 || { \
		echo "cannot build the Java client peer (org.apache.rocketmq:rocketmq-client:4.9.8, rocketmq-acl:4.9.8, rocketmq-tools:4.9.8):" \
			"$$(grep -m1 -o 'Could not .*' $(@D)/build.log || grep -m1 ERROR $(@D)/build.log || tail -n1 $(@D)/build.log)"; exit 1; }

# Apache RocketMQ's official 5.x Java SDK (gRPC) as a test peer: interop/rocketmq-java/client5
# (org.apache.rocketmq:rocketmq-client-java 5.2.0), built into .cache/rocketmq-java-client5 for
# tests/java5_client_support.py.
.PHONY: rocketmq-java-client5
JAVA5_PEER_DIR := interop/rocketmq-java/client5
JAVA5_PEER := .cache/rocketmq-java-client5/peer.jar
pytest: rocketmq-java-client5

rocketmq-java-client5: $(JAVA5_PEER)

$(JAVA5_PEER): $(JAVA5_PEER_DIR)/pom.xml $(wildcard $(JAVA5_PEER_DIR)/src/main/java/tidemq/interop5/*.java) | maven javac
	@mkdir -p $(@D)
	@rm -rf $(@D)/lib $@
	@mvn -q -B -Dmaven.repo.local=$(MAVEN_REPO) -f $< -DbuildDir=$(CURDIR)/$(@D) package > $(@D)/build.log 2>&1 || { \
		echo "cannot build the Java 5.x SDK peer (org.apache.rocketmq:rocketmq-client-java:5.2.0):" \
			"$$(grep -m1 -o 'Could not .*' $(@D)/build.log || grep -m1 ERROR $(@D)/build.log || tail -n1 $(@D)/build.log)"; exit 1; }

javac: java
	@command -v javac >/dev/null 2>&1 || { apt-get update -q && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q openjdk-17-jdk-headless; }

rocketmq-go-client: $(GO_PEER)

# The same Go program for benchmarks/peers (its `bench` sub-command, W1 with SendAsync), built on its own so a
# benchmark run never replaces the binary the tests are running.
GO_BENCH := .cache/rocketmq-go-bench/peer
.PHONY: rocketmq-go-bench
rocketmq-go-bench: $(GO_BENCH)

$(GO_BENCH): $(GO_PEER_DIR)/go.mod $(GO_PEER_DIR)/go.sum $(wildcard $(GO_PEER_DIR)/*.go) | golang
	@mkdir -p $(@D)
	@cd $(GO_PEER_DIR) && $(GO_ENV) go build -o $(CURDIR)/$@ . > $(CURDIR)/$(@D)/build.log 2>&1 || { \
		echo "cannot build the Go benchmark peer (github.com/apache/rocketmq-client-go/v2 v2.1.2):" \
			"$$(grep -m1 -v '^#' $(CURDIR)/$(@D)/build.log)"; exit 1; }

$(GO_PEER): $(GO_PEER_DIR)/go.mod $(GO_PEER_DIR)/go.sum $(wildcard $(GO_PEER_DIR)/*.go) | golang
	@mkdir -p $(@D)
	@cd $(GO_PEER_DIR) && $(GO_ENV) go build -o $(CURDIR)/$@ . > $(CURDIR)/$(@D)/build.log 2>&1 || { \
		echo "cannot build the Go client peer (github.com/apache/rocketmq-client-go/v2 v2.1.2):" \
			"$$(grep -m1 -v '^#' $(CURDIR)/$(@D)/build.log)"; exit 1; }

golang:
	@command -v go >/dev/null 2>&1 || { apt-get update -q && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q golang-go; }

# Real NSQ for the real_nsq tests: nsqd and nsqlookupd v1.3.0 and the go-nsq v1.1.0 test program
# (interop/nsq-go, pinned by its go.sum), built from the Go module proxy into .cache/nsq/bin (git-ignored).
# Go from Debian when missing.
.PHONY: nsq-go
NSQ_GO := interop/nsq-go
NSQ_BIN := .cache/nsq/bin
NSQ_STAMP := $(NSQ_BIN)/.built

nsq-go: $(NSQ_STAMP)

pytest: $(NSQ_STAMP)

$(NSQ_STAMP): $(NSQ_GO)/go.mod $(NSQ_GO)/go.sum $(NSQ_GO)/main.go | golang
	@mkdir -p $(NSQ_BIN)
	@rm -f $@
	@cd $(NSQ_GO) && $(GO_ENV) go mod download > $(CURDIR)/$(NSQ_BIN)/download.log 2>&1 || { \
		echo "cannot resolve a Go module of $(NSQ_GO): $$(grep -m1 . $(CURDIR)/$(NSQ_BIN)/download.log)"; exit 1; }
	@cd $(NSQ_GO) && $(GO_ENV) go build -o $(CURDIR)/$(NSQ_BIN)/ \
		github.com/nsqio/nsq/apps/nsqd github.com/nsqio/nsq/apps/nsqlookupd . \
		> $(CURDIR)/$(NSQ_BIN)/build.log 2>&1 || { \
		echo "cannot build nsqd/nsqlookupd v1.3.0 and $(NSQ_GO): $$(tail -n1 $(CURDIR)/$(NSQ_BIN)/build.log)"; exit 1; }
	@touch $@

# The gRPC front-end's Python modules, generated from src/tidemq/grpc/proto/*.proto by the grpcio-tools pinned
# in the dev extra and committed; tests/grpc/test_protos.py regenerates them into a temp dir to catch drift.
GRPC_OUT ?= src
GRPC_PROTOS := src/tidemq/grpc/proto/definition.proto src/tidemq/grpc/proto/service.proto

grpc-protos: $(STAMP)
	$(PY) -m grpc_tools.protoc -I src --python_out=$(GRPC_OUT) --pyi_out=$(GRPC_OUT) \
		--grpc_python_out=$(GRPC_OUT) $(GRPC_PROTOS)
