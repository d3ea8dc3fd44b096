//! Request-size statistics of a trace (`shortfirst workload stats`), to check a
//! workload against its target (brief §2.1).
//!
//! Sizes are counted in a map from size to count, so memory grows with the
//! number of *distinct* sizes (about the number of files), not with the
//! number of requests; [`MAX_DISTINCT_SIZES`] bounds it.

use std::collections::BTreeMap;

/// Share of the largest requests used by the Hill estimator of the tail index.
pub const HILL_TAIL_FRACTION: f64 = 0.02;
/// Share of the largest requests whose byte share is reported (the papers'
/// "largest 3% of requests carry > 50% of the bytes").
pub const TOP_FRACTION: f64 = 0.03;
/// Limit on distinct sizes held; beyond it [`SizeStats::add`] fails.
pub const MAX_DISTINCT_SIZES: usize = 20_000_000;

/// Accumulates sizes and times of a trace.
#[derive(Debug, Default, Clone)]
pub struct SizeStats {
    counts: BTreeMap<u64, u64>,
    n: u64,
    sum_bytes: u128,
    first_time_s: Option<f64>,
    last_time_s: f64,
}

/// The statistics.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Report {
    pub requests: u64,
    pub min_bytes: u64,
    pub max_bytes: u64,
    pub mean_bytes: f64,
    pub median_bytes: u64,
    pub p90_bytes: u64,
    pub p99_bytes: u64,
    /// Hill estimate of the Pareto tail index from the largest
    /// [`HILL_TAIL_FRACTION`] of requests (None if too few distinct values).
    pub tail_alpha_hill: Option<f64>,
    /// Share of all bytes carried by the largest [`TOP_FRACTION`] of requests.
    pub top3pct_bytes_share: f64,
    pub total_bytes: u128,
    /// Last minus first arrival time.
    pub span_s: f64,
    pub mean_rate_req_per_s: Option<f64>,
    pub mean_rate_bits_per_s: Option<f64>,
}

impl SizeStats {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one request. Errors when the number of distinct sizes exceeds
    /// [`MAX_DISTINCT_SIZES`].
    pub fn add(&mut self, size_bytes: u64, time_s: f64) -> Result<(), String> {
        if self.counts.len() >= MAX_DISTINCT_SIZES && !self.counts.contains_key(&size_bytes) {
            return Err(format!("more than {MAX_DISTINCT_SIZES} distinct sizes; refusing to hold more in memory"));
        }
        *self.counts.entry(size_bytes).or_insert(0) += 1;
        self.n += 1;
        self.sum_bytes += u128::from(size_bytes);
        if self.first_time_s.is_none() {
            self.first_time_s = Some(time_s);
        }
        self.last_time_s = time_s;
        Ok(())
    }

    /// The size at 0-based rank `k` in ascending order.
    fn at_rank(&self, k: u64) -> u64 {
        let mut seen = 0;
        for (&s, &c) in &self.counts {
            seen += c;
            if seen > k {
                return s;
            }
        }
        *self.counts.keys().next_back().unwrap_or(&0)
    }

    fn quantile(&self, q: f64) -> u64 {
        let k = ((q * self.n as f64).ceil() as u64).saturating_sub(1).min(self.n.saturating_sub(1));
        self.at_rank(k)
    }

