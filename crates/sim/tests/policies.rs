//! Every policy on small traces worked out by hand (rate 1 byte/s so sizes are
//! service times), plus property tests: work conservation and SRPT's optimality.

use proptest::prelude::*;
use shortfirst_core::policy::Policy;
use shortfirst_sim::{simulate, Job, JobTimes, Link, SimError};

fn jobs(spec: &[(f64, u64)]) -> Vec<Job> {
    spec.iter().map(|&(arrival_s, size_bytes)| Job { arrival_s, size_bytes }).collect()
}

fn run(policy: &str, servers: usize, spec: &[(f64, u64)]) -> Vec<JobTimes> {
    let p = Policy::parse(policy).unwrap();
    simulate(&jobs(spec), &p, Link { rate_bytes_per_s: 1.0, servers }).unwrap()
}

fn assert_times(policy: &str, servers: usize, spec: &[(f64, u64)], done: &[f64], first: &[f64]) {
    let out = run(policy, servers, spec);
    for (i, o) in out.iter().enumerate() {
        assert!(
            (o.done_s - done[i]).abs() < 1e-9,
            "{policy} (C={servers}) job {i}: done {} want {}",
            o.done_s,
            done[i]
        );
        assert!(
            (o.first_service_s - first[i]).abs() < 1e-9,
            "{policy} (C={servers}) job {i}: first service {} want {}",
            o.first_service_s,
            first[i]
        );
    }
}

/// A: 10 bytes at 0, B: 4 at 1, C: 2 at 2, D: 1 at 3 on one server of 1 byte/s.
const TRACE: &[(f64, u64)] = &[(0.0, 10), (1.0, 4), (2.0, 2), (3.0, 1)];

#[test]
fn fifo_table() {
    // A 0→10, B 10→14, C 14→16, D 16→17.
    assert_times("fifo", 1, TRACE, &[10.0, 14.0, 16.0, 17.0], &[0.0, 10.0, 14.0, 16.0]);
}

#[test]
fn sjf_table() {
    // Non-preemptive: A runs to 10; then D (1) 10→11, C (2) 11→13, B (4) 13→17.
    assert_times("sjf", 1, TRACE, &[10.0, 17.0, 13.0, 11.0], &[0.0, 13.0, 11.0, 10.0]);
}

#[test]
fn srpt_table() {
    // t=1: A has 9 left, B (4) preempts. t=2: B has 3, C (2) preempts. t=3: C has 1,
    // D (1) ties with C: no preemption (earlier arrival wins). C done 4, D 4→5, B 5→8, A 8→17.
    assert_times("srpt", 1, TRACE, &[17.0, 8.0, 4.0, 5.0], &[0.0, 1.0, 2.0, 4.0]);
}

#[test]
fn ps_table() {
    // 0–1: A alone (A 9 left). 1–2: A,B share (A 8.5, B 3.5). 2–3: three share (A 8.1667, B 3.1667, C 1.6667).
    // 3: D arrives, four share at 1/4: D done at 3+4·1 = 7 (C then has 0.6667 left, B 2.1667, A 7.1667).
    // 7–9: three share: C done at 7+3·0.6667 = 9 (B 1.5, A 6.5). 9–12: B done at 12 (A 5). A done at 17.
    assert_times("ps", 1, TRACE, &[17.0, 12.0, 9.0, 7.0], &[0.0, 1.0, 2.0, 3.0]);
}

#[test]
fn las_table() {
    // 0–1: A alone (attained 1). t=1: B (0) served alone until attained 1 at t=2; C arrives (0):
    // C alone to attained 1 at t=3; D arrives (0): D alone, done at 4. Then A,B,C all at
    // attained 1 share: C needs 1 more (3 × 1 = 3 s) → done 7; A,B at attained 2: B needs 2
    // more (2 × 2 = 4 s) → done 11; A needs 6 more → done 17.
    assert_times("las", 1, TRACE, &[17.0, 11.0, 7.0, 4.0], &[0.0, 1.0, 2.0, 3.0]);
}

#[test]
fn fsp_table() {
    // Virtual PS (as in ps_table) finishes A 17, B 12, C 9, D 7; tags in virtual work:
    // A 0+10, B 1+4, C 1.5+2, D 1.8333+1. FSP serves the least tag, preemptively:
    // 0–1 A (9 left); 1–2 B (3 left); 2–3 C (1 left); D 3→4, C 4→5, B 5→8, A 8→17.
    assert_times("fsp", 1, TRACE, &[17.0, 8.0, 5.0, 4.0], &[0.0, 1.0, 2.0, 3.0]);
}

#[test]
fn srpt_classes_table() {
    // Cutoffs 2 and 5 bytes: bands (0,2], (2,5], (5,∞). PS inside a band.
    // 0–1: A (band 3) alone, 9 left. t=1: B (4, band 2) preempts: 1–2 B → 3 left.
    // t=2: C (2, band 1) preempts: 2–3 C → 1 left. t=3: D (1, band 1) shares with C:
    // both get 1/2: C done at 5, D done at 5. Then B (3 left, band 2) crosses cutoff 2 at
    // t=6 into band 1, done at 8. A: 9 left from 8 (crossing 5 at 12, 2 at 15), done at 17.
    assert_times("srpt-classes:2,5", 1, TRACE, &[17.0, 8.0, 5.0, 5.0], &[0.0, 1.0, 2.0, 3.0]);
}

