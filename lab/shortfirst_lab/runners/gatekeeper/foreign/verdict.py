"""The issue's targets for one backend, each a named check with the figures it compared, and
the table a report prints (per model and mode: completed, work over peak, mean response,
the costliest type's completed fraction).
"""

from __future__ import annotations

#: Work rate over the backend's peak that fifo, and sjf and sjf-aging, must keep; with a
#: patience rule (clients who give up are not served work they will not receive) fifo too
#: must keep SJF_WORK_MIN.
FIFO_WORK_MIN = 0.85
SJF_WORK_MIN = 0.9
#: sjf's mean response time at least this many times below fifo's.
SJF_MEAN_FACTOR = 5.0


def _costliest_fraction(run: dict, costliest: str) -> float | None:
    return run["per_type"].get(costliest, {}).get("completed_fraction")


def _num(v: float | None) -> float:
    """A figure that may be missing (no request in the window): NaN, which fails every check."""
    return float("nan") if v is None else v


def checks(backend: dict, modes: list[str], patience: list[str]) -> list[dict]:
    """Every target for every model and patience rule that ran fifo and sjf (and sjf-aging
    modes if any); each check names its rule."""
    out = []
    for model, runs in backend["runs"].items():
        for rule in patience:
            by_mode = {m: runs[f"{m} patience={rule}"] for m in modes if f"{m} patience={rule}" in runs}
            out += _checks(backend["costliest_type"], model, rule, by_mode, modes)
    return out


def _checks(costliest: str, model: str, rule: str, runs: dict, modes: list[str]) -> list[dict]:
    """The targets of one model's runs under one patience rule (`runs` keyed by mode)."""
    out: list[dict] = []
    fifo, sjf = runs.get("fifo"), runs.get("sjf")
    if fifo is not None and sjf is not None:
        agings = [m for m in modes if m.startswith("sjf-aging:") and m in runs]

        def add(name: str, ok: bool, **figures) -> None:
            out.append({"model": model, "patience": rule, "name": name, "ok": bool(ok), **figures})

        fifo_min = FIFO_WORK_MIN if rule == "off" else SJF_WORK_MIN
        add(
            f"fifo work >= {fifo_min} of peak",
            _num(fifo["work_over_peak"]) >= fifo_min,
            fifo=fifo["work_over_peak"],
        )
        add("sjf work >= 0.9 of peak", _num(sjf["work_over_peak"]) >= SJF_WORK_MIN, sjf=sjf["work_over_peak"])
        add(
            "sjf mean >= 5x below fifo",
            _num(sjf["mean_response_ms"]) * SJF_MEAN_FACTOR <= _num(fifo["mean_response_ms"]),
            sjf_ms=sjf["mean_response_ms"],
            fifo_ms=fifo["mean_response_ms"],
        )
        f_fifo = _costliest_fraction(fifo, costliest) or 0.0
        add(
            f"sjf: {costliest} completes at least as often as under fifo",
            (_costliest_fraction(sjf, costliest) or 0.0) >= f_fifo,
            sjf=_costliest_fraction(sjf, costliest),
            fifo=f_fifo,
        )
        for m in agings:
            a = runs[m]
            add(
                f"{m} work >= 0.9 of peak",
                _num(a["work_over_peak"]) >= SJF_WORK_MIN,
                aging=a["work_over_peak"],
            )
            add(
                f"{m} work >= fifo's",
                _num(a["work_per_s"]) >= fifo["work_per_s"],
                aging=a["work_per_s"],
                fifo=fifo["work_per_s"],
            )
            lo, hi = sorted([_num(sjf["mean_response_ms"]), _num(fifo["mean_response_ms"])])
            add(
                f"{m} mean between sjf's and fifo's",
                lo <= _num(a["mean_response_ms"]) <= hi,
                aging_ms=a["mean_response_ms"],
                sjf_ms=sjf["mean_response_ms"],
                fifo_ms=fifo["mean_response_ms"],
            )
            add(
                f"{m}: {costliest} completes at least as often as under fifo",
                (_costliest_fraction(a, costliest) or 0.0) >= f_fifo,
                aging=_costliest_fraction(a, costliest),
                fifo=f_fifo,
            )
    return out


def table(name: str, backend: dict) -> str:
    """Markdown table of one backend's runs."""
    costliest = backend["costliest_type"]
    lines = [
        f"{name} (peak {backend['peak']['work_per_s']:.2f} work/s, "
        f"capacity {backend['capacity_us'] / 1e3:.0f} ms, "
        f"costliest {costliest} {backend['cost_alone_ms'][costliest]:.0f} ms alone)",
        "",
        "| model | mode | completed | work / peak | mean response | costliest completed |",
        "|---|---|---|---|---|---|",
    ]
    for model, runs in backend["runs"].items():
        for mode, r in runs.items():
            c = r["per_type"].get(costliest, {})
            wpp = "-" if r["work_over_peak"] is None else f"{r['work_over_peak']:.2f}"
            mean = "-" if r["mean_response_ms"] is None else f"{r['mean_response_ms'] / 1e3:.2f} s"
            lines.append(
                f"| {model} | {mode} | {r['accounting']['paper']['requests']} of {r['requests']} | "
                f"{wpp} | {mean} | {c.get('completed', 0)} of {c.get('n', 0)} |"
            )
    return "\n".join(lines)
