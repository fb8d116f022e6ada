# gpulse — `make demo` runs the exporter on simulated GPUs, `make test` runs every test.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
SUM    := $(shell cksum < pyproject.toml | cut -d' ' -f1)
BASE   := $(VENV)/.base-$(SUM)
TESTS  := $(VENV)/.test-$(SUM)

.PHONY: demo test bench dashboards proto chart rules-variants clean

# the demo needs only gpulse itself; the tests add the [test] extra
$(BASE): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -e .
	rm -f $(VENV)/.base-* && touch $@

$(TESTS): $(BASE)
	$(PY) -m pip install --quiet -e '.[test]'
	rm -f $(VENV)/.test-* && touch $@

demo: $(BASE)
	$(VENV)/bin/gpulse serve --source sim --sim.scenario sync-stall

test: $(TESTS)
	$(PY) -m pytest -q

bench: $(BASE)
	$(PY) bench/scrape_latency.py
	$(PY) bench/exporter_cpu.py

# Regenerate grafana/dashboards/*.json with the exact SDK release they are pinned to.
dashboards: $(TESTS)
	$(PY) -m pip install --quiet "$$($(PY) grafana/generate.py --requirement)"
	$(PY) grafana/generate.py

# The Helm chart as a self-contained package (rules and dashboards inside): dist/gpulse-<version>.tgz
chart: $(TESTS)
	$(PY) helm/package_chart.py

# Rebuild the rule variants for rulers without keep_firing_for (prometheus/rules-vmalert) from prometheus/rules.
rules-variants: $(BASE)
	$(PY) prometheus/tools/variants.py --variant vmalert --out prometheus/rules-vmalert prometheus/rules/*.yml

proto: $(TESTS)
	PYTHON=$(PY) sh exporter/gpulse/kube/regen.sh

clean:
	rm -rf $(VENV) .pytest_cache bench/out tests/fakenvml/build

# Container image (needs a Docker engine): make image IMAGE=registry.example.com/gpulse:0.1.0
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
IMAGE   ?= gpulse:$(VERSION)
DOCKER  ?= docker
.PHONY: image
image:
	$(DOCKER) build -t $(IMAGE) .
