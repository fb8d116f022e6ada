# gpulse — `make demo` runs the exporter on simulated GPUs, `make test` runs every test,
# `make test-unit` the unit tests.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
SUM    := $(shell cksum < pyproject.toml | cut -d' ' -f1)
BASE   := $(VENV)/.base-$(SUM)
TESTS  := $(VENV)/.test-$(SUM)
CHARTS := $(VENV)/.chart-$(SUM)
# the one package `make chart` needs, at the version the test extra pins
HELM_SDK := $(shell sed -n 's/^ *"\(helm-python-sdk==[^"]*\)".*/\1/p' pyproject.toml)

.PHONY: demo test test-unit bench dashboards rules rules-variants proto chart clean

# the demo needs only gpulse itself; the tests add the [test] extra
$(BASE): pyproject.toml
	@test -x $(PY) || { echo "gpulse: creating the virtual environment $(VENV)"; $(PYTHON) -m venv $(VENV); }
	@echo "gpulse: installing gpulse and its four dependencies into $(VENV) (pip, about 10 s)"
	@$(PY) -m pip install --quiet -e .
	@rm -f $(VENV)/.base-* && touch $@
	@echo "gpulse: installed; the command is $(VENV)/bin/gpulse (or run: . $(VENV)/bin/activate)"

$(TESTS): $(BASE)
	@echo "gpulse: installing the test dependencies into $(VENV) (pip, under a minute)"
	$(PY) -m pip install --quiet -e '.[test]'
	rm -f $(VENV)/.test-* && touch $@

demo: $(BASE)
	@echo "gpulse: serving 8 simulated GPUs with sync stalls; the log prints the URL to open (Ctrl-C stops)"
	$(VENV)/bin/gpulse serve --source sim --sim.scenario sync-stall

# Four workers, one test file each at a time (a file's module fixtures, such as one
# Prometheus, stay in one worker), in the order tests/conftest.py gives them (the long
# files first). Verdicts are reached in virtual time, so most of the suite's time is
# CPU; four workers on two cores overlap the live stacks' waits for their daemons with
# the others' work. Override with make test PYTEST_WORKERS=0 for one process. The 25
# slowest tests are listed at the end, so a CI log says where the time went.
PYTEST_WORKERS ?= 4
test: $(TESTS)
	$(PY) -m pytest -q -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=25

# the unit tests alone (tests/unit/, under a minute): no gpulse process, no external binary
test-unit: $(TESTS)
	$(PY) -m pytest -q -m unit tests/unit

bench: $(BASE)
	$(PY) bench/scrape_latency.py
	$(PY) bench/exporter_cpu.py

# Regenerate grafana/dashboards/*.json with the exact SDK release they are pinned to.
dashboards: $(TESTS)
	$(PY) -m pip install --quiet "$$($(PY) grafana/generate.py --requirement)"
	$(PY) grafana/generate.py

# Packaging needs Helm's engine (helm-python-sdk) and nothing else: not gpulse, not the test extra.
$(CHARTS): pyproject.toml
	@test -x $(PY) || { echo "gpulse: creating the virtual environment $(VENV)"; $(PYTHON) -m venv $(VENV); }
	$(PY) -m pip install --quiet "$(HELM_SDK)"
	@rm -f $(VENV)/.chart-* && touch $@

# The Helm chart as a self-contained package (rules and dashboards inside): dist/gpulse-<version>.tgz
chart: $(CHARTS)
	$(PY) helm/package_chart.py

# Regenerate prometheus/rules/ and the Helm chart's prometheus/chart/ from prometheus/templates/,
# the threshold table and the recording rules' names.
rules: $(BASE)
	$(PY) prometheus/generate.py

# Rebuild the rule variants from prometheus/rules: for rulers without keep_firing_for
# (prometheus/rules-vmalert) and for Prometheus, reading records of a group in order (prometheus/rules-prometheus).
rules-variants: $(BASE)
	$(PY) prometheus/tools/variants.py --variant vmalert --out prometheus/rules-vmalert prometheus/rules/*.yml
	$(PY) prometheus/tools/variants.py --variant prometheus --out prometheus/rules-prometheus prometheus/rules/*.yml

proto: $(TESTS)
	PYTHON=$(PY) sh exporter/gpulse/attribution/regen.sh

clean:
	rm -rf $(VENV) .pytest_cache bench/out tests/fakenvml/build

# Container image (needs a Docker engine, or DOCKER=podman). No image is published:
#   make image IMAGE=registry.example.com/gpulse:0.1.0        # build
#   make image-push IMAGE=registry.example.com/gpulse:0.1.0   # push where the nodes pull from
# then install the chart with --set image.repository=registry.example.com/gpulse.
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
IMAGE   ?= gpulse:$(VERSION)
DOCKER  ?= docker
.PHONY: image image-push
image:
	$(DOCKER) build -t $(IMAGE) .

image-push:
	$(DOCKER) push $(IMAGE)
