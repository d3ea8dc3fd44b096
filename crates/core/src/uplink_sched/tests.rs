use proptest::prelude::*;

use super::*;

const MS: u64 = 1_000_000;

/// 8 Mbit/s at full rate: one wire byte per microsecond.
pub(super) fn config(mode: Mode) -> SchedConfig {
    SchedConfig {
        pacer: PacerConfig {
            rate_bits_per_s: 8_000_000,
            rate_fraction: 1.0,
            lookahead_ns: 4 * MS,
            ..Default::default()
        },
        quantum_bytes: 16 * 1024,
        quantum_ns: MS,
        max_connections: 64,
        max_groups: 8,
        mode,
    }
}

fn sched(policy: &str) -> UplinkScheduler {
    UplinkScheduler::new(Policy::parse(policy).unwrap(), config(Mode::WorkConserving)).unwrap()
}

/// Grants everything the pacer allows at `now`, each fully written; returns the ids in order.
fn drain(s: &mut UplinkScheduler, now: u64) -> Vec<(ConnId, u64)> {
    let mut out = Vec::new();
    while let Some(g) = s.next_grant(now) {
        s.report(now, g.id, g.bytes, 0, true);
        out.push((g.id, g.bytes));
    }
    out
}

#[test]
fn config_errors_are_named() {
    let ok = config(Mode::WorkConserving);
    let cases: Vec<(SchedConfig, SchedError)> = vec![
        (SchedConfig { pacer: PacerConfig { rate_bits_per_s: 0, ..ok.pacer }, ..ok.clone() }, SchedError::ZeroRate),
        (
            SchedConfig { pacer: PacerConfig { rate_fraction: 1.5, ..ok.pacer }, ..ok.clone() },
            SchedError::RateFraction(1.5),
        ),
        (SchedConfig { quantum_bytes: 100, ..ok.clone() }, SchedError::Quantum { quantum: 100, mss: 1448 }),
        (SchedConfig { quantum_ns: 2_000 * MS, ..ok.clone() }, SchedError::QuantumTime(2_000 * MS)),
        (SchedConfig { max_connections: 0, ..ok.clone() }, SchedError::MaxConnections(0)),
        (
            SchedConfig { pacer: PacerConfig { control_bytes_per_connection: 70_000, ..ok.pacer }, ..ok.clone() },
            SchedError::ControlBytes(70_000),
        ),
        (SchedConfig { mode: Mode::LimitedConcurrency { writers: 0 }, ..ok.clone() }, SchedError::Writers),
    ];
    for (c, want) in cases {
        assert_eq!(UplinkScheduler::new(Policy::Srpt, c).unwrap_err(), want);
    }
}

#[test]
fn srpt_grants_the_least_remaining_writable_connection() {
    let mut s = sched("srpt");
    let big = s.register(1_000_000).unwrap();
    let mid = s.register(50_000).unwrap();
    let small = s.register(20_000).unwrap();
    for id in [big, mid, small] {
        s.set_writable(id, true);
    }
    let g = s.next_grant(0).unwrap();
    assert_eq!(g.id, small);
    assert!(g.bytes <= s.quantum_bytes());
    // Small is blocked (its window is full): the link goes to the next best, not idle.
    s.report(0, small, g.bytes, 0, false);
    let g = s.next_grant(10 * MS).unwrap();
    assert_eq!(g.id, mid);
    s.report(10 * MS, mid, g.bytes, 0, true);
    s.set_writable(small, true);
    assert_eq!(s.next_grant(20 * MS).unwrap().id, small, "small is best again once writable");
}

#[test]
fn unsent_kernel_bytes_count_as_remaining() {
    let mut s = sched("srpt");
    let a = s.register(10_000).unwrap();
    let b = s.register(9_000).unwrap();
    s.set_writable(a, true);
    let g = s.next_grant(0).unwrap();
    assert_eq!(g.id, a);
    // a wrote 3,000 but all of it is still unsent: 10,000 left in all, b has 9,000.
    s.report(0, a, 3_000, 3_000, true);
    s.set_writable(b, true);
    assert_eq!(s.next_grant(20 * MS).unwrap().id, b);
}

