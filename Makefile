# Every target that runs code creates .venv itself: on a fresh machine `make demo` and `make test` are the set-up.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: demo test docs soak bench lint check-java clean

$(STAMP): pyproject.toml
	@bash scripts/ensure-release-tags.sh
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[spark,etcd,postgres,metrics,dashboard,rabbitmq,kafka,kubernetes,docs,dev]'
	@touch $(STAMP)

check-java:
	@bash scripts/check-java.sh

demo: $(STAMP) check-java
	$(VENV)/bin/apportion demo

# -n 3 on 2 cores: most long tests wait (leases, JVM and broker start-ups, a fleet's rounds), not compute; the
# suite must pass on a busy machine anyway (stress-ng), and three workers keep it under 15 minutes.
test: $(STAMP) check-java
	bash scripts/ensure-test-tools.sh
	$(PY) -m pytest -n 3 --dist loadgroup -q --durations=15 -m "not soak"

docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

soak: $(STAMP)
	APPORTION_SOAK=1 $(PY) -m pytest -q tests -m "slow or soak" -n 2

bench: $(STAMP) check-java
	$(PY) bench/run_all.py

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests bench examples
	$(VENV)/bin/ruff format --check src tests bench examples
	$(VENV)/bin/mypy

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache demo-output site
