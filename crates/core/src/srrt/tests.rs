use super::*;

/// A congestion-avoidance connection: cwnd above ssthresh, no loss, min_rtt known.
fn ca(min_rtt_us: u32, cwnd: u32, mss: u32) -> TcpSnapshot {
    TcpSnapshot {
        srtt_us: min_rtt_us,
        min_rtt_us: Some(min_rtt_us),
        rto_us: 200_000 + min_rtt_us,
        cwnd_segments: cwnd,
        mss_bytes: mss,
        ssthresh_segments: cwnd / 2,
        ..TcpSnapshot::default()
    }
}

#[test]
fn estimate_table() {
    let slow_start =
        |min_rtt_us, cwnd, mss, ssthresh| TcpSnapshot { ssthresh_segments: ssthresh, ..ca(min_rtt_us, cwnd, mss) };
    // (what, estimator, unwritten bytes, state, expected µs), each worked by hand.
    let cases: Vec<(&str, Estimator, u64, TcpSnapshot, u64)> = vec![
        // eq. 1: 100 ms · (1 + 14480 / (10 · 1448)) = 200 ms
        ("paper", Estimator::Paper, 14_480, TcpSnapshot { srtt_us: 100_000, ..ca(100_000, 10, 1448) }, 200_000),
        // eq. 1 uses srtt, inflated by queueing: 300 ms · (1 + 1) = 600 ms
        ("paper, queued", Estimator::Paper, 14_480, TcpSnapshot { srtt_us: 300_000, ..ca(100_000, 10, 1448) }, 600_000),
        // path: min_rtt/2 + min_rtt · B/W = 25 ms + 50 ms · 40000/20000 = 125 ms, srtt ignored
        ("ca", Estimator::Path, 40_000, TcpSnapshot { srtt_us: 400_000, ..ca(50_000, 20, 1000) }, 125_000),
        // slow start, no ssthresh yet: 50 ms + 100 ms · log2(1 + 30000/10000) = 250 ms
        ("slow start", Estimator::Path, 30_000, slow_start(100_000, 10, 1000, INFINITE_SSTHRESH), 250_000),
        // slow start up to ssthresh 20 (10000 bytes while doubling to 20000), then
        // 40000 bytes at 20000 per round trip: 50 + 100·log2(2) + 100·2 = 350 ms
        ("slow start to ssthresh", Estimator::Path, 50_000, slow_start(100_000, 10, 1000, 20), 350_000),
        // Loss (RTO fired): cwnd 1 below ssthresh 5 but not Open, so no slow start:
        // 25 + 50·2000/1000 + rto 400 = 525 ms
        (
            "loss",
            Estimator::Path,
            2_000,
            TcpSnapshot { ca_state: CaState::Loss, rto_us: 400_000, ssthresh_segments: 5, ..ca(50_000, 1, 1000) },
            525_000,
        ),
        // Recovery: one round trip more: 10 + 20·1 + 20 = 50 ms
        (
            "recovery",
            Estimator::Path,
            10_000,
            TcpSnapshot { ca_state: CaState::Recovery, ..ca(20_000, 10, 1000) },
            50_000,
        ),
        // Mathis cap at p = 1%: (1000 B / 100 ms) · 1.22 / 0.1 = 0.122 B/µs, so
        // 122000 B take 1 s (the window alone would say 122 ms): 50 ms + 1 s
        (
            "loss rate",
            Estimator::Path,
            122_000,
            TcpSnapshot { bytes_sent: Some(1_000_000), bytes_retrans: Some(10_000), ..ca(100_000, 100, 1000) },
            1_050_000,
        ),
        // too few segments sent for a loss rate: window only, 50 + 100·1.22 = 172 ms
        (
            "loss rate, small sample",
            Estimator::Path,
            122_000,
            TcpSnapshot { bytes_sent: Some(50_000), bytes_retrans: Some(10_000), ..ca(100_000, 100, 1000) },
            172_000,
        ),
        // written but not sent counts: 0 unwritten + 10000 notsent: 20 + 40·1 = 60 ms
        ("notsent", Estimator::Path, 0, TcpSnapshot { notsent_bytes: Some(10_000), ..ca(40_000, 10, 1000) }, 60_000),
        // nothing left to send: the last byte is half a round trip away
        ("drained", Estimator::Path, 0, ca(40_000, 10, 1000), 20_000),
        // no min_rtt from the kernel: srtt instead, 80/2 = 40 ms
        (
            "no min_rtt",
            Estimator::Path,
            0,
            TcpSnapshot { min_rtt_us: None, srtt_us: 80_000, ..ca(1, 10, 1000) },
            40_000,
        ),
        // the peer's window caps cwnd: W = 10000, 5 + 10·100000/10000 = 105 ms
        (
            "rwnd",
            Estimator::Path,
            100_000,
            TcpSnapshot { snd_wnd_bytes: Some(10_000), ..ca(10_000, 100, 1000) },
            105_000,
        ),
        // kept alive and idle 1 s (> rto 0.23 s, nothing in flight): cwnd 80 halves
        // per RTO to 10, ssthresh becomes 60: slow start from 10000 B, ss_bytes 50000:
        // 15 + 30·log2(1 + 30000/10000) = 75 ms (not 15 + 30·30000/80000 = 26.25)
        (
            "idle restart",
            Estimator::Path,
            30_000,
            TcpSnapshot { last_data_sent_ms: 1_000, restarts_after_idle: true, ..ca(30_000, 80, 1000) },
            75_000,
        ),
        // the same without the sysctl (or under BBR): the window as reported
        (
            "idle, no restart",
            Estimator::Path,
            30_000,
            TcpSnapshot { last_data_sent_ms: 1_000, ..ca(30_000, 80, 1000) },
            26_250,
        ),
        // idle less than the RTO: no restart
        (
            "short idle",
            Estimator::Path,
            30_000,
            TcpSnapshot { last_data_sent_ms: 100, restarts_after_idle: true, ..ca(30_000, 80, 1000) },
            26_250,
        ),
    ];
    for (what, estimator, unwritten, tcp, want_us) in cases {
        let got = estimate(estimator, unwritten, &tcp);
        assert_eq!(got.remaining_us, want_us, "{what}: {got:?}");
    }
}

