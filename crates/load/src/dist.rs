//! Probability distributions for workloads: request sizes (`wc98like`,
//! `surge`, `bpareto`, `exp`, `fixed`) and times (think times, `exp:MEAN`).
//!
//! Every distribution has a closed-form CDF and quantile, so sampling is by
//! inverse transform from a seeded RNG (same seed, same sizes on every
//! machine), and tests can compare samples against the exact CDF with a
//! Kolmogorov–Smirnov statistic ([`ks_statistic`]).

use rand::Rng;

/// Standard normal CDF Φ(z), via erfc (W. J. Cody's rational approximation
/// through `libm`-free code: relative error < 1.2e-7, enough for workloads).
pub fn norm_cdf(z: f64) -> f64 {
    0.5 * erfc(-z / std::f64::consts::SQRT_2)
}

/// Complementary error function (Numerical Recipes `erfcc`, |ε| < 1.2e-7).
fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let r = t
        * (-z * z - 1.265_512_23
            + t * (1.000_023_68
                + t * (0.374_091_96
                    + t * (0.096_784_18
                        + t * (-0.186_288_06
                            + t * (0.278_868_07
                                + t * (-1.135_203_98
                                    + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77)))))))))
            .exp();
    if x >= 0.0 {
        r
    } else {
        2.0 - r
    }
}

