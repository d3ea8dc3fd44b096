use super::*;

fn load(connections: &[usize], remaining: &[f64]) -> Vec<HostLoad> {
    connections.iter().zip(remaining).map(|(&c, &r)| HostLoad { connections: c, remaining_bytes: r }).collect()
}

#[test]
fn every_form_parses_and_writes_back() {
    for form in DispatchRule::FORMS {
        let text = form.replace("CUTOFFS", "1000,50000").replace('N', "100");
        let rule = DispatchRule::parse(&text).unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(rule.to_string(), text);
    }
}

#[test]
fn parse_table() {
    for (text, want) in [
        ("random", DispatchRule::Random),
        ("round-robin", DispatchRule::RoundRobin),
        ("least-connections", DispatchRule::LeastConnections),
        ("least-work", DispatchRule::LeastWork),
        ("sita-e", DispatchRule::SitaE),
        ("sita:10K", DispatchRule::Sita(vec![10_000])),
        ("sita:1000,1M", DispatchRule::Sita(vec![1000, 1_000_000])),
        ("sita-e:5000", DispatchRule::SitaELive(5000)),
    ] {
        let got = DispatchRule::parse(text).unwrap();
        assert_eq!(got, want, "{text}");
        assert_eq!(DispatchRule::parse(&got.to_string()).unwrap(), want, "{text} round trip");
    }
    for bad in ["", "rr", "sita", "sita:", "sita:10K,x", "sita:1M,10K", "least_work", "sita-e:0", "sita-e:x", "sita-e:"]
    {
        assert!(DispatchRule::parse(bad).is_err(), "{bad:?}");
    }
    assert!(matches!(DispatchRule::parse("sita:1M,10K"), Err(DispatchError::Decreasing(_))));
}

#[test]
fn construction_checks_hosts_and_cutoffs() {
    assert!(matches!(Dispatcher::new(DispatchRule::Random, 0, 1), Err(DispatchError::BadHosts { .. })));
    assert!(Dispatcher::new(DispatchRule::Random, MAX_HOSTS + 1, 1).is_err());
    assert_eq!(
        Dispatcher::new(DispatchRule::Sita(vec![10]), 3, 1).unwrap_err(),
        DispatchError::CutoffCount { cutoffs: 1, hosts: 3 }
    );
    assert_eq!(Dispatcher::new(DispatchRule::SitaE, 2, 1).unwrap_err(), DispatchError::Unresolved);
    let mut d = Dispatcher::new(DispatchRule::LeastWork, 3, 1).unwrap();
    assert_eq!(d.choose(1, &[HostLoad::default()]).unwrap_err(), DispatchError::LoadCount { got: 1, hosts: 3 });
}

#[test]
fn round_robin_cycles() {
    let mut d = Dispatcher::new(DispatchRule::RoundRobin, 3, 1).unwrap();
    let got: Vec<usize> = (0..7).map(|_| d.choose(100, &[]).unwrap()).collect();
    assert_eq!(got, [0, 1, 2, 0, 1, 2, 0]);
}

#[test]
fn least_connections_and_least_work_table() {
    // (connections, remaining bytes) per host → host chosen by each rule (fresh dispatchers).
    let cases: [(&[usize], &[f64], usize, usize); 4] = [
        (&[0, 0, 0], &[0.0, 0.0, 0.0], 0, 0),       // all idle: the first
        (&[2, 1, 1], &[10.0, 500.0, 20.0], 1, 0),   // fewest requests vs fewest bytes
        (&[3, 3, 0], &[1e6, 5.0, 1e3], 2, 1),       // idle host vs nearly done one
        (&[1, 2, 3], &[300.0, 200.0, 100.0], 0, 2), // opposite orders
    ];
    for (conns, bytes, want_lc, want_lw) in cases {
        let l = load(conns, bytes);
        let mut lc = Dispatcher::new(DispatchRule::LeastConnections, 3, 1).unwrap();
        let mut lw = Dispatcher::new(DispatchRule::LeastWork, 3, 1).unwrap();
        assert_eq!(lc.choose(1, &l).unwrap(), want_lc, "least-connections {conns:?}");
        assert_eq!(lw.choose(1, &l).unwrap(), want_lw, "least-work {bytes:?}");
    }
}

