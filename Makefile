# Two entry points (see README): `make demo` runs the main job on the bundled example, `make test` the tests.
# Both create .venv on first use. torch is pinned to the CPU wheel first so that no extra resolves a CUDA build.
VENV ?= .venv
PY := $(VENV)/bin/python
NM := $(VENV)/bin/neuron-migrate
TORCH ?= torch==2.13.0

.PHONY: demo test lint install clean docs

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(TORCH)
	$(PY) -m pip install -q -e ".[trace,hf,dev,diffusers,ray]"
	touch $@

install: $(VENV)/.installed

demo: $(VENV)/.installed
	$(NM) scan examples/cuda_project --exit-zero
	mkdir -p out
	$(NM) trace examples/cuda_project/trace_target.py:build --format json --output out/trace.json
	$(NM) report examples/cuda_project --trace out/trace.json --format html --output report.html
	@echo "Open report.html for the effort estimate; \`$(NM) fix examples/cuda_project\` shows the rewrites."

test: $(VENV)/.installed
	$(PY) -m pytest -q -n 2 --dist loadgroup

# the project's own lint, as CI runs it: ruff's checks and formatting at the configured line length
lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

docs: $(VENV)/.installed
	$(NM) rules --format md > docs/rules.md

clean:
	rm -rf $(VENV) .neuron-migrate-cache .pytest_cache
