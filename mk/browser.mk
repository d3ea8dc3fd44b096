# The browser experiment: headless Chromium (Debian's, installed by `make apt`) loads real
# pages over HTTPS from `shortfirst serve` and from Debian's servers behind a shaped uplink
# while background downloads load it (lab/experiments/browser.toml; docs/results.md). The
# peers are installed here only, not by `make apt`: `make test` does not need them.
BROWSER_PEER_PACKAGES := nginx h2o caddy lighttpd lighttpd-mod-openssl openssl

.PHONY: lab-browser
lab-browser: apt venv build ## Chromium page loads: serve FAIR/SRPT vs nginx, h2o, Caddy, lighttpd (root, ~4 h; LAB_SET, LAB_RESUME)
	@$(MAKE) --no-print-directory apt APT_PACKAGES="$(BROWSER_PEER_PACKAGES)"
	$(PY) -m shortfirst_lab run $(LAB_EXP)/browser.toml --out results/browser --bin $(BIN) $(LAB_SET) $(LAB_RESUME)