#[test]
fn srpt_classes_jobs_drain_into_better_bands() {
    // Cutoff 5: A (8 bytes, band 2) at 0, B (4 bytes, band 1) at 1.
    // 0–1: A alone, 7 left. 1–: B served (band 1). B done at 5. A: 7 left, done at 12.
    // Second case: A reaches the cutoff before B arrives: A 8 at 0, B 4 at 4:
    // at t=3 A has 5 left → band 1; at t=4 B (band 1) arrives: share: A has 4, B 4 → both done at 12.
    assert_times("srpt-classes:5", 1, &[(0.0, 8), (1.0, 4)], &[12.0, 5.0], &[0.0, 1.0]);
    assert_times("srpt-classes:5", 1, &[(0.0, 8), (4.0, 4)], &[12.0, 12.0], &[0.0, 4.0]);
}

#[test]
fn size_classes_table() {
    // Cutoffs 2 and 5 by full size: A (10) band 3, B (4) band 2, C (2) and D (1) band 1.
    // As srpt-classes until t=5 (C, D done at 5). Then B alone in band 2 with 3 left: done 8
    // (no move to band 1, but nobody else is there). A done at 17.
    assert_times("size-classes:2,5", 1, TRACE, &[17.0, 8.0, 5.0, 5.0], &[0.0, 1.0, 2.0, 3.0]);
    // Where it differs: A (8, band 2 for good, cutoff 5) at 0, B (4, band 1) at 4. srpt-classes
    // moved A to band 1 at t=3 and shared with B; size-classes lets B preempt: B 4→8, A done 12.
    assert_times("size-classes:5", 1, &[(0.0, 8), (4.0, 4)], &[12.0, 8.0], &[0.0, 4.0]);
}

#[test]
fn sjf_aging_table() {
    // X = 1: A (10) at 0 runs to 10. Waiting at 10: B (4, bound 1+4=5), C (2, bound 4), D (1, bound 4),
    // all past their bounds. Promoting C or D would delay the older B further past its bound
    // (10+2 > max(5, 10)), so no promotion: B 10→14, C 14→16, D 16→17 (arrival order).
    assert_times("sjf-aging:1", 1, TRACE, &[10.0, 14.0, 16.0, 17.0], &[0.0, 10.0, 14.0, 16.0]);
    // X = 3: bounds B 13, C 8, D 7. At 10, C may go ahead of B (10+2 <= 13) and is due: C
    // 10→12 (D may not go ahead of C: 10+1 > max(8, 10)). Then D ahead of B (12+1 <= 13):
    // 12→13, then B 13→17.
    assert_times("sjf-aging:3", 1, TRACE, &[10.0, 17.0, 12.0, 13.0], &[0.0, 13.0, 10.0, 12.0]);
    // X = 100: bounds far away: plain SJF.
    assert_times("sjf-aging:100", 1, TRACE, &[10.0, 17.0, 13.0, 11.0], &[0.0, 13.0, 11.0, 10.0]);
}

#[test]
fn two_servers_table() {
    // C = 2, each 1 byte/s. fifo: A 0→10 on server 1, B 1→5, C 5→7, D 7→8 on server 2.
    assert_times("fifo", 2, TRACE, &[10.0, 5.0, 7.0, 8.0], &[0.0, 1.0, 5.0, 7.0]);
    // srpt: t=2 C arrives, running A (8 left) and B (3 left): C preempts A. t=3 D preempts the worse
    // of B (2 left) and C (1 left)? B has 2 > 1: D preempts B. C done 4, D done 4; B resumes 4→6,
    // A resumes at 4 with 8 left → 12.
    assert_times("srpt", 2, TRACE, &[12.0, 6.0, 4.0, 4.0], &[0.0, 1.0, 2.0, 3.0]);
    // ps on 2 servers: each job min(1, 2/n). 0–2: A alone at 1 (8 left), B at 1 from 1 (3 left at 2... B 4−1=3).
    // 2–3: three jobs at 2/3: A 7.3333, B 2.3333, C 1.3333. 3: D, four jobs at 1/2:
    // D done at 5 (C 0.3333, B 1.3333, A 6.3333), then three at 2/3: C done at 5.5 (B 1, A 6),
    // two at 1: B done 6.5, A done 11.5.
    assert_times("ps", 2, TRACE, &[11.5, 6.5, 5.5, 5.0], &[0.0, 1.0, 2.0, 3.0]);
}

