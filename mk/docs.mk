# Documentation generated from test results (docs/e2e.md, "Results of the
# latest run"): the tables that describe today come from the last run's
# report, never copied by hand. Run after make test (or make e2e / make
# lab-e2e, saying so with E2E_DOCS_COMMAND), then commit docs/e2e.md.

E2E_DOCS_RESULTS ?= $(LAB_OUT)/e2e/results.md
E2E_DOCS_COMMAND ?= make test

.PHONY: e2e-docs
e2e-docs: ## rewrite docs/e2e.md's results block from the last e2e run's report (E2E_DOCS_RESULTS, run by E2E_DOCS_COMMAND)
	$(GO) run ./v2/internal/resultsdoc/cmd --results $(E2E_DOCS_RESULTS) --doc docs/e2e.md --command '$(E2E_DOCS_COMMAND)'
