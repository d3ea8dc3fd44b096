# lab: experiments (FAIR vs SRPT on a shaped uplink) and their reports. See lab/shortfirst_lab.
APT_PACKAGES += python3-venv chromium openssl
LAB_EXP := lab/experiments

.PHONY: demo lab-tocs lab-tocs-kernel lab-overload lab-report

# The main job: FAIR vs SRPT at loads 0.7 and 0.9 on a 10 Mbit/s uplink, a few minutes.
demo: apt venv build ## the main job: FAIR vs SRPT on a shaped uplink, with a report (root, ~5 min)
	@if [ "$$(id -u)" != 0 ]; then echo "make demo: needs root (network namespaces, qdiscs)" >&2; exit 1; fi
	rm -rf results/demo
	$(PY) -m shortfirst_lab run $(LAB_EXP)/demo.toml --out results/demo --bin $(BIN)

# The full reproduction of Harchol-Balter 2003 Figs. 5, 6, 9 (about 2.3 hours each): SRPT ordered
# by the server's own scheduler (lab-tocs) or in the kernel's priority bands as in the paper
# (lab-tocs-kernel). LAB_SET="--set run.duration_s=150" shortens it; LAB_RESUME=--resume
# continues an interrupted run.
lab-tocs: apt venv build ## Harchol-Balter 2003 Figs. 5, 6, 9, SRPT in user space (~2.3 h; LAB_SET, LAB_RESUME)
	$(PY) -m shortfirst_lab run $(LAB_EXP)/tocs-lan.toml --out results/tocs-lan --bin $(BIN) $(LAB_SET) $(LAB_RESUME)

lab-tocs-kernel: apt venv build ## the same with SRPT in the kernel's bands (~2.3 h; LAB_SET, LAB_RESUME)
	$(PY) -m shortfirst_lab run $(LAB_EXP)/tocs-lan-kernel.toml --out results/tocs-lan-kernel --bin $(BIN) $(LAB_SET) $(LAB_RESUME)

# Schroeder & Harchol-Balter 2006 (web servers under overload): W1-W10, Table 2's setups under W1,
# persistent overload at rho 1.2 and 1.4, and 30 minutes at 1.4 for the server's memory (about
# 10.5 hours in all), then results/overload/summary.json and its figures.
OVERLOAD_EXPS := transient factors persistent rss
lab-overload: apt venv build ## Schroeder 2006 overload: W1-W10, Table 2 setups, persistent, memory (~10.5 h; LAB_SET, LAB_RESUME)
	@for e in $(OVERLOAD_EXPS); do \
	  $(PY) -m shortfirst_lab run $(LAB_EXP)/overload-$$e.toml --out results/overload-$$e --bin $(BIN) $(LAB_SET) $(LAB_RESUME) || exit 1; \
	done
	$(PY) -m shortfirst_lab overload $(foreach e,$(OVERLOAD_EXPS),results/overload-$(e)) --out results/overload

# Rebuild summary.json and report.html of an experiment directory from its raw logs.
LAB_DIR ?= results/demo
lab-report: venv ## rebuild summary.json and report.html of LAB_DIR from its raw logs
	$(PY) -m shortfirst_lab report $(LAB_DIR)
