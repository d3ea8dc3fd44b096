"""The issue's targets beside the measured values: one check per target and point, each with
the value, the bound and whether it holds. Nothing here runs anything; a missing figure (an
arm not run) is a check with value None that does not hold.
"""

from __future__ import annotations

from ....spec.pg import POOLED_ARM, overload_arm, spell_arm

#: Experiment 2's targets.
ADDED_MEDIAN_US = 30.0
PROXY_CPU_US = 25.0
TPS_VS_PGBOUNCER = 0.9
#: Experiment 1's targets (at the overloads, and at the light load).
OVERLOADS = (1.25, 1.5)
LIGHT = 0.5
CHEAP_P99_MS = 50.0
CHEAP_VS_DIRECT = 2.0
SERVED = 0.99
BELOW_PGBOUNCER = 10.0
GOODPUT_VS_PGBOUNCER = 0.9
LIGHT_VS_DIRECT = 1.1
AUTO_WITHIN = 0.1


def _check(target: str, where: str, value: float | None, bound: float, at_most: bool) -> dict:
    ok = value is not None and (value <= bound if at_most else value >= bound)
    return {"target": target, "where": where, "value": value, "bound": bound, "ok": ok}


def overhead(summary: dict) -> list[dict]:
    """Added median latency at one client and proxy CPU per transaction (the gatekeeper), and
    the gatekeeper's transactions/s over PgBouncer's at the most clients, alone and in front
    of PgBouncer (where that arm ran)."""
    out = []
    most = max(p["clients"] for p in summary["points"])
    for p in summary["points"]:
        where = f"{p['script']} {p['protocol']} c={p['clients']}"
        gk = p["arms"].get("gatekeeper")
        if gk is None:
            continue
        if p["clients"] == 1:
            out.append(
                _check(
                    "added median latency, us",
                    where,
                    p["added_median_us"].get("gatekeeper"),
                    ADDED_MEDIAN_US,
                    True,
                )
            )
        out.append(
            _check(
                "gatekeeper CPU per transaction, us",
                where,
                gk.get("proxy_cpu_us_per_transaction"),
                PROXY_CPU_US,
                True,
            )
        )
        pb = p["arms"].get("pgbouncer", {})
        if p["clients"] == most and pb.get("tps"):
            out.append(_check("tps / PgBouncer's", where, gk["tps"] / pb["tps"], TPS_VS_PGBOUNCER, False))
            chain = p["arms"].get(POOLED_ARM, {})
            if "tps" in chain:
                ratio = _ratio(chain["tps"], pb["tps"])
                out.append(
                    _check("tps in front of PgBouncer / PgBouncer's", where, ratio, TPS_VS_PGBOUNCER, False)
                )
    return out


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else a / b


def overload(summary: dict) -> list[dict]:
    """At the overloads, each gatekeeper arm against direct and PgBouncer; at the light load
    against direct; `@auto` arms against the same policy at the measured capacity."""
    by = {(p["load"], p["arm"]): p for p in summary["points"]}
    arms = sorted({p["arm"] for p in summary["points"]} - {"direct", "pgbouncer"})
    out = []
    for (load, arm), p in sorted(by.items()):
        if arm not in arms:
            continue
        where = f"{arm} at {load:g}x"
        if p.get("proxy_exited"):
            continue  # the gatekeeper died: its point measures nothing of the arm
        cheap, direct, pb = p["cheap"], by.get((load, "direct")), by.get((load, "pgbouncer"))
        if pb is not None and pb.get("proxy_exited"):
            pb = None  # PgBouncer died during its point: nothing to compare with
        if load in OVERLOADS:
            out.append(_check("cheap p99, ms", where, cheap["p99_ms"], CHEAP_P99_MS, True))
            out.append(
                _check(
                    "cheap p99 / direct's",
                    where,
                    _ratio(cheap["p99_ms"], direct and direct["cheap"]["p99_ms"]),
                    CHEAP_VS_DIRECT,
                    True,
                )
            )
            out.append(_check("cheap served fraction", where, cheap["served_fraction"], SERVED, False))
            pb_p99 = pb and pb["cheap"]["p99_ms"]
            if pb is not None and pb_p99 is None:
                # PgBouncer's p99 beyond the run (never started): counted at the timeout, so
                # the ratio is a lower bound.
                pb_p99 = 1e3 * summary["settings"]["timeout_s"]
            out.append(
                _check(
                    "PgBouncer's cheap p99 / this",
                    where,
                    _ratio(pb_p99, cheap["p99_ms"]),
                    BELOW_PGBOUNCER,
                    False,
                )
            )
            ours, theirs = p["expensive"]["goodput_per_s"], pb and pb["expensive"]["goodput_per_s"]
            check = _check(
                "expensive goodput / PgBouncer's", where, _ratio(ours, theirs), GOODPUT_VS_PGBOUNCER, False
            )
            if theirs == 0 and ours > 0:
                # No ratio, but any goodput is more than none.
                check.update(ok=True, note="PgBouncer served none in time")
            out.append(check)
        if load == LIGHT:
            out.append(
                _check(
                    "cheap p99 / direct's",
                    where,
                    _ratio(cheap["p99_ms"], direct and direct["cheap"]["p99_ms"]),
                    LIGHT_VS_DIRECT,
                    True,
                )
            )
        a = overload_arm(arm)
        fixed = by.get((load, spell_arm(a._replace(auto=False))))
        if a.auto and fixed is not None:
            for cls, key in (("cheap", "p99_ms"), ("expensive", "goodput_per_s")):
                r = _ratio(p[cls][key], fixed[cls][key])
                out.append(
                    _check(
                        f"{cls} {key} auto / measured capacity, |1 - ratio|",
                        where,
                        None if r is None else abs(1 - r),
                        AUTO_WITHIN,
                        True,
                    )
                )
    return out


def table(checks: list[dict]) -> str:
    """The checks as lines for the terminal."""

    def fmt(v: float | None) -> str:
        return "-" if v is None else f"{v:.3g}"

    def line(c: dict) -> str:
        mark = "ok  " if c["ok"] else "MISS"
        return f"{mark} {c['where']:32} {c['target']:48} {fmt(c['value']):>9} (bound {c['bound']:g})"

    return "\n".join(line(c) for c in checks)
