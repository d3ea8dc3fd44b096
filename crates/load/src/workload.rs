//! Synthetic workloads: a set of files with sizes and popularity, and a stream
//! of timed requests for them (`shortfirst workload generate`, and the
//! simulator's inputs).
//!
//! Kinds:
//! - `wc98like`: sizes from [`crate::dist::WC98LIKE`], Zipf popularity
//!   (exponent 0.8), bursty arrivals (see [`Arrivals::Bursty`]).
//! - `surge`: Surge/Crovella sizes, Zipf popularity (exponent 1.0), Poisson.
//! - `bpareto:ALPHA,MIN,MAX`, `exp:MEAN`, `fixed:BYTES`: uniform popularity,
//!   Poisson arrivals — for theory checks and benchmarks.
//!
//! Sizes are laid out so that the *request*-weighted size distribution follows
//! the kind's model (the papers quote request statistics): the files, in a
//! seeded random order, take consecutive slices of [0, 1) as wide as their
//! popularity, and each file's size is the model's quantile at the middle of
//! its slice. Popularity and size are therefore independent, and with uniform
//! popularity the request sizes are an exact stratified sample of the model.
//!
//! Everything is driven by one seed: separate ChaCha streams for the layout,
//! the file choices and the arrival times, so the same seed gives the same
//! workload on every machine.

use crate::dist::{DistError, SizeDist};
use crate::trace::TraceRecord;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// How popular each file is.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Popularity {
    Uniform,
    /// Weight of the file of rank r (from 1) ∝ 1 / r^s.
    Zipf(f64),
}

/// How requests arrive.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Arrivals {
    /// Poisson process at the mean rate.
    Poisson,
    /// Two-state Markov-modulated Poisson process: `high` and `low` phases of
    /// exponential length (mean [`BURST_PHASE_MEAN_S`] each) at 1.6× and 0.4×
    /// the mean rate, so the long-run rate is the mean rate but arrivals come
    /// in bursts of seconds, as in the WC98 trace.
    Bursty,
}

/// Mean length of one phase of [`Arrivals::Bursty`].
pub const BURST_PHASE_MEAN_S: f64 = 5.0;
const BURST_HIGH: f64 = 1.6;
const BURST_LOW: f64 = 0.4;

/// Upper limit of `--files`: the file table (sizes, popularity) lives in
/// memory, 16 bytes per file.
pub const MAX_FILES: usize = 10_000_000;

/// What to generate.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkloadSpec {
    /// The kind as given (`wc98like`, `bpareto:1.1,100,1e6`, …).
    pub kind: String,
    pub sizes: SizeDist,
    pub popularity: Popularity,
    pub arrivals: Arrivals,
    pub files: usize,
    pub requests: u64,
    pub rate_per_s: f64,
    pub seed: u64,
}

/// A bad workload request.
#[derive(Debug, thiserror::Error)]
pub enum WorkloadError {
    #[error(transparent)]
    Dist(#[from] DistError),
    #[error("{0}")]
    Invalid(String),
}

impl WorkloadSpec {
    /// The spec for a kind, with its popularity and arrival models.
    pub fn new(
        kind: &str,
        surge_max_bytes: Option<f64>,
        files: usize,
        requests: u64,
        rate_per_s: f64,
        seed: u64,
    ) -> Result<Self, WorkloadError> {
        let sizes = SizeDist::parse(kind, surge_max_bytes)?;
        let (popularity, arrivals) = match kind.split(':').next().unwrap_or("") {
            "wc98like" => (Popularity::Zipf(0.8), Arrivals::Bursty),
            "surge" => (Popularity::Zipf(1.0), Arrivals::Poisson),
            _ => (Popularity::Uniform, Arrivals::Poisson),
        };
        if files == 0 || files > MAX_FILES {
            return Err(WorkloadError::Invalid(format!("--files must be between 1 and {MAX_FILES}, got {files}")));
        }
        if !(rate_per_s.is_finite() && rate_per_s > 0.0) {
            return Err(WorkloadError::Invalid(format!(
                "--rate must be a positive number of requests per second, got {rate_per_s}"
            )));
        }
        Ok(WorkloadSpec { kind: kind.to_string(), sizes, popularity, arrivals, files, requests, rate_per_s, seed })
    }
}

/// Independent random streams derived from one seed.
fn stream(seed: u64, stream: u64) -> ChaCha8Rng {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(stream);
    rng
}

/// The URL path of file `index`.
pub fn file_path(index: usize) -> String {
    format!("/f/{index:07}.bin")
}

/// The files of a workload, with their sizes and request probabilities.
#[derive(Debug, Clone)]
pub struct FileSet {
    sizes_bytes: Vec<u64>,
    /// Cumulative request probability by file index (last = 1).
    cdf: Vec<f64>,
}

impl FileSet {
    /// Lays out sizes and popularity (see the module doc).
    pub fn new(spec: &WorkloadSpec) -> Self {
        let n = spec.files;
        let weights: Vec<f64> = match spec.popularity {
            Popularity::Uniform => vec![1.0; n],
            Popularity::Zipf(s) => (1..=n).map(|r| (r as f64).powf(-s)).collect(),
        };
        let total: f64 = weights.iter().sum();
        let mut order: Vec<usize> = (0..n).collect();
        order.shuffle(&mut stream(spec.seed, 1));
        let mut sizes_bytes = vec![0u64; n];
        let mut acc = 0.0;
        for &i in &order {
            let w = weights[i] / total;
            sizes_bytes[i] = spec.sizes.quantile_bytes(acc + w / 2.0);
            acc += w;
        }
        let mut cdf = Vec::with_capacity(n);
        let mut c = 0.0;
        for w in &weights {
            c += w / total;
            cdf.push(c);
        }
        if let Some(last) = cdf.last_mut() {
            *last = 1.0;
        }
        FileSet { sizes_bytes, cdf }
    }