#[test]
fn queueing_in_our_own_bands_does_not_push_a_connection_down() {
    let c = RrtCutoffs::default_list();
    let idle = ca(60_000, 10, 1448);
    let queued = TcpSnapshot { srtt_us: 900_000, ..idle };
    let path = |t: &TcpSnapshot| c.band_for(estimate(Estimator::Path, 20_000, t).remaining_us);
    let paper = |t: &TcpSnapshot| c.band_for(estimate(Estimator::Paper, 20_000, t).remaining_us);
    assert_eq!(path(&idle), path(&queued));
    assert!(paper(&queued) > paper(&idle), "the paper's estimator does move it: the reason for min_rtt");
}

#[test]
fn near_beats_far_for_the_same_size() {
    // The scenario SRPT cannot tell apart: same bytes, RTT 20 vs 300 ms.
    let c = RrtCutoffs::default_list();
    let fresh = |rtt| TcpSnapshot { ssthresh_segments: INFINITE_SSTHRESH, ..ca(rtt, 10, 1448) };
    for size in [1_000u64, 20_000, 200_000, 2_000_000] {
        let near = estimate(Estimator::Path, size, &fresh(20_000));
        let far = estimate(Estimator::Path, size, &fresh(300_000));
        assert!(near.remaining_us * 10 < far.remaining_us, "{size}: {near:?} {far:?}");
        assert!(c.band_for(near.remaining_us) < c.band_for(far.remaining_us), "{size}");
    }
}

