use rand::{Rng, SeedableRng};
use shortfirst_core::dispatch::{DispatchRule, Dispatcher};
use shortfirst_core::policy::Policy;

use super::*;

fn job(arrival_s: f64, size_bytes: u64) -> Job {
    Job { arrival_s, size_bytes }
}

fn run(jobs: &[Job], policy: &str, rule: DispatchRule, hosts: usize) -> FarmOutcome {
    let mut d = Dispatcher::new(rule, hosts, 1).unwrap();
    simulate_farm(jobs, &Policy::parse(policy).unwrap(), 1000.0, &mut d, hosts).unwrap()
}

#[test]
fn round_robin_hosts_and_times() {
    // 1000 B/s per host; round robin over 2 hosts: jobs 0, 2 on host 0, job 1 on host 1.
    let jobs = [job(0.0, 1000), job(0.0, 500), job(0.5, 1000)];
    let out = run(&jobs, "fifo", DispatchRule::RoundRobin, 2);
    assert_eq!(out.host, [0, 1, 0]);
    let done: Vec<f64> = out.times.iter().map(|t| t.done_s).collect();
    assert_eq!(done, [1.0, 0.5, 2.0]);
    assert_eq!(out.times[2].first_service_s, 1.0);
}

#[test]
fn sita_sends_by_size() {
    let jobs = [job(0.0, 100), job(0.0, 5000), job(0.1, 1000), job(0.2, 1001)];
    let out = run(&jobs, "ps", DispatchRule::Sita(vec![1000]), 2);
    assert_eq!(out.host, [0, 1, 0, 1]);
    // Host 0 under ps: 100 B alone until 0.1 done; 1000 B from 0.1 → 1.1.
    assert_eq!(out.times[0].done_s, 0.1);
    assert!((out.times[2].done_s - 1.1).abs() < 1e-9);
}

#[test]
fn least_work_reads_unfinished_bytes() {
    // Job 0 (1000 B) on host 0; at 0.1 host 0 has 900 B left → host 1; at 0.2 host 1 is
    // empty again (100 B done at 0.2) and host 0 has 800 B: host 1.
    let jobs = [job(0.0, 1000), job(0.1, 100), job(0.2, 100), job(0.25, 10)];
    let out = run(&jobs, "ps", DispatchRule::LeastWork, 2);
    assert_eq!(out.host, [0, 1, 1, 1]);
}

#[test]
fn least_connections_counts_depend_on_the_policy() {
    // C and E (10 kB each) end on host 0, A and B (100 B each) on host 1 (ties rotate).
    // At 0.15 under fifo A is done: host 1 holds 1 < 2 → host 1; under ps A and B share,
    // 25 B left each: 2 and 2, a tie, and the turn after B's host is host 0.
    let jobs = [job(0.0, 10_000), job(0.0, 100), job(0.0, 10_000), job(0.0, 100), job(0.15, 1)];
    assert_eq!(run(&jobs, "fifo", DispatchRule::LeastConnections, 2).host, [0, 1, 0, 1, 1]);
    assert_eq!(run(&jobs, "ps", DispatchRule::LeastConnections, 2).host, [0, 1, 0, 1, 0]);
}

fn random_jobs(n: usize, seed: u64) -> Vec<Job> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut t = 0.0;
    (0..n)
        .map(|_| {
            t += rng.gen_range(0.0..0.6);
            // Mostly small, a few large: busy periods of several jobs at 1000 B/s.
            let size = if rng.gen_bool(0.1) { rng.gen_range(1000..5000) } else { rng.gen_range(1..400) };
            job(t, size)
        })
        .collect()
}

#[test]
fn least_connections_picks_the_emptiest_host_exactly() {
    // Check every choice against the final, exact per-host outcomes: the jobs of a host
    // in it at an arrival are those that arrived before and finish after it.
    for policy in ["ps", "srpt", "fifo", "las"] {
        let jobs = random_jobs(400, 3);
        let out = run(&jobs, policy, DispatchRule::LeastConnections, 3);
        let mut turn = 0;
        for (i, j) in jobs.iter().enumerate() {
            let mut counts = [0usize; 3];
            for (t, &h) in out.times[..i].iter().zip(&out.host) {
                if t.done_s > j.arrival_s {
                    counts[h as usize] += 1;
                }
            }
            // The least count; among equals the first from the host after the last choice.
            let min = *counts.iter().min().unwrap();
            let want = (0..3).map(|k| (turn + k) % 3).find(|&h| counts[h] == min).unwrap();
            assert_eq!(out.host[i] as usize, want, "{policy}: job {i} at {} saw {counts:?}", j.arrival_s);
            turn = (want + 1) % 3;
        }
        assert!(out.host.contains(&2), "{policy}: the third host is used");
    }
}

#[test]
fn each_host_is_its_own_link() {
    // The farm's times are each host's jobs simulated alone.
    let jobs = random_jobs(300, 5);
    let out = run(&jobs, "srpt", DispatchRule::Random, 3);
    for h in 0..3u32 {
        let mine: Vec<usize> = (0..jobs.len()).filter(|&i| out.host[i] == h).collect();
        let alone: Vec<Job> = mine.iter().map(|&i| jobs[i]).collect();
        let want = simulate(&alone, &Policy::Srpt, Link { rate_bytes_per_s: 1000.0, servers: 1 }).unwrap();
        for (&i, w) in mine.iter().zip(&want) {
            assert_eq!(out.times[i], *w, "job {i}");
        }
    }
    // One host: the farm is the single link.
    let one = run(&jobs, "srpt", DispatchRule::RoundRobin, 1);
    let single = simulate(&jobs, &Policy::Srpt, Link { rate_bytes_per_s: 1000.0, servers: 1 }).unwrap();
    assert_eq!(one.times, single);
}

#[test]
fn host_summaries_add_up() {
    let jobs = random_jobs(300, 9);
    let out = run(&jobs, "ps", DispatchRule::RoundRobin, 2);
    let per_host = summarize_hosts(&jobs, &out, 1000.0, 2, 10);
    assert_eq!(per_host.iter().map(|h| h.jobs).sum::<usize>(), 290);
    assert_eq!(per_host[0].jobs, 145, "round robin alternates; 5 of each host's first are warm-up");
    let bytes: u64 = jobs[10..].iter().map(|j| j.size_bytes).sum();
    let span = jobs.last().unwrap().arrival_s - jobs[10].arrival_s;
    let total_util: f64 = per_host.iter().map(|h| h.utilisation).sum();
    assert!((total_util - bytes as f64 / 1000.0 / span).abs() < 1e-9);
}

#[test]
fn bad_input_is_refused() {
    let mut d = Dispatcher::new(DispatchRule::RoundRobin, 2, 1).unwrap();
    let unsorted = [job(1.0, 1), job(0.5, 1)];
    assert!(matches!(
        simulate_farm(&unsorted, &Policy::Ps, 1000.0, &mut d, 2),
        Err(FarmError::Sim(SimError::Unsorted { index: 1, .. }))
    ));
    assert!(matches!(simulate_farm(&[], &Policy::Ps, 0.0, &mut d, 2), Err(FarmError::Sim(SimError::BadRate(_)))));
}
