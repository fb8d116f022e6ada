# gpulse — `make demo` runs the exporter on simulated GPUs, `make test` runs every test.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: demo test bench dashboards proto clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	rm -f $(VENV)/.installed-* && touch $@

demo: $(STAMP)
	$(VENV)/bin/gpulse serve --source sim --sim.scenario sync-stall

test: $(STAMP)
	$(PY) -m pytest -q

bench: $(STAMP)
	$(PY) bench/scrape_latency.py
	$(PY) bench/exporter_cpu.py

# Regenerate grafana/dashboards/*.json with the exact SDK release they are pinned to.
dashboards: $(STAMP)
	$(PY) -m pip install --quiet "$$($(PY) grafana/generate.py --requirement)"
	$(PY) grafana/generate.py

proto: $(STAMP)
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