#[test]
fn zero_size_and_simultaneous_arrivals() {
    for p in ["ps", "fifo", "srpt", "srpt-classes:1K", "sjf", "sjf-aging:2", "las", "fsp"] {
        let out = run(p, 1, &[(0.0, 0), (0.0, 3), (0.0, 0), (1.0, 0)]);
        assert_eq!(out[0].done_s, 0.0, "{p}");
        assert!(out[2].done_s <= 3.0 + 1e-12, "{p}");
        assert!((out.iter().map(|o| o.done_s).fold(0.0, f64::max) - 3.0).abs() < 1e-9, "{p}: busy period ends at 3");
    }
}

#[test]
fn bad_input_is_rejected_with_position() {
    let p = Policy::Srpt;
    let link = Link { rate_bytes_per_s: 1.0, servers: 1 };
    assert_eq!(
        simulate(&jobs(&[(1.0, 1), (0.5, 1)]), &p, link),
        Err(SimError::Unsorted { index: 1, arrival_s: 0.5, previous_s: 1.0 })
    );
    assert!(simulate(&jobs(&[(f64::NAN, 1)]), &p, link).unwrap_err().to_string().contains("job #0"));
    assert!(matches!(simulate(&[], &p, Link { rate_bytes_per_s: 0.0, servers: 1 }), Err(SimError::BadRate(_))));
    assert!(matches!(simulate(&[], &p, Link { rate_bytes_per_s: 1.0, servers: 0 }), Err(SimError::BadServers(0))));
}

const ALL: &[&str] =
    &["ps", "fifo", "srpt", "srpt-classes:3,20,100", "size-classes:3,20,100", "sjf", "sjf-aging:2", "las", "fsp"];

fn trace_strategy() -> impl Strategy<Value = Vec<Job>> {
    proptest::collection::vec((0u32..50, 0u64..200), 1..60).prop_map(|v| {
        let mut t = 0.0;
        v.into_iter()
            .map(|(gap, size)| {
                t += f64::from(gap) / 10.0;
                Job { arrival_s: t, size_bytes: size }
            })
            .collect()
    })
}

/// End of each busy period of a work-conserving single server: the same for every policy.
fn busy_period_ends(jobs: &[Job], rate: f64) -> Vec<f64> {
    let mut ends = Vec::new();
    let mut free_at = 0.0f64;
    for j in jobs {
        if j.arrival_s > free_at && free_at > 0.0 {
            ends.push(free_at);
        }
        free_at = free_at.max(j.arrival_s) + j.size_bytes as f64 / rate;
    }
    ends.push(free_at);
    ends
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// Work conservation: every policy empties the system at the end of each busy period,
    /// and never completes a job before it could have (arrival + own service time).
    #[test]
    fn work_conservation(jobs in trace_strategy(), servers in 1usize..4) {
        let rate = 10.0;
        let ends = busy_period_ends(&jobs, rate);
        for p in ALL {
            let policy = Policy::parse(p).unwrap();
            let link = Link { rate_bytes_per_s: rate, servers };
            if matches!(policy, Policy::SjfAging { .. }) && servers > 1 {
                let refused = matches!(simulate(&jobs, &policy, link), Err(SimError::OneServerOnly { .. }));
                prop_assert!(refused, "sjf-aging on {} servers must be refused", servers);
                continue;
            }
            let out = simulate(&jobs, &policy, link).unwrap();
            for (j, o) in jobs.iter().zip(&out) {
                prop_assert!(o.done_s + 1e-9 >= j.arrival_s + j.size_bytes as f64 / rate, "{p}: job done too early");
                prop_assert!(o.first_service_s + 1e-12 >= j.arrival_s && o.first_service_s <= o.done_s + 1e-9, "{p}");
            }
            if servers == 1 {
                // Last completion inside each busy period = that period's end.
                for &end in &ends {
                    let last = out.iter().map(|o| o.done_s).filter(|&d| d <= end + 1e-6).fold(0.0, f64::max);
                    prop_assert!((last - end).abs() < 1e-6, "{p}: busy period ends at {end}, last completion {last}");
                }
            }
        }
    }

    /// SRPT minimises mean response time on one server, on every trace.
    #[test]
    fn srpt_is_optimal(jobs in trace_strategy()) {
        let link = Link { rate_bytes_per_s: 10.0, servers: 1 };
        let total = |p: &str| -> f64 {
            let out = simulate(&jobs, &Policy::parse(p).unwrap(), link).unwrap();
            jobs.iter().zip(&out).map(|(j, o)| o.done_s - j.arrival_s).sum()
        };
        let srpt = total("srpt");
        for p in ALL {
            let other = total(p);
            prop_assert!(srpt <= other * (1.0 + 1e-9) + 1e-9, "srpt {srpt} > {p} {other}");
        }
    }

    /// Non-preemptive SJF with an unreachable aging bound is plain SJF.
    #[test]
    fn limits_agree(jobs in trace_strategy()) {
        let link = Link { rate_bytes_per_s: 10.0, servers: 1 };
        let sjf = simulate(&jobs, &Policy::Sjf, link).unwrap();
        let aged = simulate(&jobs, &Policy::parse("sjf-aging:1e6").unwrap(), link).unwrap();
        prop_assert_eq!(sjf, aged);
    }
}