/// Standard normal quantile Φ⁻¹(p) (P. J. Acklam's approximation, refined by
/// one Halley step against [`norm_cdf`]).
pub fn norm_ppf(p: f64) -> f64 {
    assert!(p > 0.0 && p < 1.0, "norm_ppf({p}) outside (0, 1)");
    const A: [f64; 6] = [
        -3.969_683_028_665_376e1,
        2.209_460_984_245_205e2,
        -2.759_285_104_469_687e2,
        1.383_577_518_672_69e2,
        -3.066_479_806_614_716e1,
        2.506_628_277_459_239,
    ];
    const B: [f64; 5] = [
        -5.447_609_879_822_406e1,
        1.615_858_368_580_409e2,
        -1.556_989_798_598_866e2,
        6.680_131_188_771_972e1,
        -1.328_068_155_288_572e1,
    ];
    const C: [f64; 6] = [
        -7.784_894_002_430_293e-3,
        -3.223_964_580_411_365e-1,
        -2.400_758_277_161_838,
        -2.549_732_539_343_734,
        4.374_664_141_464_968,
        2.938_163_982_698_783,
    ];
    const D: [f64; 4] =
        [7.784_695_709_041_462e-3, 3.224_671_290_700_398e-1, 2.445_134_137_142_996, 3.754_408_661_907_416];
    let plow = 0.02425;
    let x = if p < plow {
        let q = (-2.0 * p.ln()).sqrt();
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    } else if p <= 1.0 - plow {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    } else {
        let q = (-2.0 * (1.0 - p).ln()).sqrt();
        -(((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    };
    // One Halley refinement step.
    let e = norm_cdf(x) - p;
    let u = e * (2.0 * std::f64::consts::PI).sqrt() * (x * x / 2.0).exp();
    x - u / (1.0 + x * u / 2.0)
}

/// A lognormal body below `cut` joined to a bounded-Pareto tail above it, the
/// shape of web file sizes (Crovella's "empirical model", Surge). The body is
/// the lognormal density itself (not renormalised), the tail carries the rest
/// of the mass, `1 − Φ((ln cut − μ)/σ)`, shaped as a Pareto of index `alpha`
/// bounded by `max`. Values below `min` are raised to `min` (an atom at `min`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hybrid {
    pub mu: f64,
    pub sigma: f64,
    pub cut: f64,
    pub alpha: f64,
    pub min: f64,
    pub max: f64,
}

impl Hybrid {
    fn body_mass(&self) -> f64 {
        norm_cdf((self.cut.ln() - self.mu) / self.sigma)
    }

    fn cdf(&self, x: f64) -> f64 {
        if x < self.min {
            return 0.0;
        }
        if x >= self.max {
            return 1.0;
        }
        if x < self.cut {
            return norm_cdf((x.ln() - self.mu) / self.sigma);
        }
        let fb = self.body_mass();
        let a = self.alpha;
        fb + (1.0 - fb) * (self.cut.powf(-a) - x.powf(-a)) / (self.cut.powf(-a) - self.max.powf(-a))
    }

    /// Exact mean: lognormal partial means for the body (with the mass
    /// below `min` moved to `min`) plus the bounded-Pareto tail.
    fn mean(&self) -> f64 {
        let (mu, s) = (self.mu, self.sigma);
        let partial = |a: f64| (mu + s * s / 2.0).exp() * norm_cdf((a.ln() - mu - s * s) / s);
        let body = partial(self.cut) - partial(self.min) + self.min * norm_cdf((self.min.ln() - mu) / s);
        let (c, h, a) = (self.cut, self.max, self.alpha);
        let tail_mean = if (a - 1.0).abs() < 1e-12 {
            c * h / (h - c) * (h / c).ln()
        } else {
            a * c.powf(a) / (1.0 - (c / h).powf(a)) * (c.powf(1.0 - a) - h.powf(1.0 - a)) / (a - 1.0)
        };
        body + (1.0 - self.body_mass()) * tail_mean
    }

    fn quantile(&self, u: f64) -> f64 {
        let fb = self.body_mass();
        if u < fb {
            (self.mu + self.sigma * norm_ppf(u.max(f64::MIN_POSITIVE))).exp().max(self.min)
        } else {
            let v = (u - fb) / (1.0 - fb);
            let a = self.alpha;
            let lo = self.cut.powf(-a);
            let hi = self.max.powf(-a);
            (lo - v * (lo - hi)).powf(-1.0 / a).min(self.max)
        }
    }
}

/// The `wc98like` size model: fitted to the World Cup 1998 statistics quoted in
/// Harchol-Balter et al. 2003 (min 41 B, max ≈ 2 MB, mean ≈ 5 KB, median
/// < 1 KB, 90% < 9.3 KB, tail index 1.2, largest 3% of requests > 50% of
/// bytes). Parameters from a grid fit of those targets (μ, σ, cut); the model
/// gives median ≈ 700 B, p90 ≈ 9.1 KB, mean ≈ 5.3 KB, 4.7% of requests in the
/// tail and ≈ 56% of bytes in the largest 3% of requests.
pub const WC98LIKE: Hybrid = Hybrid { mu: 6.55, sigma: 2.0, cut: 20_000.0, alpha: 1.2, min: 41.0, max: 2_000_000.0 };

/// Surge / Crovella et al. 1999 Table 1: lognormal μ = 7.630, σ = 1.001 below
/// 9,020 B, bounded Pareto α = 1.0 (k = 631.44) above, up to `max` (the paper's
/// p = 10¹⁰; capped for real docroots).
pub fn surge(max_bytes: f64) -> Hybrid {
    Hybrid { mu: 7.630, sigma: 1.001, cut: 9_020.0, alpha: 1.0, min: 1.0, max: max_bytes }
}

/// Default cap of the Surge tail for real docroots (the paper's 10¹⁰ B cannot
/// be served from a test machine).
pub const SURGE_DEFAULT_MAX_BYTES: f64 = 10_000_000.0;

/// A request-size distribution.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SizeDist {
    Hybrid(Hybrid),
    /// Bounded Pareto with index `alpha` on `[min, max]`.
    BPareto {
        alpha: f64,
        min: f64,
        max: f64,
    },
    /// Exponential with the given mean (sizes rounded up to ≥ 1 byte).
    Exp {
        mean: f64,
    },
    /// Every request the same size (benchmarks).
    Fixed {
        bytes: f64,
    },
}

/// A distribution spec could not be parsed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("bad distribution `{spec}`: {message}")]
pub struct DistError {
    pub spec: String,
    pub message: String,
}

fn derr(spec: &str, message: impl Into<String>) -> DistError {
    DistError { spec: spec.to_string(), message: message.into() }
}

fn parse_num(spec: &str, what: &str, v: &str) -> Result<f64, DistError> {
    let x: f64 = v.trim().parse().map_err(|_| derr(spec, format!("{what}: expected a number, found `{v}`")))?;
    if !x.is_finite() {
        return Err(derr(spec, format!("{what}: must be finite")));
    }
    Ok(x)
}

/// A byte count of a size distribution's parameters: a number (`1500`, `1e6`) or a size
/// with a unit as everywhere else on the command line (`100K`, `2M`, `64KiB`).
fn parse_bytes_arg(spec: &str, what: &str, v: &str) -> Result<f64, DistError> {
    parse_num(spec, what, v).or_else(|_| {
        shortfirst_core::units::parse_size_bytes(v).map(|b| b as f64).map_err(|_| {
            derr(spec, format!("{what}: expected a byte count (`1500`, `1e6`) or a size (`100K`, `2M`), found `{v}`"))
        })
    })
}

impl SizeDist {
    /// Parses `wc98like`, `surge` (with the given cap), `bpareto:ALPHA,MIN,MAX`,
    /// `exp:MEAN`, `fixed:BYTES`; MIN, MAX, MEAN and BYTES take sizes with units too.
    pub fn parse(spec: &str, surge_max_bytes: Option<f64>) -> Result<SizeDist, DistError> {
        let (name, args) = spec.split_once(':').unwrap_or((spec, ""));
        let nums = || -> Result<Vec<f64>, DistError> {
            let mut v: Vec<&str> = args.split(',').filter(|s| !s.is_empty()).collect();
            // bpareto's first argument is its shape, not bytes.
            let shape =
                if name == "bpareto" && !v.is_empty() { Some(parse_num(spec, name, v.remove(0))?) } else { None };
            let bytes = v.into_iter().map(|a| parse_bytes_arg(spec, name, a));
            shape.into_iter().map(Ok).chain(bytes).collect()
        };
        let d = match name {
            "wc98like" if args.is_empty() => SizeDist::Hybrid(WC98LIKE),
            "surge" if args.is_empty() => SizeDist::Hybrid(surge(surge_max_bytes.unwrap_or(SURGE_DEFAULT_MAX_BYTES))),
            "bpareto" => match nums()?[..] {
                [alpha, min, max] => SizeDist::BPareto { alpha, min, max },
                _ => return Err(derr(spec, "expected bpareto:ALPHA,MIN,MAX")),
            },
            "exp" => match nums()?[..] {
                [mean] => SizeDist::Exp { mean },
                _ => return Err(derr(spec, "expected exp:MEAN")),
            },
            "fixed" => match nums()?[..] {
                [bytes] => SizeDist::Fixed { bytes },
                _ => return Err(derr(spec, "expected fixed:BYTES")),
            },
            _ => return Err(derr(spec, "expected wc98like, surge, bpareto:ALPHA,MIN,MAX, exp:MEAN or fixed:BYTES")),
        };
        d.validate().map_err(|m| derr(spec, m))?;
        Ok(d)
    }

    fn validate(&self) -> Result<(), String> {
        match *self {
            SizeDist::Hybrid(h) => {
                if !(h.max > h.cut && h.cut > h.min && h.min >= 1.0) {
                    return Err(format!("need 1 ≤ min < cut < max (max = {})", h.max));
                }
            }
            SizeDist::BPareto { alpha, min, max } => {
                if alpha <= 0.0 {
                    return Err("ALPHA must be > 0".into());
                }
                if !(min >= 1.0 && max > min) {
                    return Err("need 1 ≤ MIN < MAX".into());
                }
            }
            SizeDist::Exp { mean } => {
                if mean < 1.0 {
                    return Err("MEAN must be ≥ 1 byte".into());
                }
            }
            SizeDist::Fixed { bytes } => {
                if bytes < 0.0 || bytes.fract() != 0.0 {
                    return Err("BYTES must be a whole number ≥ 0".into());
                }
            }
        }
        Ok(())
    }

    /// P(X ≤ x) of the continuous model.
    pub fn cdf(&self, x: f64) -> f64 {
        match *self {
            SizeDist::Hybrid(h) => h.cdf(x),
            SizeDist::BPareto { alpha, min, max } => {
                if x < min {
                    0.0
                } else if x >= max {
                    1.0
                } else {
                    (1.0 - (min / x).powf(alpha)) / (1.0 - (min / max).powf(alpha))
                }
            }
            SizeDist::Exp { mean } => {
                if x <= 0.0 {
                    0.0
                } else {
                    1.0 - (-x / mean).exp()
                }
            }
            SizeDist::Fixed { bytes } => {
                if x < bytes {
                    0.0
                } else {
                    1.0
                }
            }
        }
    }

    /// Mean of the continuous model (bytes).
    pub fn mean(&self) -> f64 {
        match *self {
            SizeDist::Hybrid(h) => h.mean(),
            SizeDist::BPareto { alpha, min, max } => {
                let r = (min / max).powf(alpha);
                if (alpha - 1.0).abs() < 1e-12 {
                    min * max / (max - min) * (max / min).ln()
                } else {
                    alpha * min.powf(alpha) / (1.0 - r) * (min.powf(1.0 - alpha) - max.powf(1.0 - alpha))
                        / (alpha - 1.0)
                }
            }
            SizeDist::Exp { mean } => mean,
            SizeDist::Fixed { bytes } => bytes,
        }
    }

    /// Inverse CDF for u in [0, 1).
    pub fn quantile(&self, u: f64) -> f64 {
        match *self {
            SizeDist::Hybrid(h) => h.quantile(u),
            SizeDist::BPareto { alpha, min, max } => {
                let r = (min / max).powf(alpha);
                min * (1.0 - u * (1.0 - r)).powf(-1.0 / alpha)
            }
            SizeDist::Exp { mean } => -mean * (1.0 - u).ln(),
            SizeDist::Fixed { bytes } => bytes,
        }
    }

    /// The size in whole bytes at quantile u (what a file of this size holds).
    pub fn quantile_bytes(&self, u: f64) -> u64 {
        let x = self.quantile(u.clamp(0.0, 1.0 - f64::EPSILON));
        match self {
            SizeDist::Fixed { bytes } => *bytes as u64,
            SizeDist::Exp { .. } => x.ceil().max(1.0) as u64,
            _ => x.round().max(1.0) as u64,
        }
    }

    /// One size in whole bytes.
    pub fn sample_bytes<R: Rng + ?Sized>(&self, rng: &mut R) -> u64 {
        self.quantile_bytes(rng.gen::<f64>())
    }

    /// Largest size this distribution can produce (bytes).
    pub fn max_bytes(&self) -> u64 {
        self.quantile_bytes(1.0)
    }
}

/// A distribution of times in seconds (think times, session lengths):
/// `NUM` or `exp:MEAN` (exponential), `exp:MEAN:MAX` (exponential truncated
/// at MAX by resampling, TPC-W's `exp:7:70`), `const:S`, `uniform:A:B`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum TimeDist {
    Const(f64),
    Exp { mean_s: f64, max_s: Option<f64> },
    Uniform { lo_s: f64, hi_s: f64 },
}

