# shortfirst sim: simulator benchmark (the simulator's tests run under `cargo test`
# and the lab's pytest, which calls the release binary).
.PHONY: bench-sim

BENCH_TARGETS += bench-sim

# Jobs per workload; every policy runs 3 times on each of two workloads.
BENCH_SIM_JOBS ?= 2000000

bench-sim: venv ## simulator speed per policy (BENCH_SIM_JOBS)
	$(PY) -m shortfirst_lab bench sim --out results/bench-sim.json --jobs $(BENCH_SIM_JOBS) --cargo $(CARGO)

# Crovella Fig. 7/8 from the formulas and the simulator: results/theory/*.png, fig7.json.
.PHONY: theory-figures
THEORY_FIG_JOBS ?= 1000000
theory-figures: venv build ## Crovella Figs. 7/8 from the formulas and the simulator
	cd lab && ../$(PY) -m shortfirst_lab theory fig7 --out ../results/theory --jobs $(THEORY_FIG_JOBS)

# The kernel bands' default cutoffs against the paper's and others, simulated (decision 0020).
.PHONY: theory-cutoffs
theory-cutoffs: venv build ## the bands' cutoffs compared in simulation: results/cutoffs-sim/
	cd lab && ../$(PY) -m shortfirst_lab theory cutoffs --out ../results/cutoffs-sim