#[test]
fn least_rules_break_ties_round_robin() {
    // All idle: the least-* rules rotate like round robin (HAProxy's leastconn does).
    for rule in [DispatchRule::LeastConnections, DispatchRule::LeastWork] {
        let mut d = Dispatcher::new(rule.clone(), 3, 1).unwrap();
        let idle = vec![HostLoad::default(); 3];
        let got: Vec<usize> = (0..5).map(|_| d.choose(1, &idle).unwrap()).collect();
        assert_eq!(got, [0, 1, 2, 0, 1], "{rule}");
        // Host 1 busy: the tie between 0 and 2 starts after the last choice (1) → 2, then 0.
        let l = load(&[0, 1, 0], &[0.0, 5.0, 0.0]);
        assert_eq!(d.choose(1, &l).unwrap(), 2, "{rule}");
        assert_eq!(d.choose(1, &l).unwrap(), 0, "{rule}");
        // No tie: the least loaded whatever the turn.
        assert_eq!(d.choose(1, &load(&[1, 1, 0], &[5.0, 5.0, 0.0])).unwrap(), 2, "{rule}");
    }
}

#[test]
fn sita_intervals_table() {
    let mut d = Dispatcher::new(DispatchRule::Sita(vec![1_000, 100_000]), 3, 1).unwrap();
    for (size, want) in [(0, 0), (1, 0), (1_000, 0), (1_001, 1), (100_000, 1), (100_001, 2), (u64::MAX, 2)] {
        assert_eq!(d.choose(size, &[]).unwrap(), want, "size {size}");
    }
    // Equal cutoffs leave the middle host idle.
    assert_eq!(sita_host(&[10, 10], 11), 2);
    assert_eq!(sita_host(&[10, 10], 10), 0);
}

#[test]
fn random_is_seeded_and_spreads() {
    let draw = |seed| {
        let mut d = Dispatcher::new(DispatchRule::Random, 4, seed).unwrap();
        (0..4000).map(|_| d.choose(1, &[]).unwrap()).collect::<Vec<_>>()
    };
    assert_eq!(draw(7), draw(7), "same seed, same choices");
    assert_ne!(draw(7), draw(8));
    let mut counts = [0usize; 4];
    for h in draw(7) {
        counts[h] += 1;
    }
    // 1000 expected per host; binomial sd ~ 27.
    assert!(counts.iter().all(|&c| (880..=1120).contains(&c)), "{counts:?}");
}

#[test]
fn sita_e_on_small_samples() {
    // Loads 1+1+1+1+4 = 8: two hosts split at 4 of 8 → sizes 1..1 (4) | 4.
    assert_eq!(sita_e_cutoffs(&mut [(1, 4), (4, 1)], 2).unwrap(), [1]);
    // 10 equal sizes: one host needs no cutoff.
    let mut ten: Vec<(u64, u64)> = (0..10).map(|_| (7, 1)).collect();
    assert_eq!(sita_e_cutoffs(&mut ten, 1).unwrap(), Vec::<u64>::new());
    // One distinct size: every host boundary falls on it (all requests to host 0).
    assert_eq!(sita_e_cutoffs(&mut ten, 3).unwrap(), [7, 7]);
    // 1..=4 loads 1,2,3,4 (total 10), 2 hosts: target 5 → {1,2} (3) or {1,2,3} (6): 6 is closer.
    assert_eq!(sita_e_cutoffs(&mut [(4, 1), (2, 1), (3, 1), (1, 1)], 2).unwrap(), [3]);
    // Weights count: size 1 requested 100 times outweighs size 50 once.
    assert_eq!(sita_e_cutoffs(&mut [(1, 100), (50, 1), (60, 1)], 2).unwrap(), [1]);
    assert_eq!(sita_e_cutoffs(&mut [], 2).unwrap_err(), DispatchError::NoSizes);
    assert_eq!(sita_e_cutoffs(&mut [(0, 5)], 2).unwrap_err(), DispatchError::NoSizes);
}

/// Bounded Pareto(k, p, alpha): ∫_a^b x f(x) dx, exact.
fn bp_partial_mean(k: f64, p: f64, alpha: f64, a: f64, b: f64) -> f64 {
    let c = alpha * k.powf(alpha) / (1.0 - (k / p).powf(alpha));
    c * (a.powf(1.0 - alpha) - b.powf(1.0 - alpha)) / (alpha - 1.0)
}

#[test]
fn sita_e_equalises_bounded_pareto_load() {
    let (k, p, alpha) = (1_000.0f64, 1e8f64, 1.2f64);
    let n = 400_000;
    let r = (k / p).powf(alpha);
    // A stratified sample: the quantile at the middle of each of n equal strata.
    let mut sizes: Vec<(u64, u64)> = (0..n)
        .map(|i| {
            let u = (i as f64 + 0.5) / n as f64;
            ((k / (1.0 - u * (1.0 - r)).powf(1.0 / alpha)).round() as u64, 1)
        })
        .collect();
    for hosts in [2usize, 4] {
        let cutoffs = sita_e_cutoffs(&mut sizes, hosts).unwrap();
        let total = bp_partial_mean(k, p, alpha, k, p);
        let mut edges = vec![k];
        edges.extend(cutoffs.iter().map(|&c| c as f64));
        edges.push(p);
        for w in edges.windows(2) {
            let share = bp_partial_mean(k, p, alpha, w[0], w[1]) / total;
            assert!((share - 1.0 / hosts as f64).abs() < 0.01, "{hosts} hosts, cutoffs {cutoffs:?}: share {share}");
        }
    }
}