impl TimeDist {
    pub fn parse(spec: &str) -> Result<TimeDist, DistError> {
        if let Ok(v) = spec.trim().parse::<f64>() {
            if v < 0.0 || !v.is_finite() {
                return Err(derr(spec, "must be a finite number ≥ 0"));
            }
            return Ok(if v == 0.0 { TimeDist::Const(0.0) } else { TimeDist::Exp { mean_s: v, max_s: None } });
        }
        let mut parts = spec.split(':');
        let name = parts.next().unwrap_or("");
        let nums: Vec<f64> = parts.map(|v| parse_num(spec, name, v)).collect::<Result<_, _>>()?;
        let d = match (name, &nums[..]) {
            ("const", [s]) => TimeDist::Const(*s),
            ("exp", [m]) => TimeDist::Exp { mean_s: *m, max_s: None },
            ("exp", [m, x]) => TimeDist::Exp { mean_s: *m, max_s: Some(*x) },
            ("uniform", [a, b]) => TimeDist::Uniform { lo_s: *a, hi_s: *b },
            _ => return Err(derr(spec, "expected SECONDS, exp:MEAN, exp:MEAN:MAX, const:S or uniform:A:B")),
        };
        let ok = match d {
            TimeDist::Const(s) => s >= 0.0,
            TimeDist::Exp { mean_s, max_s } => mean_s > 0.0 && max_s.map_or(true, |m| m > 0.0),
            TimeDist::Uniform { lo_s, hi_s } => lo_s >= 0.0 && hi_s >= lo_s,
        };
        if !ok {
            return Err(derr(spec, "times must be ≥ 0 (means and maxima > 0, A ≤ B)"));
        }
        Ok(d)
    }