    pub fn len(&self) -> usize {
        self.sizes_bytes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sizes_bytes.is_empty()
    }

    pub fn size_bytes(&self, index: usize) -> u64 {
        self.sizes_bytes[index]
    }

    /// Sum of all file sizes.
    pub fn total_bytes(&self) -> u64 {
        self.sizes_bytes.iter().sum()
    }

    /// Request probability of file `index`.
    pub fn probability(&self, index: usize) -> f64 {
        self.cdf[index] - if index == 0 { 0.0 } else { self.cdf[index - 1] }
    }

    /// A file index drawn by popularity.
    pub fn pick<R: Rng + ?Sized>(&self, rng: &mut R) -> usize {
        let u: f64 = rng.gen();
        self.cdf.partition_point(|&c| c <= u).min(self.cdf.len() - 1)
    }
}

/// The request stream of a workload: `spec.requests` timed requests, first
/// at time 0. Streams; holds only the file table.
pub struct Requests<'a> {
    files: &'a FileSet,
    arrivals: Arrivals,
    rate_per_s: f64,
    remaining: u64,
    time_s: f64,
    pick_rng: ChaCha8Rng,
    time_rng: ChaCha8Rng,
    high_phase: bool,
    phase_left_s: f64,
    started: bool,
}

impl<'a> Requests<'a> {
    pub fn new(spec: &WorkloadSpec, files: &'a FileSet) -> Self {
        let mut time_rng = stream(spec.seed, 3);
        let high_phase = time_rng.gen_bool(0.5);
        let phase_left_s = exp_sample(&mut time_rng, BURST_PHASE_MEAN_S);
        Requests {
            files,
            arrivals: spec.arrivals,
            rate_per_s: spec.rate_per_s,
            remaining: spec.requests,
            time_s: 0.0,
            pick_rng: stream(spec.seed, 2),
            time_rng,
            high_phase,
            phase_left_s,
            started: false,
        }
    }

    fn next_gap_s(&mut self) -> f64 {
        match self.arrivals {
            Arrivals::Poisson => exp_sample(&mut self.time_rng, 1.0 / self.rate_per_s),
            Arrivals::Bursty => {
                // Memorylessness: draw a gap at the current phase's rate; if
                // the phase ends first, move to the other phase and redraw.
                let mut gap = 0.0;
                loop {
                    let rate = self.rate_per_s * if self.high_phase { BURST_HIGH } else { BURST_LOW };
                    let g = exp_sample(&mut self.time_rng, 1.0 / rate);
                    if g <= self.phase_left_s {
                        self.phase_left_s -= g;
                        return gap + g;
                    }
                    gap += self.phase_left_s;
                    self.high_phase = !self.high_phase;
                    self.phase_left_s = exp_sample(&mut self.time_rng, BURST_PHASE_MEAN_S);
                }
            }
        }
    }
}