    /// Iterates the largest `k` sizes (descending).
    fn top(&self, k: u64) -> impl Iterator<Item = u64> + '_ {
        self.counts.iter().rev().flat_map(|(&s, &c)| std::iter::repeat(s).take(c as usize)).take(k as usize)
    }

    /// Hill estimator α̂ = k / Σ_{i<k} ln(X_(i) / X_(k)) over the k largest.
    fn hill(&self) -> Option<f64> {
        let k = ((self.n as f64 * HILL_TAIL_FRACTION) as u64).max(10);
        if k + 1 > self.n {
            return None;
        }
        let xk = self.top(k + 1).last()? as f64;
        if xk <= 0.0 {
            return None;
        }
        let s: f64 = self.top(k).map(|x| (x as f64 / xk).ln()).sum();
        (s > 0.0).then(|| k as f64 / s)
    }

    pub fn report(&self) -> Option<Report> {
        if self.n == 0 {
            return None;
        }
        let top_k = ((self.n as f64 * TOP_FRACTION).round() as u64).max(1);
        let top_bytes: u128 = self.top(top_k).map(u128::from).sum();
        let span_s = self.last_time_s - self.first_time_s.unwrap_or(0.0);
        let rate = (span_s > 0.0).then(|| (self.n - 1) as f64 / span_s);
        Some(Report {
            requests: self.n,
            min_bytes: *self.counts.keys().next().unwrap_or(&0),
            max_bytes: *self.counts.keys().next_back().unwrap_or(&0),
            mean_bytes: self.sum_bytes as f64 / self.n as f64,
            median_bytes: self.quantile(0.5),
            p90_bytes: self.quantile(0.9),
            p99_bytes: self.quantile(0.99),
            tail_alpha_hill: self.hill(),
            top3pct_bytes_share: if self.sum_bytes == 0 { 0.0 } else { top_bytes as f64 / self.sum_bytes as f64 },
            total_bytes: self.sum_bytes,
            span_s,
            mean_rate_req_per_s: rate,
            mean_rate_bits_per_s: (span_s > 0.0).then(|| self.sum_bytes as f64 * 8.0 / span_s),
        })
    }
}

impl Report {
    /// Pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("report serialises")
    }

    /// Human-readable, one statistic per line.
    pub fn to_text(&self) -> String {
        let opt = |v: Option<f64>, digits: usize| match v {
            Some(x) => format!("{x:.digits$}"),
            None => "-".to_string(),
        };
        format!(
            "requests           {}\n\
             min_bytes          {}\n\
             max_bytes          {}\n\
             mean_bytes         {:.1}\n\
             median_bytes       {}\n\
             p90_bytes          {}\n\
             p99_bytes          {}\n\
             tail_alpha_hill    {}   (largest {}% of requests)\n\
             top3pct_bytes      {:.1}%   (share of bytes in the largest 3% of requests)\n\
             total_bytes        {}\n\
             span_s             {:.3}\n\
             rate_req_per_s     {}\n\
             rate_bits_per_s    {}\n",
            self.requests,
            self.min_bytes,
            self.max_bytes,
            self.mean_bytes,
            self.median_bytes,
            self.p90_bytes,
            self.p99_bytes,
            opt(self.tail_alpha_hill, 3),
            HILL_TAIL_FRACTION * 100.0,
            self.top3pct_bytes_share * 100.0,
            self.total_bytes,
            self.span_s,
            opt(self.mean_rate_req_per_s, 1),
            opt(self.mean_rate_bits_per_s, 0),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dist::SizeDist;
    use rand::SeedableRng;

    #[test]
    fn small_exact() {
        let mut s = SizeStats::new();
        for (i, x) in [5u64, 1, 3, 2, 4, 100, 6, 7, 8, 9].iter().enumerate() {
            s.add(*x, i as f64 * 0.5).unwrap();
        }
        let r = s.report().unwrap();
        assert_eq!(r.requests, 10);
        assert_eq!(r.min_bytes, 1);
        assert_eq!(r.max_bytes, 100);
        assert_eq!(r.median_bytes, 5);
        assert_eq!(r.p90_bytes, 9);
        assert_eq!(r.mean_bytes, 14.5);
        assert_eq!(r.top3pct_bytes_share, 100.0 / 145.0);
        assert_eq!(r.span_s, 4.5);
        assert_eq!(r.mean_rate_req_per_s, Some(2.0));
        assert!(SizeStats::new().report().is_none());
    }

    #[test]
    fn hill_recovers_pareto_index() {
        for alpha in [0.8, 1.2, 1.6] {
            let d = SizeDist::BPareto { alpha, min: 100.0, max: 1e12 };
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(9);
            let mut s = SizeStats::new();
            for _ in 0..200_000 {
                s.add(d.sample_bytes(&mut rng), 0.0).unwrap();
            }
            let a = s.report().unwrap().tail_alpha_hill.unwrap();
            assert!((a / alpha - 1.0).abs() < 0.1, "alpha {alpha}: {a}");
        }
    }
}