    /// One time in seconds.
    pub fn sample_s<R: Rng + ?Sized>(&self, rng: &mut R) -> f64 {
        match *self {
            TimeDist::Const(s) => s,
            TimeDist::Exp { mean_s, max_s } => {
                // Resampling keeps the shape below the cap; at most 64 tries
                // (the cap is ≥ a few means in practice), then the cap itself.
                for _ in 0..64 {
                    let x = -mean_s * (1.0 - rng.gen::<f64>()).ln();
                    if max_s.map_or(true, |m| x <= m) {
                        return x;
                    }
                }
                max_s.unwrap_or(mean_s)
            }
            TimeDist::Uniform { lo_s, hi_s } => lo_s + (hi_s - lo_s) * rng.gen::<f64>(),
        }
    }
}

/// Kolmogorov–Smirnov statistic D = sup |F_n(x) − F(x)| of a sample against a
/// CDF. Sorts `sample` in place.
pub fn ks_statistic(sample: &mut [f64], cdf: impl Fn(f64) -> f64) -> f64 {
    sample.sort_by(|a, b| a.total_cmp(b));
    let n = sample.len() as f64;
    let mut d: f64 = 0.0;
    let mut i = 0;
    while i < sample.len() {
        // Ties: the empirical CDF jumps over all equal values at once.
        let mut j = i;
        while j + 1 < sample.len() && sample[j + 1] == sample[i] {
            j += 1;
        }
        // F just below the value (differs from F at an atom, e.g. the
        // wc98like minimum) for the step's lower side.
        let x = sample[i];
        let f_left = cdf(x - 1e-9 * x.abs().max(1.0));
        let f = cdf(x);
        d = d.max((f_left - i as f64 / n).abs()).max(((j + 1) as f64 / n - f).abs());
        i = j + 1;
    }
    d
}

