//! The farm's SITA against M/G/1 theory. Poisson arrivals, bounded-Pareto sizes,
//! SITA-E cutoffs from the sizes: each host is then an M/G/1 queue whose sizes are the
//! bounded Pareto truncated to the host's interval, so its mean response time has a
//! closed form under processor sharing (E[S]/(1−ρ)) and under SRPT (Schrage and
//! Miller's formula, integrated here by quadrature). The simulated means must be
//! within 3% of the formulas, per host and overall.
//!
//! Size of the run: over seeds 1–12 at 400 000 jobs the errors spread with a standard
//! deviation of about 1.2% (the largest 2.5%, PS on the long-job host); 600 000 jobs
//! bring that to about 1%, at about 4 s of CPU per test in a debug build.

use rand::{Rng, SeedableRng};
use shortfirst_core::dispatch::{sita_e_cutoffs, DispatchRule, Dispatcher};
use shortfirst_core::policy::Policy;
use shortfirst_sim::farm::{simulate_farm, summarize_hosts};
use shortfirst_sim::report::summarize;
use shortfirst_sim::{Job, Link};

/// Bounded Pareto on [K, P] with tail index ALPHA, sizes in bytes.
const K: f64 = 1_000.0;
const P: f64 = 100_000.0;
const ALPHA: f64 = 1.5;
/// Each host's link, bytes per second.
const RATE: f64 = 1e6;
const HOSTS: usize = 2;
/// Load per host.
const RHO: f64 = 0.6;
const JOBS: usize = 600_000;
const WARMUP: usize = 6_000;
const TOLERANCE: f64 = 0.03;

fn cdf(x: f64) -> f64 {
    (1.0 - (K / x).powf(ALPHA)) / (1.0 - (K / P).powf(ALPHA))
}

/// ∫_a^b x^n f(x) dx for n = 1, 2 (exact).
fn partial_moment(n: i32, a: f64, b: f64) -> f64 {
    let c = ALPHA * K.powf(ALPHA) / (1.0 - (K / P).powf(ALPHA));
    let e = f64::from(n) - ALPHA;
    c * (b.powf(e) - a.powf(e)) / e
}

fn density(x: f64) -> f64 {
    ALPHA * K.powf(ALPHA) * x.powf(-ALPHA - 1.0) / (1.0 - (K / P).powf(ALPHA))
}

fn mean_size() -> f64 {
    partial_moment(1, K, P)
}

fn jobs(seed: u64) -> Vec<Job> {
    let lambda = RHO * HOSTS as f64 * RATE / mean_size();
    let mut rng = rand_chacha::ChaCha12Rng::seed_from_u64(seed);
    let r = (K / P).powf(ALPHA);
    let mut t = 0.0;
    (0..JOBS)
        .map(|_| {
            t += -(1.0 - rng.gen::<f64>()).ln() / lambda;
            let u: f64 = rng.gen();
            let size = K / (1.0 - u * (1.0 - r)).powf(1.0 / ALPHA);
            Job { arrival_s: t, size_bytes: size.round() as u64 }
        })
        .collect()
}

/// One host's M/G/1 queue: arrival rate λ·P(a < S ≤ b), sizes truncated to (a, b].
struct HostTheory {
    a: f64,
    b: f64,
    lambda: f64,
}

impl HostTheory {
    fn new(lambda_total: f64, a: f64, b: f64) -> HostTheory {
        HostTheory { a, b, lambda: lambda_total * (cdf(b) - cdf(a)) }
    }

    /// ρ of jobs up to size x (service times in seconds).
    fn rho_upto(&self, x: f64) -> f64 {
        self.lambda * partial_moment(1, self.a, x) / (cdf(self.b) - cdf(self.a)) / RATE
    }

    fn ps_mean_s(&self) -> f64 {
        let mean_s = partial_moment(1, self.a, self.b) / (cdf(self.b) - cdf(self.a)) / RATE;
        mean_s / (1.0 - self.rho_upto(self.b))
    }