#[test]
fn nothing_is_granted_without_budget_or_without_a_writable_connection() {
    let mut s = sched("srpt");
    assert_eq!(s.next_grant(0), None);
    assert_eq!(s.next_release_ns(0), None);
    let a = s.register(1_000_000).unwrap();
    assert_eq!(s.next_grant(0), None, "registered but not writable");
    s.set_writable(a, true);
    let g = s.next_grant(0).unwrap();
    assert_eq!(s.next_grant(0), None, "a grant is outstanding");
    s.report(0, a, g.bytes, 0, true);
    assert_eq!(s.next_grant(0), None, "budget spent");
    let at = s.next_release_ns(0).unwrap();
    assert!(at > 0 && at <= 2 * MS, "{at}");
    assert!(s.next_grant(at).is_some());
}

#[test]
fn a_release_waits_for_the_quantum_or_for_all_the_best_has_left() {
    let mut c = config(Mode::WorkConserving);
    c.pacer.release_ns = 2 * MS; // 2,000 wire bytes: one segment and 420 bytes
    let mut s = UplinkScheduler::new(Policy::Srpt, c).unwrap();
    assert_eq!(s.pacer().release_bytes(), 1448 + 420);
    let long = s.register(1_000_000).unwrap();
    s.set_writable(long, true);
    assert!(!drain(&mut s, 0).is_empty());
    let booked = s.pacer().backlog_ns(0);
    assert_eq!(s.next_release_ns(0), Some(booked + 2 * MS - 4 * MS), "the quantum fits");
    assert_eq!(s.next_grant(booked - 2_400_000), None, "a segment fits (1.6 ms), not the quantum");
    let short = s.register(500).unwrap();
    s.set_writable(short, true);
    assert_eq!(s.next_release_ns(0), Some(booked + 566_000 - 4 * MS), "the short response's 566 wire bytes fit");
    assert_eq!(s.next_grant(booked + 566_000 - 4 * MS).map(|g| (g.id, g.bytes)), Some((short, 500)));
}

/// Grants one response needs when every grant is written whole and the
/// pacer never binds: its size over the quantum in force.
fn grants_per_response(rate_bits_per_s: u64, size_bytes: u64) -> (u64, u64) {
    let mut c = config(Mode::WorkConserving);
    c.pacer = PacerConfig { rate_bits_per_s, rate_fraction: 0.98, lookahead_ns: 8 * MS, ..Default::default() };
    let mut s = UplinkScheduler::new(Policy::Srpt, c).unwrap();
    let a = s.register(size_bytes).unwrap();
    s.set_writable(a, true);
    let (mut grants, mut now) = (0, 0);
    while s.app_remaining(a) != Some(0) {
        now += 10 * MS;
        grants += drain(&mut s, now).len() as u64;
    }
    (grants, s.quantum_bytes())
}

#[test]
fn the_quantum_is_a_link_time_on_fast_links_and_a_byte_count_on_slow_ones() {
    // (rate, response size, grants it takes, quantum in force); at 10 Mbit/s
    // the 8 ms look-ahead (9.8 KB) binds before the quantum does.
    let table: &[(u64, u64, u64, u64)] = &[
        (10_000_000, 102_400, 11, 16_384),
        (100_000_000, 102_400, 7, 16_384),
        (1_000_000_000, 102_400, 1, 117_154),
        (1_000_000_000, 300_000, 3, 117_154),
        (40_000_000_000, 102_400, 1, 4_686_358),
        (40_000_000_000, 1_024, 1, 4_686_358),
    ];
    for &(rate, size, grants, quantum) in table {
        assert_eq!(grants_per_response(rate, size), (grants, quantum), "{rate} bit/s, {size} bytes");
    }
}

#[test]
fn small_remainders_are_granted_whole_even_below_a_segment() {
    let mut s = sched("srpt");
    let a = s.register(100).unwrap();
    s.set_writable(a, true);
    assert_eq!(s.next_grant(0).map(|g| g.bytes), Some(100));
}

#[test]
fn a_response_longer_than_registered_is_granted_the_rest_once_extended() {
    let mut s = sched("srpt");
    let a = s.register(100).unwrap();
    let b = s.register(50_000).unwrap();
    s.set_writable(a, true);
    s.set_writable(b, true);
    let g = s.next_grant(0).unwrap();
    assert_eq!((g.id, g.bytes), (a, 100));
    s.report(0, a, 100, 0, true);
    // All it registered is written: it is never granted again on its own.
    assert_eq!(s.next_grant(0).map(|g| g.id), Some(b));
    s.report(0, b, 0, 0, true);
    // Its driver finds 22 more bytes to send (a record's overhead): they are granted,
    // and ranked as what it has left (22 bytes, ahead of b).
    s.extend(a, 22);
    assert_eq!(s.app_remaining(a), Some(22));
    let g = s.next_grant(0).unwrap();
    assert_eq!((g.id, g.bytes), (a, 22));
    s.report(0, a, 22, 0, true);
    assert_eq!(s.app_remaining(a), Some(0));
}