/// Critical value of D at significance 0.01 for large n (1.628 / √n).
pub fn ks_critical_001(n: usize) -> f64 {
    1.628 / (n as f64).sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    #[test]
    fn normal_functions() {
        assert!((norm_cdf(0.0) - 0.5).abs() < 1e-7);
        assert!((norm_cdf(1.96) - 0.975_002_1).abs() < 1e-6);
        for p in [1e-6, 0.01, 0.3, 0.5, 0.9, 0.999] {
            assert!((norm_cdf(norm_ppf(p)) - p).abs() < 1e-7 * p.max(1e-2), "{p}");
        }
    }

    #[test]
    fn parse_specs() {
        assert_eq!(
            SizeDist::parse("bpareto:1.1,100,1e6", None).unwrap(),
            SizeDist::BPareto { alpha: 1.1, min: 100.0, max: 1e6 }
        );
        assert_eq!(SizeDist::parse("exp:5000", None).unwrap(), SizeDist::Exp { mean: 5000.0 });
        assert!(matches!(SizeDist::parse("surge", Some(1e6)).unwrap(), SizeDist::Hybrid(h) if h.max == 1e6));
        // Sizes take units as everywhere else; the shape does not.
        assert_eq!(
            SizeDist::parse("bpareto:1.1,100K,2M", None).unwrap(),
            SizeDist::parse("bpareto:1.1,1e5,2e6", None).unwrap()
        );
        assert_eq!(SizeDist::parse("fixed:1KiB", None).unwrap(), SizeDist::Fixed { bytes: 1024.0 });
        assert_eq!(SizeDist::parse("exp:10K", None).unwrap(), SizeDist::Exp { mean: 10_000.0 });
        let e = SizeDist::parse("bpareto:1.1,100Q,1M", None).unwrap_err().to_string();
        assert!(e.contains("`100Q`") && e.contains("100K"), "{e}");
        assert!(SizeDist::parse("bpareto:1K,100,1M", None).is_err(), "a shape with a unit");
        for bad in ["bpareto:1,2", "bpareto:0,1,10", "exp:x", "zipf", "bpareto:1,10,5", "wc98like:3"] {
            let e = SizeDist::parse(bad, None).unwrap_err();
            assert!(e.to_string().contains(bad), "{e}");
        }
        assert_eq!(TimeDist::parse("exp:7:70").unwrap(), TimeDist::Exp { mean_s: 7.0, max_s: Some(70.0) });
        assert_eq!(TimeDist::parse("0").unwrap(), TimeDist::Const(0.0));
        assert_eq!(TimeDist::parse("2.5").unwrap(), TimeDist::Exp { mean_s: 2.5, max_s: None });
        assert!(TimeDist::parse("uniform:3:1").is_err());
        assert!(TimeDist::parse("gamma:1").is_err());
    }

    /// Each size distribution, sampled with a fixed seed, passes a KS test
    /// against its own CDF at the 1% level, and the test would catch a wrong
    /// parameter (a neighbouring distribution fails it).
    #[test]
    fn sizes_match_their_cdf_ks() {
        let n = 20_000;
        let cases = [
            ("wc98like", "bpareto:1.2,41,2e6"),
            ("surge", "exp:11000"),
            ("bpareto:1.1,1000,1e7", "bpareto:1.3,1000,1e7"),
            ("exp:5000", "exp:5300"),
        ];
        for (spec, wrong) in cases {
            let d = SizeDist::parse(spec, None).unwrap();
            let other = SizeDist::parse(wrong, None).unwrap();
            let mut rng = ChaCha8Rng::seed_from_u64(42);
            let mut xs: Vec<f64> = (0..n).map(|_| d.sample_bytes(&mut rng) as f64).collect();
            let ks = ks_statistic(&mut xs, |x| d.cdf(x));
            assert!(ks < ks_critical_001(n), "{spec}: D = {ks}");
            let ks_wrong = ks_statistic(&mut xs, |x| other.cdf(x));
            assert!(ks_wrong > ks_critical_001(n), "{spec} vs {wrong}: D = {ks_wrong}");
        }
    }

    #[test]
    fn means_match_paper_and_quantiles() {
        // Crovella et al.: mean 11,108 B with p = 1e10.
        let d = SizeDist::Hybrid(surge(1e10));
        assert!((d.mean() - 11_108.0).abs() / 11_108.0 < 0.005, "{}", d.mean());
        // Analytic means agree with integrating the quantile function.
        for spec in ["wc98like", "surge", "bpareto:1.1,100,1e6", "bpareto:1,100,1e6", "exp:700"] {
            let d = SizeDist::parse(spec, Some(1e6)).unwrap();
            let n = 1_000_000;
            let m: f64 = (0..n).map(|i| d.quantile((i as f64 + 0.5) / n as f64)).sum::<f64>() / n as f64;
            assert!((m / d.mean() - 1.0).abs() < 0.01, "{spec}: {m} vs {}", d.mean());
        }
        // Tail mass is ≈ k / cut = 631.44 / 9020 = 7.0%.
        assert!((1.0 - d.cdf(9_019.999) - 0.07).abs() < 0.002);
    }

    #[test]
    fn think_time_cap() {
        let d = TimeDist::parse("exp:7:70").unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let xs: Vec<f64> = (0..50_000).map(|_| d.sample_s(&mut rng)).collect();
        assert!(xs.iter().all(|&x| (0.0..=70.0).contains(&x)));
        let mean = xs.iter().sum::<f64>() / xs.len() as f64;
        assert!((mean - 7.0).abs() < 0.15, "{mean}");
    }
}
