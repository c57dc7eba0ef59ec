# Every target creates the virtualenv when missing, so a fresh clone needs only `make test`.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export PYSPARK_PYTHON := $(abspath $(PY))
export PYSPARK_DRIVER_PYTHON := $(abspath $(PY))
# spark-submit and airflow come from the virtualenv.
export PATH := $(abspath $(VENV))/bin:$(PATH)
COMPOSE ?= docker compose

.PHONY: install jvm-archive test test-extended test-unit test-under-load chaos lint dist demo demo-model bench bench-operator bench-http bench-reliability bench-providers bench-model bench-jvm bench-venv bench-venv-curator bench-peers bench-resume bench-scale constraints up down clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip wheel

$(STAMP): $(PY) requirements.txt constraints.txt pyproject.toml
	$(PY) -m pip install --quiet -r requirements.txt -c constraints.txt
	$(PY) -m pip install --quiet --no-deps -e .
	touch $(STAMP)

install: $(STAMP)

# The suite runs on PYTEST_WORKERS pytest-xdist workers: much of a test's time is waiting
# on a JVM, Airflow or a loopback API. --dist loadscope with the scopes of tests/conftest.py
# (worker_scope): an integration or e2e file on one worker, unit tests one by one; in the
# order collected (--no-loadscope-reorder), so the slow files start first and the unit
# tests fill the end.
# PYTEST_WORKERS=0 runs the suite in one process.
PYTEST_WORKERS ?= 3
PYTEST_DIST = -n $(PYTEST_WORKERS) --dist loadscope --no-loadscope-reorder

# The driver JVM's class archive (spark_jobs/session/class_archive.py): written only by this
# command (a run maps it when present, and never writes it); kept when a JVM maps it.
jvm-archive: $(STAMP)
	$(PY) -m spark_jobs.session.write_class_archive

# The slowest tests are listed at the end: the suite's time budget is 30 min on 2 cores.
test: jvm-archive
	$(PY) -m pytest -q --durations=40 $(PYTEST_DIST)

# The suite plus the tests marked extended (user-size runs, second routes to one proof).
test-extended: jvm-archive
	EXTENDED_TESTS=1 $(PY) -m pytest -q --durations=40 $(PYTEST_DIST)

test-unit: $(STAMP)
	$(PY) -m pytest -q tests/unit

# The job on a standalone cluster under faults (docs/clusters.md, "Chaos"): CHAOS_RUNS runs.
chaos: $(STAMP)
	$(PY) -m tests.chaos

# Tests that drive real services, RUNS times with every core kept busy by busy loops.
RUNS ?= 5
LOADED_TESTS ?= tests/integration/test_airflow_scheduler.py \
	tests/integration/test_enrich_job_rate_limit.py \
	tests/integration/test_model_pacing_profiles.py \
	tests/integration/test_self_hosted_concurrency.py
test-under-load: $(STAMP)
	for run in $$(seq $(RUNS)); do \
		echo "run $$run of $(RUNS), all cores busy"; \
		$(PY) -m tests.under_load $(PY) -m pytest -q $(LOADED_TESTS) || exit 1; \
	done

# What a cluster needs (docs/clusters.md, "Shipping to a cluster"): the wheel, for Airflow
# deployments (pip install 'resumable-enrichment[airflow]'), and the job's runtime as one PEX file for
# executors that have none of it (spark-submit --files dist/enrich_env.pex, or the job's
# --ship-env). fallback: Spark's own pyspark and py4j still come from PYTHONPATH.
dist: $(STAMP)
	rm -rf dist && mkdir -p dist
	$(PY) -m pip wheel --quiet --no-deps --wheel-dir dist .
	$(VENV)/bin/pex dist/resumable_enrichment-*.whl s3fs opentelemetry-sdk \
		opentelemetry-exporter-otlp-proto-http --constraints constraints.txt \
		--inherit-path=fallback --output-file dist/enrich_env.pex
	ls -l dist

# The daily DAG end to end on embedded defaults: a crash mid-run and a resume.
demo: $(STAMP)
	$(PY) -m demo.run

# The job through the demo model endpoint: schema, a kill, a resume, tokens and cost.
demo-model: $(STAMP)
	$(PY) -m demo.model_run

# Strict types on everything shipped.
lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m mypy --strict spark_jobs plugins dags

bench: bench-operator bench-http bench-reliability

bench-operator: $(STAMP)
	$(PY) -m benchmarks.operator_overhead