#[test]
fn refused_and_unused_bytes_are_refunded() {
    let mut s = sched("fair");
    let a = s.register(1_000_000).unwrap();
    s.set_writable(a, true);
    let g = s.next_grant(0).unwrap();
    s.report(0, a, 0, 0, false); // EAGAIN
    assert_eq!(s.stats().refunded_bytes, g.bytes);
    assert_eq!(s.pacer().backlog_ns(0), 0);
    s.set_writable(a, true);
    assert_eq!(s.next_grant(0).map(|g| g.bytes), Some(g.bytes));
    s.finish(0, a);
    assert_eq!(s.stats().refunded_bytes, 2 * g.bytes);
    assert_eq!(s.stats().registered, 0);
}

#[test]
fn fair_shares_bytes_round_robin() {
    let mut s = sched("fair");
    let ids: Vec<ConnId> = (0..3).map(|_| s.register(10_000_000).unwrap()).collect();
    for &id in &ids {
        s.set_writable(id, true);
    }
    let mut bytes = [0u64; 3];
    for t in 0..2_000 {
        for (id, n) in drain(&mut s, t * MS) {
            bytes[ids.iter().position(|&i| i == id).unwrap()] += n;
        }
    }
    let (min, max) = (bytes.iter().min().unwrap(), bytes.iter().max().unwrap());
    assert!(max - min <= s.quantum_bytes(), "{bytes:?}");
}

#[test]
fn fair_resumes_a_blocked_connection_at_the_virtual_time() {
    let mut s = sched("fair");
    let a = s.register(10_000_000).unwrap();
    let b = s.register(10_000_000).unwrap();
    s.set_writable(a, true);
    for t in 0..500 {
        drain(&mut s, t * MS);
    }
    // b joins after a got ~500 KB: it shares from now on, it does not take the link
    // until it has caught up.
    s.set_writable(b, true);
    let (mut na, mut nb) = (0, 0);
    for t in 500..600 {
        for (id, n) in drain(&mut s, t * MS) {
            if id == a {
                na += n
            } else {
                nb += n
            }
        }
    }
    assert!(na > 0 && nb > 0 && na.abs_diff(nb) <= s.quantum_bytes(), "a {na}, b {nb}");
}

#[test]
fn srpt_classes_round_robin_within_a_class() {
    let mut s = sched("srpt-classes:100K");
    let big = s.register(1_000_000).unwrap();
    let x = s.register(50_000).unwrap();
    let y = s.register(60_000).unwrap();
    for id in [big, x, y] {
        s.set_writable(id, true);
    }
    let mut order = Vec::new();
    for t in 0..40 {
        order.extend(drain(&mut s, t * MS));
    }
    assert!(order.iter().all(|&(id, _)| id != big), "the worse class waits while the better one has work");
    let bytes = |who| order.iter().filter(|&&(id, _)| id == who).map(|&(_, n)| n).sum::<u64>();
    let (xs, ys) = (bytes(x), bytes(y));
    assert!(xs > 10_000 && xs.abs_diff(ys) <= s.quantum_bytes(), "{xs} vs {ys}");
}

#[test]
fn las_serves_the_least_attained_first() {
    let mut s = sched("las");
    let old = s.register(1_000_000).unwrap();
    s.set_writable(old, true);
    for t in 0..20 {
        drain(&mut s, t * MS);
    }
    let new = s.register(1_000_000).unwrap();
    s.set_writable(new, true);
    assert_eq!(s.next_grant(100 * MS).unwrap().id, new);
}

#[test]
fn full_scheduler_refuses_and_frees_slots() {
    let mut c = config(Mode::WorkConserving);
    c.max_connections = 2;
    let mut s = UplinkScheduler::new(Policy::Srpt, c).unwrap();
    let a = s.register(10).unwrap();
    let _b = s.register(10).unwrap();
    assert_eq!(s.register(10), Err(SchedError::Full { max: 2 }));
    assert_eq!(s.stats().full_refusals, 1);
    s.finish(0, a);
    let c2 = s.register(10).unwrap();
    assert_eq!(c2.index(), a.index());
    assert_ne!(c2, a, "a reused slot gets a new generation");
    assert_eq!(s.app_remaining(a), None);
}