#[test]
fn rrt_cutoffs_parse_table() {
    let ok: &[(&str, &[u64])] = &[
        ("", &[]),
        ("50ms,100ms,1s", &[50_000, 100_000, 1_000_000]),
        ("20, 250", &[20_000, 250_000]),
        ("500us,1.5ms", &[500, 1_500]),
    ];
    for (text, want) in ok {
        assert_eq!(RrtCutoffs::parse(text).unwrap().as_us(), *want, "{text}");
    }
    let bad: &[(&str, &str)] = &[
        ("50ms,abc", "#2 \"abc\""),
        ("100ms,50ms", "strictly increasing"),
        ("0ms", "at least 1 µs"),
        ("1,2,3,4,5,6,7", "at most 6"),
        ("-5ms", "#1"),
    ];
    for (text, needle) in bad {
        let msg = RrtCutoffs::parse(text).unwrap_err().to_string();
        assert!(msg.contains(needle), "{text}: {msg}");
    }
    assert_eq!(RrtCutoffs::default_list().to_string(), "50ms,100ms,200ms,500ms,1000ms");
    assert_eq!(RrtCutoffs::parse(&RrtCutoffs::default_list().to_string()).unwrap(), RrtCutoffs::default_list());
    assert_eq!("PAPER".parse::<Estimator>(), Ok(Estimator::Paper));
    assert!("e2".parse::<Estimator>().unwrap_err().contains("path or paper"));
}

#[test]
fn auto_rrt_cutoffs_follow_the_size_rules_of_thumb() {
    let mut a = AutoRrtCutoffs::new(6, 1_000);
    for us in 1..=99u64 {
        a.observe(us * 1_000);
    }
    assert!(a.compute().is_none(), "too few observations");
    for us in 1..=10_000u64 {
        a.observe(us * 100); // 0.1 ms .. 1 s; the window keeps the last 1000: 900.1 ms .. 1 s
    }
    assert_eq!(a.observations(), 1_000);
    let c = a.compute().unwrap();
    assert_eq!(c.as_us().first(), Some(&950_000), "first cutoff: the window's median");
    assert_eq!(c.as_us().last(), Some(&999_000), "last: 1% above");
    let sorted: Vec<u64> = (1..=10_000).collect();
    assert_eq!(rrt_cutoffs_from_sorted(&sorted, 6).as_us(), cutoffs_from_sorted(&sorted, 6).as_slice());
}

