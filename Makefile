# The two commands: `make run` (labgov with demo data) and `make test` (the whole suite).
.PHONY: run test lint setup
run:
	./scripts/run-demo
test:
	./scripts/test
lint:
	./scripts/setup && .venv/bin/ruff check . && .venv/bin/ruff format --check labgov tests bench
setup:
	./scripts/setup