#[test]
fn limited_concurrency_admits_the_best_k_and_holds_the_slots() {
    let mut s = UplinkScheduler::new(Policy::Srpt, config(Mode::LimitedConcurrency { writers: 1 })).unwrap();
    let big = s.register(1_000_000).unwrap();
    let small = s.register(1_000).unwrap();
    let mid = s.register(5_000).unwrap();
    for id in [big, small, mid] {
        s.set_writable(id, true);
    }
    assert_eq!(s.stats().waiting, 2);
    // big holds the one slot: blocked, it still holds the link (Crovella's loss).
    let g = s.next_grant(0).unwrap();
    assert_eq!(g.id, big);
    s.report(0, big, g.bytes, 0, false);
    assert_eq!(s.next_grant(100 * MS), None, "the admitted writer is blocked: the link idles");
    s.finish(100 * MS, big);
    assert_eq!(s.next_grant(100 * MS).unwrap().id, small, "the best waiting one takes the slot");
}

/// One step of a random schedule.
#[derive(Clone, Debug)]
enum Op {
    Register(u64),
    Writable(usize, bool),
    /// Advance time by this many microseconds, then grant what is allowed;
    /// each grant is written in part (fraction in 0..=4 quarters), and the
    /// socket stays writable or not.
    Tick(u64, u8, bool),
    Finish(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (1u64..3_000_000).prop_map(Op::Register),
        (0usize..16, any::<bool>()).prop_map(|(i, w)| Op::Writable(i, w)),
        (0u64..5_000, 0u8..=4, any::<bool>()).prop_map(|(d, q, w)| Op::Tick(d, q, w)),
        (0usize..16).prop_map(Op::Finish),
    ]
}

/// A grant's record: time, connection, bytes granted, written, the ranks of
/// every ready connection at that moment.
struct Record {
    at_ns: u64,
    written: u64,
}