#[test]
fn response_promotes_on_drain_and_on_a_grown_window_never_demotes() {
    let c = RrtCutoffs::parse("100ms,200ms,400ms").unwrap();
    // 50 ms path, cwnd 10 · 1000: 100000 B = 25 + 50·10 = 525 ms → band 4
    let start = ca(50_000, 10, 1_000);
    let mut r = RrtResponse::start(&c, Estimator::Path, 100_000, 16_384, start);
    assert_eq!(r.band().index(), 4);
    assert_eq!(r.start_estimate().remaining_us, 525_000);
    assert!(!r.sent(10_000), "step not crossed");
    assert!(r.sent(10_000), "20000 written: crossed 16384");
    // 80000 left at the same state: 25 + 400 = 425 ms, still band 4
    assert_eq!(r.reevaluate(&c, start), Verdict::Stay);
    assert!(r.sent(20_000));
    // 60000 left: 325 ms → band 3, by draining alone
    assert_eq!(r.reevaluate(&c, start), Verdict::Promote { band: Band::new(3).unwrap(), cause: Cause::Drain });
    assert!(!r.sent(1_000), "no new step");
    assert!(r.sent(10_000));
    // 49000 left, but the window collapsed to 2 (an RTO): 25 + 50·24.5 ≫ → held
    let collapsed = TcpSnapshot { ca_state: CaState::Loss, ..ca(50_000, 2, 1_000) };
    assert_eq!(r.reevaluate(&c, collapsed), Verdict::HeldDemotion { wanted: Band::new(4).unwrap() });
    assert_eq!(r.band().index(), 3);
    assert!(r.sent(20_000));
    // 29000 left and the window grew to 100: 25 + 14.5 ms → band 1; at the
    // collapsed state draining alone would not have done it
    assert_eq!(
        r.reevaluate(&c, ca(50_000, 100, 1_000)),
        Verdict::Promote { band: Band::FIRST_DATA, cause: Cause::TcpState }
    );
    assert!(!r.sent(29_000), "the write that empties the response never re-evaluates");
    assert_eq!(r.unwritten_bytes(), 0);
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    fn snapshot() -> impl Strategy<Value = TcpSnapshot> {
        (
            (0u32..2_000_000, proptest::option::of(0u32..1_000_000), 0u32..5_000_000, 0u32..5_000, 0u32..9_000),
            (prop_oneof![Just(INFINITE_SSTHRESH), 0u32..5_000], 0u8..6, proptest::option::of(0u32..4_000_000)),
            (proptest::option::of(0u64..1 << 40), proptest::option::of(0u64..1 << 36)),
            (proptest::option::of(0u32..1 << 30), 0u32..100_000, any::<bool>()),
        )
            .prop_map(
                |(
                    (srtt, min_rtt, rto, cwnd, mss),
                    (ssthresh, ca, notsent),
                    (sent, retrans),
                    (wnd, idle_ms, restarts),
                )| {
                    TcpSnapshot {
                        srtt_us: srtt,
                        min_rtt_us: min_rtt,
                        rto_us: rto,
                        cwnd_segments: cwnd,
                        mss_bytes: mss,
                        ssthresh_segments: ssthresh,
                        ca_state: CaState::from_kernel(ca),
                        notsent_bytes: notsent,
                        bytes_sent: sent,
                        bytes_retrans: retrans,
                        snd_wnd_bytes: wnd,
                        last_data_sent_ms: idle_ms,
                        restarts_after_idle: restarts,
                        ..TcpSnapshot::default()
                    }
                },
            )
    }

    fn estimator() -> impl Strategy<Value = Estimator> {
        prop_oneof![Just(Estimator::Path), Just(Estimator::Paper)]
    }

    fn cutoffs() -> impl Strategy<Value = RrtCutoffs> {
        proptest::collection::btree_set(1u64..100_000_000, 0..MAX_DATA_BANDS)
            .prop_map(|set| RrtCutoffs::from_us(set.into_iter().collect()).unwrap())
    }

    proptest! {
        #[test]
        fn more_remaining_bytes_never_gives_an_earlier_band(
            tcp in snapshot(), e in estimator(), c in cutoffs(), a in 0u64..1 << 40, b in 0u64..1 << 40,
        ) {
            let (small, large) = if a <= b { (a, b) } else { (b, a) };
            let (es, el) = (estimate(e, small, &tcp), estimate(e, large, &tcp));
            prop_assert!(es.remaining_us <= el.remaining_us, "{es:?} > {el:?}");
            prop_assert!(c.band_for(es.remaining_us) <= c.band_for(el.remaining_us));
        }

        #[test]
        fn band_zero_never_carries_data(tcp in snapshot(), e in estimator(), c in cutoffs(), b in any::<u64>()) {
            let band = c.band_for(estimate(e, b, &tcp).remaining_us);
            prop_assert!(band.is_data());
            prop_assert!(usize::from(band.index()) <= c.data_bands());
        }

        #[test]
        fn path_estimate_ignores_srtt_when_min_rtt_is_known(tcp in snapshot(), srtt in 0u32..10_000_000, b in 0u64..1 << 32) {
            prop_assume!(tcp.min_rtt_us.is_some_and(|m| m > 0));
            let other = TcpSnapshot { srtt_us: srtt, ..tcp };
            prop_assert_eq!(estimate(Estimator::Path, b, &tcp), estimate(Estimator::Path, b, &other));
        }

        #[test]
        fn a_response_only_moves_to_better_data_bands(
            c in cutoffs(), e in estimator(), size in 0u64..50_000_000, step in 1u64..1_000_000,
            start in snapshot(), writes in proptest::collection::vec((1u64..300_000, snapshot()), 1..60),
        ) {
            let mut r = RrtResponse::start(&c, e, size, step, start);
            prop_assert!(r.band().is_data());
            let mut evaluations = 0u64;
            let mut written = 0u64;
            for (w, tcp) in writes {
                let before = r.band();
                written += w;
                if r.sent(w) {
                    evaluations += 1;
                    prop_assert!(r.unwritten_bytes() > 0, "no re-evaluation on the emptying write");
                    match r.reevaluate(&c, tcp) {
                        Verdict::Promote { band, .. } => prop_assert!(band < before && band.is_data()),
                        Verdict::HeldDemotion { wanted } => prop_assert!(wanted > before),
                        Verdict::Stay => {}
                    }
                }
                prop_assert!(r.band() <= before && r.band().is_data());
            }
            // At most one re-evaluation per step of bytes written.
            prop_assert!(evaluations <= written.min(size) / step);
        }
    }
}