#[test]
fn wire_cost_counts_the_head_and_a_header_per_segment() {
    let bare = WireCost { head_bytes: 0, control_bytes: 0 };
    assert_eq!(bare.bytes(0), 0);
    assert_eq!(bare.bytes(1), 1 + 66);
    assert_eq!(bare.bytes(1_448), 1_448 + 66);
    assert_eq!(bare.bytes(1_449), 1_449 + 2 * 66);
    let wire = WireCost { head_bytes: 280, control_bytes: 150 };
    assert_eq!(wire.bytes(0), 280 + 66 + 150);
    assert_eq!(wire.bytes(10_000), 10_280 + 8 * 66 + 150);
    assert_eq!(wire.bytes(u64::MAX), u64::MAX);
}

#[test]
fn sita_e_by_wire_cost_gives_the_small_sizes_host_fewer_bytes() {
    // A thousand small responses (100..1,099 B) and twenty large (50..69 KB). On the wire
    // each small one also costs a head and a segment header, a third more than its body:
    // the equal split falls at a lower size than by bodies, and equalises the wire bytes
    // to within one response.
    let mut sizes: Vec<(u64, u64)> = (100..1_100).map(|s| (s, 1)).collect();
    sizes.extend((50..70).map(|k| (k * 1_000, 1)));
    let by_body = sita_e_cutoffs(&mut sizes.clone(), 2).unwrap();
    let wire = WireCost { head_bytes: 280, control_bytes: 0 };
    let by_wire = sita_e_cutoffs_by(&mut sizes, 2, |s| wire.bytes(s)).unwrap();
    assert!(by_wire[0] < by_body[0], "by wire {by_wire:?}, by body {by_body:?}");
    let load = |lo: u64, hi: u64| -> u64 {
        sizes.iter().filter(|&&(s, _)| s > lo && s <= hi).map(|&(s, w)| wire.bytes(s) * w).sum()
    };
    let (h0, h1) = (load(0, by_wire[0]), load(by_wire[0], u64::MAX));
    assert!(h0.abs_diff(h1) <= wire.bytes(70_000), "host loads {h0} and {h1}");
}

#[test]
fn live_window_forgets_old_sizes() {
    let mut live = LiveSitaE::new(2, 100).unwrap();
    assert_eq!(live.cutoffs().unwrap_err(), DispatchError::NoSizes);
    for _ in 0..100 {
        live.observe(10);
    }
    assert_eq!(live.cutoffs().unwrap(), [10]);
    for i in 0..100u64 {
        live.observe(1 + i % 2); // 1, 2, 1, 2, ...: load 150 = 50 + 100
    }
    assert_eq!(live.observations(), 100);
    // Half the load (75): all the 1s (50) or 1s and 2s (150): 50 is closer.
    assert_eq!(live.cutoffs().unwrap(), [1]);
}

#[test]
fn live_sita_e_follows_the_window() {
    // Window 32, 2 hosts: cutoffs re-derived at 1, 2 (every 32/16 = 2 requests after).
    let mut d = Dispatcher::new(DispatchRule::SitaELive(32), 2, 1).unwrap();
    assert_eq!(d.choose(10, &[]).unwrap(), 0, "no cutoffs yet: host 0");
    // The window holds 10 only: cutoff 10, so larger sizes go to host 1.
    assert_eq!(d.choose(11, &[]).unwrap(), 1);
    for _ in 0..64 {
        d.choose(1_000, &[]).unwrap();
    }
    // Only 1000s in the window now: cutoff 1000 (sizes above it alone on host 1).
    assert_eq!(d.choose(1_000, &[]).unwrap(), 0);
    assert_eq!(d.choose(1_001, &[]).unwrap(), 1);
    assert_eq!(d.choose(11, &[]).unwrap(), 0, "the old small sizes have left the window");
    // Alternating 1 and 3 (load 1 + 3 per pair): half the load is the 3s alone.
    for i in 0..64 {
        d.choose(if i % 2 == 0 { 1 } else { 3 }, &[]).unwrap();
    }
    assert_eq!((d.choose(1, &[]).unwrap(), d.choose(3, &[]).unwrap()), (0, 1));
}