fn run(policy: &str, mode: Mode, ops: &[Op]) -> (UplinkScheduler, Vec<Record>) {
    let mut s = UplinkScheduler::new(Policy::parse(policy).unwrap(), config(mode)).unwrap();
    let mut ids: Vec<ConnId> = Vec::new();
    let mut writable: Vec<bool> = Vec::new();
    let mut now = 0;
    let mut log = Vec::new();
    // Unfinished connections ever granted: in limited-concurrency mode, at most K.
    let mut holders: Vec<ConnId> = Vec::new();
    for op in ops {
        match *op {
            Op::Register(size) => {
                if let Ok(id) = s.register(size) {
                    ids.push(id);
                    writable.push(false);
                }
            }
            Op::Writable(i, w) if i < ids.len() && s.app_remaining(ids[i]).is_some() => {
                s.set_writable(ids[i], w);
                writable[i] = w;
            }
            Op::Tick(d_us, quarters, still) => {
                now += d_us * 1_000;
                let budget = s.pacer().budget_bytes(now);
                let mut written_now = 0;
                while let Some(g) = s.next_grant(now) {
                    let i = ids.iter().position(|&x| x == g.id).expect("granted a registered id");
                    assert!(writable[i], "granted a connection that is not writable");
                    let remaining = s.app_remaining(g.id).unwrap();
                    assert!(g.bytes <= remaining && g.bytes <= s.quantum_bytes());
                    assert!(written_now + g.bytes <= budget, "granted beyond the budget {budget}");
                    if !holders.contains(&g.id) {
                        holders.push(g.id);
                    }
                    if let Mode::LimitedConcurrency { writers } = mode {
                        assert!(holders.len() <= writers, "{} connections wrote, limit {writers}", holders.len());
                    }
                    let written = g.bytes * u64::from(quarters) / 4;
                    written_now += written;
                    let w = still && written == g.bytes;
                    s.report(now, g.id, written, 0, w);
                    writable[i] = w;
                    log.push(Record { at_ns: now, written });
                }
            }
            Op::Finish(i) if i < ids.len() && s.app_remaining(ids[i]).is_some() => {
                s.finish(now, ids[i]);
                holders.retain(|&h| h != ids[i]);
                writable[i] = false;
            }
            _ => {}
        }
    }
    (s, log)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// Over every window, the bytes written under grants fit in the window's
    /// link time plus the look-ahead (and, checked inside `run`: no grant to a
    /// non-writable connection, none beyond the budget, at most K writers in
    /// limited-concurrency mode).
    #[test]
    fn never_more_than_the_link_over_any_window(ops in proptest::collection::vec(op(), 1..200)) {
        for mode in [Mode::WorkConserving, Mode::LimitedConcurrency { writers: 2 }] {
            let (s, log) = run("srpt", mode, &ops);
            let p = s.pacer();
            for i in 0..log.len() {
                let mut bytes = 0;
                for r in &log[i..] {
                    bytes += r.written;
                    let window_ns = r.at_ns - log[i].at_ns;
                    prop_assert!(p.wire_ns(bytes) <= window_ns + p.depth_ns() + 1 + p.wire_ns(0),
                        "{bytes} bytes in {window_ns} ns");
                }
            }
        }
    }

    /// Every grant goes to a writable connection (checked inside `run`), and
    /// under srpt to the least remaining among the writable ones.
    #[test]
    fn srpt_grants_the_least_remaining_writable(ops in proptest::collection::vec(op(), 1..200)) {
        let mut s = UplinkScheduler::new(Policy::Srpt, config(Mode::WorkConserving)).unwrap();
        let mut ids: Vec<ConnId> = Vec::new();
        let mut writable: Vec<bool> = Vec::new();
        let mut now = 0;
        for op in &ops {
            match *op {
                Op::Register(size) => if let Ok(id) = s.register(size) { ids.push(id); writable.push(false); },
                Op::Writable(i, w) if i < ids.len() && s.app_remaining(ids[i]).is_some() => {
                    s.set_writable(ids[i], w);
                    writable[i] = w;
                }
                Op::Tick(d_us, _, still) => {
                    now += d_us * 1_000;
                    while let Some(g) = s.next_grant(now) {
                        let granted = s.app_remaining(g.id).unwrap();
                        for (j, &id) in ids.iter().enumerate() {
                            if let (true, Some(r)) = (writable[j], s.app_remaining(id)) {
                                prop_assert!(r == 0 || id == g.id || r >= granted, "granted {granted} while {r} was writable");
                            }
                        }
                        s.report(now, g.id, g.bytes, 0, still);
                        let i = ids.iter().position(|&x| x == g.id).unwrap();
                        writable[i] = still;
                    }
                }
                Op::Finish(i) if i < ids.len() && s.app_remaining(ids[i]).is_some() => {
                    s.finish(now, ids[i]);
                    writable[i] = false;
                }
                _ => {}
            }
        }
    }

    /// Under fair, connections that stay writable never drift apart by more
    /// than a quantum of bytes, so none starves, whatever the sizes.
    #[test]
    fn fair_never_starves(n in 2usize..10, sizes in proptest::collection::vec(100_000u64..5_000_000, 10)) {
        let mut s = UplinkScheduler::new(Policy::Ps, config(Mode::WorkConserving)).unwrap();
        let ids: Vec<ConnId> = sizes[..n].iter().map(|&b| s.register(b).unwrap()).collect();
        for &id in &ids { s.set_writable(id, true); }
        let mut bytes: Vec<u64> = vec![0; n];
        for t in 0..400u64 {
            for (id, b) in drain(&mut s, t * MS) {
                bytes[ids.iter().position(|&x| x == id).unwrap()] += b;
                let unfinished: Vec<u64> = (0..n).filter(|&j| bytes[j] < sizes[j]).map(|j| bytes[j]).collect();
                let (lo, hi) = (unfinished.iter().min(), unfinished.iter().max());
                if let (Some(lo), Some(hi)) = (lo, hi) {
                    prop_assert!(hi - lo <= s.quantum_bytes(), "bytes drifted apart: {bytes:?}");
                }
            }
        }
    }
}

