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

.PHONY: quickstart test lint typecheck pytest bench clean java

quickstart: $(STAMP) java
	$(PY) -m tidemq.demo

test: $(STAMP) $(ALIONS_STAMP) $(NSQJS_STAMP) lint typecheck pytest

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/ruff format --check src tests benchmarks

typecheck: $(STAMP)
	$(VENV)/bin/mypy

pytest: $(STAMP) $(ALIONS_STAMP) $(NSQJS_STAMP) java
	$(PY) -m pytest -q

bench: $(STAMP)
	$(PY) benchmarks/broker_bench.py

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
		{ echo "Python 3.11 or newer is required (PYTHON=$(PYTHON))"; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev,spark]'
	touch $@

# Spark (tidemq.spark, the quickstart pipeline and its tests) runs on a JVM: Java 17 from Debian if none.
java:
	@command -v java >/dev/null 2>&1 || { mkdir -p /usr/share/man/man1 && apt-get update -q && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q openjdk-17-jre-headless; }

# The Node clients of the interop tests (ali-ons, nsqjs), each pinned by its lockfile.
interop/%/node_modules/.installed: interop/%/package-lock.json
	command -v npm >/dev/null 2>&1 || { apt-get update -q && apt-get install -y -q nodejs npm; }
	cd interop/$* && npm ci --no-audit --no-fund --loglevel=error
	touch $@

clean:
	rm -rf $(VENV) $(ALIONS)/node_modules $(NSQJS)/node_modules var

# tidemq against Redis Streams, RabbitMQ and NATS JetStream (benchmarks/peers; not part of `make test`):
# the Debian servers when missing, their Python clients, then every workload (under 10 minutes).
# bench-quick is the tidemq-only subset (about 30 s, no apt).
.PHONY: bench-peers bench-quick
BENCH_STAMP := $(VENV)/.bench-installed

bench-peers: $(BENCH_STAMP)
	@{ command -v redis-server && command -v nats-server && test -x /usr/lib/rabbitmq/bin/rabbitmq-server; } \
		>/dev/null 2>&1 || { apt-get update -q && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q redis-server rabbitmq-server nats-server; }
	$(PY) benchmarks/peers/run.py

bench-quick: $(STAMP)
	$(PY) benchmarks/peers/run.py --quick

$(BENCH_STAMP): $(STAMP)
	$(PY) -m pip install -q -e '.[bench]'
	touch $@
