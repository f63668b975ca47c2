# README.md's two commands. Each installs what is missing first (ci/bootstrap: the apt packages
# and tox), then runs tox: `make demo` the demo, `make test` every default environment.
PYTHON ?= python3
export PYTHON

.PHONY: demo test bootstrap

demo: bootstrap
	$(PYTHON) -m tox -e demo

test: bootstrap
	$(PYTHON) -m tox

bootstrap:
	ci/bootstrap