#[test]
fn limited_concurrency_under_fair_admits_in_arrival_order() {
    let mut s = UplinkScheduler::new(Policy::Ps, config(Mode::LimitedConcurrency { writers: 1 })).unwrap();
    let first = s.register(1_000_000).unwrap();
    let second = s.register(1_000_000).unwrap();
    s.set_writable(first, true);
    s.set_writable(second, true);
    for t in 0..50 {
        drain(&mut s, t * MS);
    }
    let late = s.register(1_000).unwrap();
    s.set_writable(late, true);
    s.finish(50 * MS, first);
    assert_eq!(s.next_grant(60 * MS).unwrap().id, second, "the earlier arrival takes the freed slot");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// Under the default look-ahead (or a given one at least a segment plus the
    /// allowance), a pacer that wakes for each release at most the lateness
    /// allowance late never lets the link idle while a connection waits; one
    /// later than `depth − release quantum` loses exactly the excess. Each
    /// release grants at least the release quantum: releases are batched.
    #[test]
    fn a_wake_within_the_allowance_never_idles_the_link(
        rate in 1_000_000u64..10_000_000_000,
        given in proptest::option::of(0u64..20 * MS),
        lates_us in proptest::collection::vec(0u64..3_000, 1..100),
    ) {
        let base = PacerConfig { rate_bits_per_s: rate, ..PacerConfig::default() };
        let pacer = base.with_defaults(given, LATENESS_ALLOWANCE_NS);
        let mut s = UplinkScheduler::new(Policy::Srpt, SchedConfig { pacer, ..config(Mode::WorkConserving) }).unwrap();
        let id = s.register(u64::MAX / 2).unwrap();
        s.set_writable(id, true);
        let p = s.pacer();
        let (depth_ns, segment_ns) = (p.depth_ns(), p.wire_ns(u64::from(pacer.mss_bytes)));
        let (release_bytes, release_ns) = (p.release_bytes(), p.wire_ns(p.release_bytes()));
        prop_assert_eq!(depth_ns, pacer.lookahead_ns.max(2 * segment_ns));
        prop_assert!(release_ns <= pacer.release_ns.max(segment_ns), "{} > {}", release_ns, pacer.release_ns);
        prop_assert!(release_bytes >= u64::from(pacer.mss_bytes) && release_ns + segment_ns <= depth_ns);
        let covered = given.is_none_or(|l| l >= segment_ns + LATENESS_ALLOWANCE_NS);
        let mut now = 0;
        for late_us in lates_us {
            let granted: u64 = drain(&mut s, now).iter().map(|&(_, bytes)| bytes).sum();
            prop_assert!(granted >= release_bytes, "a release at {} granted {} < {}", now, granted, release_bytes);
            let due = s.next_release_ns(now).unwrap();
            prop_assert!(due > now, "everything the budget allowed was granted");
            now = due + late_us * 1_000;
            let wake = s.pacer().wake(due, now);
            prop_assert_eq!(wake.late_ns, late_us * 1_000);
            prop_assert_eq!(wake.link_idle_ns, wake.late_ns.saturating_sub(depth_ns - release_ns));
            if covered && wake.late_ns <= LATENESS_ALLOWANCE_NS {
                prop_assert_eq!(wake.link_idle_ns, 0);
            }
        }
    }
}

/// (control bytes per connection, connections opened at t = 0) → the budget left
/// at t = 0 of the 4 ms look-ahead at one wire byte per microsecond, and the
/// control bytes counted. Control packets take link time that grants cannot.
#[test]
fn connections_control_packets_take_link_time_from_grants() {
    let table: &[(u32, u64, u64, u64)] = &[
        // 4,000 wire bytes: two full segments (2 × 1,514) and 972 − 66 bytes of a third
        (0, 3, 2 * 1448 + 906, 0),
        (250, 1, 2 * 1448 + 656, 250), // 3,750
        (250, 4, 1448 + 1420, 1_000),  // 3,000
        (1_000, 4, 0, 4_000),          // the whole look-ahead
    ];
    for &(control, opened, budget, counted) in table {
        let mut c = config(Mode::WorkConserving);
        c.pacer.control_bytes_per_connection = control;
        let mut s = UplinkScheduler::new(Policy::Srpt, c).unwrap();
        for _ in 0..opened {
            s.charge_connection(0);
        }
        assert_eq!(s.pacer().budget_bytes(0), budget, "{control} B × {opened}");
        assert_eq!(s.stats().control_bytes, counted);
    }
}

/// A TLS handshake's payload bytes, charged outside any grant, take their link time in
/// segments (payload + 66 header bytes each) from the look-ahead, and count as control
/// bytes; none charged, nothing taken.
#[test]
fn handshake_bytes_take_link_time_in_segments() {
    // (handshake payload bytes) → budget left at t = 0 of the 4,000 wire bytes of look-ahead
    let table: &[(u64, u64)] = &[
        (0, 2 * 1448 + 906),
        // 2,000 payload bytes in two segments: 2,132 wire bytes; 1,868 left = 1,514 + 288 + 66
        (2_000, 1448 + 288),
        (4_000, 0), // 4,000 + 3 × 66 wire bytes: the look-ahead and more
    ];
    for &(payload, budget) in table {
        let mut s = UplinkScheduler::new(Policy::Srpt, config(Mode::WorkConserving)).unwrap();
        s.charge_handshake(0, payload);
        assert_eq!(s.pacer().budget_bytes(0), budget, "{payload} B");
        assert_eq!(s.stats().control_bytes, payload);
    }
}