bench-http: $(STAMP)
	$(PY) -m benchmarks.http_throughput

# The Spark job against the demo API with one fault class at a time
# (docs/performance.md, "Reliability under faults").
bench-reliability: $(STAMP)
	$(PY) -m benchmarks.reliability

# The model-endpoint enricher against a token-limited demo endpoint, beside the
# mapInArrow + aiohttp recipe, Ray Data's HTTP processor, Daft's prompt() and Bespoke
# Curator (docs/performance.md, "Model endpoints"); BENCH_MODEL_CONTENDERS picks them.
# The model pacing against each provider's emulator (OpenAI, Azure, Anthropic): share of
# the binding limit used, 429s, dead letters (benchmarks/results/provider_pacing.json).
bench-providers: $(STAMP)
	$(PY) -m benchmarks.provider_pacing

# The driver JVM's JIT settings taking turns: the first call and 2 million rows of its own
# work (docs/performance.md, "The driver JVM's defaults").
bench-jvm: jvm-archive
	$(PY) -m benchmarks.jvm_defaults

bench-model: jvm-archive
	-$(MAKE) --no-print-directory bench-venv
	-$(MAKE) --no-print-directory bench-venv-curator
	$(PY) -m benchmarks.model_endpoint

# The benchmark-only environment: Ray Data and Daft (peers), matplotlib (plots), py-spy
# (profiles). Never part of requirements.txt; when it cannot be built the Ray and Daft
# cells say so.
BENCH_VENV := .venv-bench
BENCH_STAMP := $(BENCH_VENV)/.installed
$(BENCH_STAMP): benchmarks/requirements-bench.txt
	$(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/pip install --quiet --upgrade pip wheel
	$(BENCH_VENV)/bin/pip install --quiet -r benchmarks/requirements-bench.txt
	touch $(BENCH_STAMP)

bench-venv: $(BENCH_STAMP)

# Bespoke Curator's own environment: its pins clash with Ray Data's.
CURATOR_VENV := .venv-curator
CURATOR_STAMP := $(CURATOR_VENV)/.installed
$(CURATOR_STAMP): benchmarks/requirements-curator.txt
	$(PYTHON) -m venv $(CURATOR_VENV)
	$(CURATOR_VENV)/bin/pip install --quiet --upgrade pip wheel
	$(CURATOR_VENV)/bin/pip install --quiet -r benchmarks/requirements-curator.txt
	touch $(CURATOR_STAMP)

bench-venv-curator: $(CURATOR_STAMP)

# This job beside what users would write instead, on the same Spark, input and API
# (docs/performance.md, "Against the peers"). Sizes: BENCH_RECORDS, BENCH_SLOW_SECONDS,
# BENCH_ENGINES, BENCH_DELAYS, BENCH_CAPACITIES (benchmarks/peers/run.py).
bench-peers: $(STAMP)
	-$(MAKE) --no-print-directory bench-venv
	$(PY) -m benchmarks.peers.run
	@if [ -x $(BENCH_VENV)/bin/python ] && $(BENCH_VENV)/bin/python -c "import matplotlib" 2>/dev/null; \
	then $(BENCH_VENV)/bin/python -m benchmarks.peers.plot; \
	else echo "plot: skipped: no matplotlib in $(BENCH_VENV)"; fi

# Kill at 50 % and resume: this job's snapshots against Ray Data's checkpointing.
bench-resume: $(STAMP)
	-$(MAKE) --no-print-directory bench-venv
	$(PY) -m benchmarks.peers.resume

# The snapshot store alone as cuts (k) and partitions (P) grow, format 2 beside format 1.
bench-scale: $(STAMP)
	$(PY) -m benchmarks.scale
	$(PY) -m benchmarks.scale_plot

# Re-resolve the full pinned set after changing requirements.txt (Airflow's convention).
constraints: $(PY)
	$(PY) -m pip install --quiet -r requirements.txt
	$(PY) -m pip freeze --exclude-editable | grep -v '^resumable-enrichment' > constraints.txt

# The multi-service deployment (needs a Docker engine): returns once every service is healthy.
# A .env with random secrets is written first when there is none (docker/make_env.py).
up:
	python3 docker/make_env.py docker/.env.example .env
	$(COMPOSE) up --build --detach --wait --wait-timeout 900

down:
	$(COMPOSE) down --remove-orphans

clean:
	rm -rf $(VENV) .pytest_cache
