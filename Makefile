# Two commands set everything up on a fresh machine: `make lab` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Re-install only when the package's requirements change.
STAMP_LAB := $(VENV)/.installed-lab
STAMP_TEST := $(VENV)/.installed-test

VENV_BINDER := .venv-binder
# Which TensorFlow gaviz is installed with (an extra of pyproject.toml):
# tensorflow (default), and-cuda (NVIDIA GPUs on Linux) or tensorflow-cpu.
TF_EXTRA ?= tensorflow
# KerasHub (the hub extra) brings tensorflow-text, which installs the `tensorflow`
# distribution: the tests install it only next to that one (or and-cuda's).
comma := ,
HUB_EXTRA := $(if $(filter tensorflow and-cuda,$(TF_EXTRA)),$(comma)hub,)

.PHONY: lab test test-e2e lint test-oldest demo bench binder-check docs docs-check clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# binder/postBuild installs the project's JupyterLab settings (no news prompt).
$(STAMP_TEST): pyproject.toml binder/postBuild binder/overrides.json | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e ".[$(TF_EXTRA),test$(HUB_EXTRA)]"
	binder/postBuild $(BIN)/python
	touch $@

$(STAMP_LAB): pyproject.toml binder/postBuild binder/overrides.json | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e ".[$(TF_EXTRA),lab]"
	binder/postBuild $(BIN)/python
	touch $@

# Jupyter refuses to run as root unless told to (containers, Binder-like machines).
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root,)

lab: $(STAMP_LAB)
	$(BIN)/jupyter lab $(ROOT_FLAG) lessons/

# The unit, exactness and Keras-convention tests, in two processes (pytest-xdist):
# about 9 minutes on 2 cores (CONTRIBUTING.md).
test: $(STAMP_TEST)
	$(BIN)/python -m pytest -m "not e2e" -n 2

# The end-to-end tests (tests/conftest.py's E2E): every lesson in JupyterLab and
# solved, the wheel in a new environment, a first run's terminal, every benchmark,
# the guide's examples and the command line as printed. Two processes too (the
# browser walk of the lessons waits on JupyterLab about half the time), each
# taking whole modules (loadscope): a module's fixture (the wheel's environment,
# a run on two replicas) is then made once.
test-e2e: $(STAMP_TEST)
	$(BIN)/python -m pytest -m e2e -n 2 --dist loadscope

# pyflakes, pycodestyle, isort and bugbear (pyproject.toml's [tool.ruff]).
lint: $(STAMP_TEST)
	$(BIN)/ruff check .

# The oldest TensorFlow and Keras pyproject.toml allows (its lower bounds, pinned
# by .ci/lowest_pins.py), in an environment of their own, run the exactness and
# Keras-convention tests: the versions gaviz claims are versions it tests.
VENV_OLDEST := .venv-oldest
OLDEST_TESTS := tests/training/test_exactness.py tests/training/test_keras_fit_exact.py \
	tests/training/test_keras_fit_arguments.py tests/training/test_keras_callbacks.py \
	tests/training/test_every_optimizer.py tests/training/test_compiling.py tests/training/test_own_loss.py \
	tests/test_keras_door.py tests/training/test_training_contract.py \
	tests/training/test_precision_and_memory.py tests/training/test_tokens_and_batchnorm.py tests/training/test_accumulator.py \
	tests/training/test_feeds.py tests/training/test_overlap.py \
	tests/training/test_sparse_gradients.py tests/training/test_cached_window.py

test-oldest:
	test -x $(VENV_OLDEST)/bin/python || $(PYTHON) -m venv $(VENV_OLDEST)
	$(VENV_OLDEST)/bin/python -m pip install --quiet -e ".[tensorflow-cpu]" pytest pytest-xdist \
		$$($(PYTHON) .ci/lowest_pins.py tensorflow-cpu)
	$(VENV_OLDEST)/bin/python -c "import tensorflow as tf, keras; \
		print('oldest pair: TensorFlow', tf.__version__, '/ Keras', keras.__version__)"
	$(VENV_OLDEST)/bin/python -m pytest -p no:cacheprovider -n 2 $(OLDEST_TESTS)

demo: $(STAMP_TEST)
	$(BIN)/python -m gaviz compare --steps 1 2 4 8 --out curves.png

# Every benchmark, each in its own process (~55 minutes on 2 cores): writes
# benchmarks/results/*.json, results.md, results.png and the README's section.
bench: $(STAMP_TEST)
	$(BIN)/python benchmarks/run.py

# Binder's environment, built from binder/requirements.txt alone, holds one TensorFlow,
# gets the lab settings binder/postBuild installs, and runs every lesson (two at a
# time, each in its own kernel: a lesson mostly waits on one core).
binder-check:
	test -x $(VENV_BINDER)/bin/python || $(PYTHON) -m venv $(VENV_BINDER)
	$(VENV_BINDER)/bin/python -m pip install --quiet -r binder/requirements.txt
	$(VENV_BINDER)/bin/python tests/one_tensorflow.py
	binder/postBuild $(VENV_BINDER)/bin/python
	ls lessons/[0-9][0-9]_*.ipynb | xargs -P 2 -n 1 \
		$(VENV_BINDER)/bin/python tests/lesson_runner.py --save $(EXECUTED_LESSONS)

# The documentation site (Sphinx, myst-nb, the book theme: CONTRIBUTING.md says why),
# written to build/docs/html, rebuilt whole with warnings as errors (-W), every
# reference inside the project checked (-n). The lessons are shown as
# tests/lesson_runner.py executed them: `make binder-check` saves each to
# build/executed-lessons/, and here only a lesson whose copy is missing or older
# than the lesson or the package is executed again.
STAMP_DOCS := $(VENV)/.installed-docs
DOCS_HTML := build/docs/html
EXECUTED_LESSONS := build/executed-lessons
EXECUTED := $(patsubst lessons/%,$(EXECUTED_LESSONS)/%,$(wildcard lessons/[0-9][0-9]_*.ipynb))
LESSON_INPUTS := $(shell find gaviz lessons/solutions -name '*.py')

$(STAMP_DOCS): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e ".[$(TF_EXTRA),docs]"
	touch $@

$(EXECUTED_LESSONS)/%.ipynb: lessons/%.ipynb $(LESSON_INPUTS) | $(STAMP_DOCS)
	$(BIN)/python tests/lesson_runner.py --save $(EXECUTED_LESSONS) $<

docs: $(STAMP_DOCS) $(EXECUTED)
	rm -rf build/docs
	GAVIZ_EXECUTED_LESSONS=$(EXECUTED_LESSONS) $(BIN)/python -m sphinx -W --keep-going -n -q \
		-b html -d build/docs/doctrees docs $(DOCS_HTML)
	@echo "The site: $(DOCS_HTML)/index.html"

# The built site in Chromium: a lesson's figures, the API page, every internal link.
docs-check: docs $(STAMP_TEST)
	GAVIZ_DOCS_SITE=$(DOCS_HTML) $(BIN)/python -m pytest tests/browser/test_docs_site.py

clean:
	rm -rf $(VENV) $(VENV_BINDER) $(VENV_OLDEST) *.egg-info .pytest_cache