fn exp_sample<R: Rng + ?Sized>(rng: &mut R, mean: f64) -> f64 {
    -mean * (1.0 - rng.gen::<f64>()).ln()
}

impl Iterator for Requests<'_> {
    type Item = TraceRecord;
    fn next(&mut self) -> Option<TraceRecord> {
        if self.remaining == 0 {
            return None;
        }
        self.remaining -= 1;
        if self.started {
            self.time_s += self.next_gap_s();
        }
        self.started = true;
        let i = self.files.pick(&mut self.pick_rng);
        Some(TraceRecord {
            time_s: self.time_s,
            path: file_path(i),
            size_bytes: self.files.size_bytes(i),
            client: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_workload() {
        let spec = WorkloadSpec::new("wc98like", None, 500, 2000, 100.0, 7).unwrap();
        let f1 = FileSet::new(&spec);
        let f2 = FileSet::new(&spec);
        let a: Vec<_> = Requests::new(&spec, &f1).collect();
        let b: Vec<_> = Requests::new(&spec, &f2).collect();
        assert_eq!(a, b);
        assert_eq!(a.len(), 2000);
        assert_eq!(a[0].time_s, 0.0);
        assert!(a.windows(2).all(|w| w[0].time_s <= w[1].time_s));
        let other = WorkloadSpec { seed: 8, ..spec.clone() };
        let c: Vec<_> = Requests::new(&other, &FileSet::new(&other)).collect();
        assert_ne!(a, c);
    }

    #[test]
    fn poisson_rate_and_zipf_popularity() {
        let spec = WorkloadSpec::new("surge", None, 1000, 100_000, 250.0, 3).unwrap();
        let files = FileSet::new(&spec);
        let reqs: Vec<_> = Requests::new(&spec, &files).collect();
        let span = reqs.last().unwrap().time_s;
        let rate = (reqs.len() - 1) as f64 / span;
        assert!((rate / 250.0 - 1.0).abs() < 0.02, "{rate}");
        // Rank-1 file gets 1/H_1000 ≈ 13.4% of requests.
        let top = reqs.iter().filter(|r| r.path == file_path(0)).count() as f64 / reqs.len() as f64;
        assert!((top - files.probability(0)).abs() < 0.005, "{top}");
        assert!((files.probability(0) - 1.0 / 7.485).abs() < 0.001);
    }

    #[test]
    fn bursty_arrivals_keep_mean_rate_and_are_burstier() {
        let spec = WorkloadSpec::new("wc98like", None, 100, 200_000, 400.0, 5).unwrap();
        let files = FileSet::new(&spec);
        let times: Vec<f64> = Requests::new(&spec, &files).map(|r| r.time_s).collect();
        let span = *times.last().unwrap();
        let rate = times.len() as f64 / span;
        assert!((rate / 400.0 - 1.0).abs() < 0.1, "{rate}");
        // Per-second counts: a Poisson process has variance ≈ mean; the
        // modulated one much more.
        let mut counts = vec![0f64; span as usize + 1];
        for t in &times {
            counts[*t as usize] += 1.0;
        }
        let m = counts.iter().sum::<f64>() / counts.len() as f64;
        let var = counts.iter().map(|c| (c - m) * (c - m)).sum::<f64>() / counts.len() as f64;
        assert!(var / m > 10.0, "index of dispersion {}", var / m);
    }

    #[test]
    fn uniform_popularity_is_a_stratified_sample() {
        let spec = WorkloadSpec::new("exp:1000", None, 1000, 1, 1.0, 1).unwrap();
        let files = FileSet::new(&spec);
        let mut sizes: Vec<u64> = (0..files.len()).map(|i| files.size_bytes(i)).collect();
        sizes.sort_unstable();
        let d = spec.sizes;
        for (k, s) in sizes.iter().enumerate() {
            assert_eq!(*s, d.quantile_bytes((k as f64 + 0.5) / 1000.0));
        }
    }

    #[test]
    fn rejects_bad_specs() {
        assert!(WorkloadSpec::new("wc98like", None, 0, 1, 1.0, 1).is_err());
        assert!(WorkloadSpec::new("wc98like", None, 1, 1, 0.0, 1).is_err());
        assert!(WorkloadSpec::new("pareto", None, 1, 1, 1.0, 1).is_err());
    }
}
