//! Load scaling: turning `--load RHO --uplink RATE`, `--rate R` or `--speed X`
//! into one time-compression factor for the trace's interarrival times (the
//! papers' method: scale interarrivals, keep sizes), and parsing link rates.

/// Totals of a trace, from one streaming pass.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct TraceTotals {
    pub requests: u64,
    pub bytes: u128,
    pub first_time_s: f64,
    pub last_time_s: f64,
}

impl TraceTotals {
    pub fn span_s(&self) -> f64 {
        self.last_time_s - self.first_time_s
    }
    /// Requested bits per second of the trace at its own timestamps.
    pub fn bits_per_s(&self) -> Option<f64> {
        (self.span_s() > 0.0).then(|| self.bytes as f64 * 8.0 / self.span_s())
    }
    /// Requests per second at its own timestamps (n − 1 gaps over the span).
    pub fn req_per_s(&self) -> Option<f64> {
        (self.span_s() > 0.0 && self.requests > 1).then(|| (self.requests - 1) as f64 / self.span_s())
    }
}

/// How to scale the trace's timestamps.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scaling {
    /// Replay at the trace's own timestamps.
    AsIs,
    /// Play X times faster.
    Speed(f64),
    /// Mean request rate of the replay.
    Rate { req_per_s: f64 },
    /// Requested bits/s = rho × uplink rate.
    Load { rho: f64, uplink_bits_per_s: f64 },
}

impl Scaling {
    /// Whether [`speed`](Self::speed) needs the trace's totals (a first pass).
    pub fn needs_totals(&self) -> bool {
        matches!(self, Scaling::Rate { .. } | Scaling::Load { .. })
    }

    /// The speed-up factor: replay time = trace time / speed.
    pub fn speed(&self, totals: Option<&TraceTotals>) -> Result<f64, String> {
        let need = || totals.ok_or_else(|| "scaling needs the trace totals".to_string());
        let s = match *self {
            Scaling::AsIs => 1.0,
            Scaling::Speed(x) => x,
            Scaling::Rate { req_per_s } => {
                let r = need()?
                    .req_per_s()
                    .ok_or("the trace spans no time (or has one request); cannot scale it to a rate")?;
                req_per_s / r
            }
            Scaling::Load { rho, uplink_bits_per_s } => {
                let b = need()?.bits_per_s().ok_or("the trace spans no time; cannot scale it to a load")?;
                if b == 0.0 {
                    return Err("the trace requests no bytes; cannot scale it to a load".into());
                }
                rho * uplink_bits_per_s / b
            }
        };
        if !(s.is_finite() && s > 0.0) {
            return Err(format!("scaling gives a speed factor of {s}; need a positive finite number"));
        }
        Ok(s)
    }
}

/// Offered load: requested bits per second over the uplink rate.
pub fn offered_load(bytes: u128, span_s: f64, uplink_bits_per_s: f64) -> Option<f64> {
    (span_s > 0.0 && uplink_bits_per_s > 0.0).then(|| bytes as f64 * 8.0 / span_s / uplink_bits_per_s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn totals() -> TraceTotals {
        // 1001 requests of 5,000 B on average over 100 s: 10 req/s, 400 kbit/s.
        TraceTotals { requests: 1001, bytes: 5_005_000, first_time_s: 50.0, last_time_s: 150.0 }
    }

    #[test]
    fn scaling_table() {
        let t = totals();
        assert_eq!(t.bits_per_s(), Some(400_400.0));
        assert_eq!(t.req_per_s(), Some(10.0));
        let cases = [
            (Scaling::AsIs, 1.0),
            (Scaling::Speed(2.5), 2.5),
            (Scaling::Rate { req_per_s: 20_000.0 }, 2000.0),
            // 0.8 × 10 Mbit/s = 8 Mbit/s requested from a 400.4 kbit/s trace.
            (Scaling::Load { rho: 0.8, uplink_bits_per_s: 10e6 }, 8e6 / 400_400.0),
        ];
        for (s, want) in cases {
            let got = s.speed(Some(&t)).unwrap();
            assert!((got - want).abs() < 1e-9 * want, "{s:?}: {got} vs {want}");
        }
        // After scaling, the requested rate is what was asked for.
        let speed = Scaling::Load { rho: 0.8, uplink_bits_per_s: 10e6 }.speed(Some(&t)).unwrap();
        let load = offered_load(t.bytes, t.span_s() / speed, 10e6).unwrap();
        assert!((load - 0.8).abs() < 1e-12);
    }

    #[test]
    fn scaling_errors() {
        let flat = TraceTotals { requests: 3, bytes: 10, first_time_s: 1.0, last_time_s: 1.0 };
        assert!(Scaling::Rate { req_per_s: 1.0 }.speed(Some(&flat)).unwrap_err().contains("spans no time"));
        assert!(Scaling::Load { rho: 0.5, uplink_bits_per_s: 1e6 }.speed(Some(&flat)).is_err());
        assert!(Scaling::Speed(0.0).speed(None).is_err());
        assert!(Scaling::Rate { req_per_s: 1.0 }.speed(None).is_err());
    }
}
