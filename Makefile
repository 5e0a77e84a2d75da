# Every target that runs code creates .venv itself: on a fresh machine `make demo` and `make test` are the set-up.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
# Python writes each module's bytecode (.pyc) the first time it is imported, into .venv and the checkout's
# __pycache__ (ignored by git), even where PYTHONDONTWRITEBYTECODE is set: the set-up compiles nothing
# (scripts/install-venv.sh says why), and without it every test's process would compile pyspark and pandas again.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: demo test docs soak bench lint check-java clean

$(STAMP): pyproject.toml
	@bash scripts/ensure-release-tags.sh
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	bash scripts/install-venv.sh $(VENV) spark,etcd,postgres,metrics,dashboard,rabbitmq,kafka,kubernetes,docs,dev
	@touch $(STAMP)

check-java:
	@bash scripts/check-java.sh

demo: $(STAMP) check-java
	$(VENV)/bin/apportion demo

# Three xdist workers on 2 cores: most of the suite waits (on brokers, leases, Spark jobs of a server's JVM, worker
# processes), so a third worker fills the cores the two left idle. Clean-clone runs of the same tests on this 2-core
# machine: -n 2 took 881-904 s of pytest (load ~3.5); -n 3 took 678-815 s in four runs (load 3.5-7).
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