    /// Schrage–Miller: T(x) = λ(∫_0^x t² dF + x²(1−F(x))) / (2(1−ρ(x))²) + ∫_0^x dt/(1−ρ(t)),
    /// averaged over the host's sizes; log grid, trapezoid inside, Simpson outside.
    fn srpt_mean_s(&self) -> f64 {
        let n = 20_000; // even
        let p_host = cdf(self.b) - cdf(self.a);
        let step = (self.b / self.a).ln() / n as f64;
        let xs: Vec<f64> = (0..=n).map(|i| self.a * (step * i as f64).exp()).collect();
        let inv = |x: f64| 1.0 / (1.0 - self.rho_upto(x));
        // Residence ∫_0^x dt/(1−ρ(t)) in seconds: ρ = 0 below a.
        let mut residence = vec![self.a / RATE];
        for w in xs.windows(2) {
            let last = *residence.last().expect("starts with one value");
            residence.push(last + (w[1] - w[0]) / RATE * (inv(w[0]) + inv(w[1])) / 2.0);
        }
        let response = |i: usize| {
            let x = xs[i];
            let second = partial_moment(2, self.a, x) / p_host / (RATE * RATE);
            let tail = (x / RATE).powi(2) * (cdf(self.b) - cdf(x)) / p_host;
            let rho = self.rho_upto(x);
            self.lambda * (second + tail) / (2.0 * (1.0 - rho).powi(2)) + residence[i]
        };
        // ∫ T(x) f(x)/p dx = ∫ T(x) f(x) x / p d(ln x).
        let g = |i: usize| response(i) * density(xs[i]) * xs[i] / p_host;
        let mut sum = g(0) + g(n);
        for i in 1..n {
            sum += g(i) * if i % 2 == 1 { 4.0 } else { 2.0 };
        }
        sum * step / 3.0
    }
}

fn check(policy: &str, seed: u64) {
    let jobs = jobs(seed);
    let mut sizes: Vec<(u64, u64)> = jobs.iter().map(|j| (j.size_bytes, 1)).collect();
    let cutoffs = sita_e_cutoffs(&mut sizes, HOSTS).unwrap();
    let mut d = Dispatcher::new(DispatchRule::Sita(cutoffs.clone()), HOSTS, 1).unwrap();
    let policy = Policy::parse(policy).unwrap();
    let out = simulate_farm(&jobs, &policy, RATE, &mut d, HOSTS).unwrap();
    let per_host = summarize_hosts(&jobs, &out, RATE, HOSTS, WARMUP);
    let overall = summarize(&jobs, &out.times, Link { rate_bytes_per_s: RATE, servers: HOSTS }, WARMUP);

    let lambda = RHO * HOSTS as f64 * RATE / mean_size();
    // Host intervals in bytes: sizes are whole bytes, so (c, c'] holds the reals in (c + 0.5, c' + 0.5].
    let mut edges = vec![K];
    edges.extend(cutoffs.iter().map(|&c| c as f64 + 0.5));
    edges.push(P);
    let mut weighted = 0.0;
    for (h, w) in edges.windows(2).enumerate() {
        let theory = HostTheory::new(lambda, w[0], w[1]);
        let want = match policy {
            Policy::Ps => theory.ps_mean_s(),
            _ => theory.srpt_mean_s(),
        };
        weighted += want * (cdf(w[1]) - cdf(w[0]));
        let got = per_host[h].summary.mean_response_s;
        let err = got / want - 1.0;
        eprintln!(
            "{policy} host {h} (ρ = {:.3}): simulated {got:.6} s, theory {want:.6} s, {:+.2}%",
            per_host[h].utilisation,
            err * 100.0
        );
        assert!(err.abs() < TOLERANCE, "{policy} host {h}: simulated {got} s vs theory {want} s");
    }
    let err = overall.mean_response_s / weighted - 1.0;
    eprintln!(
        "{policy} overall: simulated {:.6} s, theory {weighted:.6} s, {:+.2}%",
        overall.mean_response_s,
        err * 100.0
    );
    assert!(err.abs() < TOLERANCE, "{policy} overall: simulated {} s vs theory {weighted} s", overall.mean_response_s);
}

#[test]
fn sita_e_with_ps_hosts_matches_mg1_theory() {
    check("ps", 11);
}

#[test]
fn sita_e_with_srpt_hosts_matches_schrage_miller() {
    check("srpt", 11);
}
