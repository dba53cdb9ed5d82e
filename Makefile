# One command to try memform, one to test it.  Both create .venv on first use.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test clean

$(BIN)/memform: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $@

demo: $(BIN)/memform
	$(BIN)/memform estimate llama2-7b --gpu h100-80g --set micro_batch=4 --set seq_len=4096

test: $(BIN)/memform
	$(BIN)/python -m pytest

clean:
	rm -rf $(VENV) build dist
