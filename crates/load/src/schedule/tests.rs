use super::*;
use proptest::prelude::*;

fn sched(spec: &str) -> LoadSchedule {
    LoadSchedule::parse(spec).unwrap_or_else(|e| panic!("{spec}: {e}"))
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * b.abs().max(1.0)
}

/// Scheduled send times against a hand-computed schedule: 2 s at 0.5, then
/// 1 s at 2, repeated. A period consumes 2 × 0.5 + 1 × 2 = 3 s of base-rate
/// replay in 3 s of wall time; the first phase turns 1 s of base replay into
/// 2 s of wall time, the second 2 s into 1 s.
#[test]
fn warp_against_a_hand_computed_schedule() {
    let s = sched("2s@0.5,1s@2");
    let cases = [
        // (base offset = (t − t0) / speed, wall time)
        (0.0, 0.0),
        (0.5, 1.0),
        (0.9, 1.8),
        (1.0, 2.0), // the boundary: phase 1 starts
        (1.5, 2.25),
        (2.0, 2.5),
        (2.9, 2.95),
        (3.0, 3.0), // the second period
        (3.5, 4.0),
        (4.0, 5.0),
        (4.5, 5.25),
        (6.0, 6.0),
        (7.0, 8.0),
        (301.5, 302.25), // period 100
    ];
    for (base, wall) in cases {
        let got = s.wall_time_s(base);
        assert!(close(got, wall), "base {base}: wall {got}, want {wall}");
        assert!(close(s.work_at_s(wall), base), "work_at({wall}) = {}, want {base}", s.work_at_s(wall));
    }
    assert_eq!(s.period_s(), 3.0);
    assert!(close(s.mean_multiplier(), 1.0));
}

/// Workload W1 on a trace of 10 requests/s at the base rate: 25 s at 0.2
/// (one request every 0.5 s, 50 in the phase), then 25 s at 1.2 (one every
/// 1/12 s, 300 in the phase), then again.
#[test]
fn w1_on_an_evenly_spaced_trace() {
    let s = sched("w1");
    let wall = |i: u32| s.wall_time_s(f64::from(i) / 10.0);
    let cases = [
        (0, 0.0),
        (1, 0.5),
        (49, 24.5),
        (50, 25.0),
        (51, 25.0 + 1.0 / 12.0),
        (349, 50.0 - 1.0 / 12.0),
        (350, 50.0),
        (351, 50.5),
    ];
    for (i, want) in cases {
        assert!(close(wall(i), want), "request {i}: {} vs {want}", wall(i));
    }
    assert_eq!(s.phase_at(wall(49)), (0, 0.2));
    assert_eq!(s.phase_at(wall(50)), (1, 1.2));
    assert_eq!(s.phase_at(wall(350)), (0, 0.2));
    // Requests per phase over the first period: 50 and 300.
    let in_phase = |k| (0..350).filter(|&i| s.phase_at(wall(i)).0 == k).count();
    assert_eq!((in_phase(0), in_phase(1)), (50, 300));
}

/// Every preset is Table 1's row: low phase first, and the time-weighted mean
/// of the two loads is the table's average load (W8 and W10 are rounded there).
#[test]
fn presets_are_table_1() {
    let want = [
        ("w1", 25.0, 0.2, 25.0, 1.2, 0.7),
        ("w2", 10.0, 0.2, 10.0, 1.2, 0.7),
        ("w3", 50.0, 0.2, 50.0, 1.6, 0.9),
        ("w4", 25.0, 0.4, 25.0, 1.4, 0.9),
        ("w5", 10.0, 0.4, 10.0, 1.4, 0.9),
        ("w6", 40.0, 0.1, 40.0, 1.7, 0.9),
        ("w7", 63.0, 0.4, 6.0, 5.0, 0.8),
        ("w8", 63.0, 0.45, 10.0, 3.0, 0.8),
        ("w9", 20.0, 0.735, 3.0, 2.0, 0.9),
        ("w10", 13.3, 0.735, 2.0, 2.0, 0.9),
    ];
    assert_eq!(PRESETS.len(), want.len());
    for (p, (name, low_s, low, high_s, high, mean)) in PRESETS.iter().zip(want) {
        for spelled in [name.to_string(), name.to_uppercase()] {
            let s = sched(&spelled);
            assert_eq!(s.spec(), name);
            let phases = [Phase { duration_s: low_s, multiplier: low }, Phase { duration_s: high_s, multiplier: high }];
            assert_eq!(s.phases(), &phases, "{name}");
        }
        assert_eq!((p.name, p.mean_load), (name, mean));
        let m = sched(name).mean_multiplier();
        assert!((m - mean).abs() < 0.002, "{name}: mean multiplier {m} vs Table 1's {mean}");
        assert_eq!(p.kind == "alternating", low_s == high_s, "{name}");
    }
}

#[test]
fn parse_forms() {
    let s = sched(" 25s@0.2 , 25s@1.2 ");
    assert_eq!(s.phases(), &[Phase { duration_s: 25.0, multiplier: 0.2 }, Phase { duration_s: 25.0, multiplier: 1.2 }]);
    assert_eq!(s.spec(), "25s@0.2 , 25s@1.2");
    assert_eq!(
        sched("1m30s@1,500ms@3,2@.5").phases().iter().map(|p| p.duration_s).collect::<Vec<_>>(),
        [90.0, 0.5, 2.0]
    );
    assert_eq!(sched("13.3s@0.735").phases()[0].duration_s, 13.3);
    // Persistent overload: one multiplier throughout.
    let c = sched("const@1.4");
    assert_eq!(c.phases().len(), 1);
    for w in [0.0, 0.7, 1.0, 1234.5] {
        assert!(close(c.wall_time_s(w * 1.4), w));
        assert_eq!(c.phase_at(w), (0, 1.4));
    }
}

#[test]
fn phase_lookup_and_time_in_phases() {
    let s = sched("2s@0.5,1s@2");
    for (wall, k) in [(-1.0, 0), (0.0, 0), (1.99, 0), (2.0, 1), (2.99, 1), (3.0, 0), (5.5, 1), (3e5 + 2.5, 1)] {
        assert_eq!(s.phase_at(wall).0, k, "at {wall}");
    }
    // 7.5 s: two whole periods (2 × 2 s and 2 × 1 s) and 1.5 s of phase 0.
    assert_eq!(s.time_in_phases_s(7.5), vec![5.5, 2.0]);
    assert_eq!(s.time_in_phases_s(0.0), vec![0.0, 0.0]);
    let sum = s.summary(&[11, 4], 7.5);
    assert_eq!(sum.phases[0].requests, 11);
    assert_eq!(sum.phases[0].scheduled_req_per_s, Some(2.0));
    assert_eq!(sum.phases[1].scheduled_req_per_s, Some(2.0));
    assert_eq!(sum.spec, "2s@0.5,1s@2");
}

/// Bad specs: each error names what and where.
#[test]
fn spec_errors() {
    let cases = [
        ("", "empty"),
        ("   ", "empty"),
        ("0s@1", "phase 1 `0s@1`: duration must be above 0"),
        ("5s@1,-5s@1", "phase 2 `-5s@1`: duration `-5s`: must be above 0"),
        ("0.5ms@1", "shorter than the shortest phase"),
        ("5x@1", "duration \"5x\""),
        ("5s@0", "phase 1 `5s@0`: multiplier must be a positive finite number, got 0"),
        ("5s@-1.5", "got -1.5"),
        ("5s@abc", "multiplier `abc`: expected a decimal number"),
        ("5s@1e3", "multiplier `1e3`"),
        ("5s@inf", "multiplier `inf`"),
        ("5s@1000001", "multiplier 1000001 is above the limit of 1000000"),
        ("5s@", "multiplier ``"),
        ("5s@1,,3s@2", "phase 2 ``: expected DURATION@MULT"),
        ("5s@1,3s", "phase 2 `3s`: expected DURATION@MULT"),
        ("w11", "not a preset (w1, w2"),
        ("burst", "not a preset"),
        ("const@0", "positive"),
        ("const@", "multiplier ``"),
        ("const@1,5s@2", "multiplier `1,5s@2`"),
        ("100d@1", "duration \"100d\""),
        ("2000h@1,2000h@1", "longer than"),
    ];
    for (spec, want) in cases {
        let e = LoadSchedule::parse(spec).expect_err(spec).to_string();
        assert!(e.contains(want), "{spec:?}: {e}");
        assert!(e.starts_with("load schedule"), "{e}");
    }
    let many = vec!["1s@1"; MAX_PHASES + 1].join(",");
    assert!(LoadSchedule::parse(&many).unwrap_err().to_string().contains("more than 10000 phases"));
    assert_eq!(sched(&vec!["1s@1"; MAX_PHASES].join(",")).phases().len(), MAX_PHASES);
    assert!(LoadSchedule::new("x", vec![]).unwrap_err().contains("no phases"));
}

#[test]
fn file_form() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        format!("file:{}", p.display())
    };
    let ok = write("ok.txt", "# W1 by hand\n\n25s 0.2   # low\n25s\t1.2\n  10s@3\n");
    let s = sched(&ok);
    assert_eq!(
        s.phases().iter().map(|p| (p.duration_s, p.multiplier)).collect::<Vec<_>>(),
        [(25.0, 0.2), (25.0, 1.2), (10.0, 3.0)]
    );
    assert_eq!(s.spec(), ok);
    let cases = [
        ("bad3.txt", "# c\n25s 0.2\n25s zero\n".to_string(), "bad3.txt: line 3: multiplier `zero`"),
        ("one.txt", "25s\n".into(), "line 1: expected `DURATION MULTIPLIER`"),
        ("three.txt", "1s 1\n25s 1 2\n".into(), "line 2: expected `DURATION MULTIPLIER`"),
        ("zero.txt", "\n\n0 1\n".into(), "line 3: duration must be above 0"),
        ("neg.txt", "5s -2\n".into(), "line 1: multiplier must be a positive finite number, got -2"),
        ("empty.txt", "# nothing\n\n".into(), "empty.txt: no phases"),
        ("many.txt", "# header\n".to_string() + &"1s 1\n".repeat(MAX_PHASES + 1), "line 10002: more than 10000 phases"),
        ("big.txt", "#".repeat(MAX_FILE_BYTES as usize + 1), "larger than 1048576 bytes"),
    ];
    for (name, text, want) in cases {
        let spec = write(name, &text);
        let e = LoadSchedule::parse(&spec).expect_err(name).to_string();
        assert!(e.contains(want), "{name}: {e}");
        assert!(e.starts_with("load schedule file"), "{e}");
    }
    let e = LoadSchedule::parse("file:/nonexistent/sched.txt").unwrap_err().to_string();
    assert!(e.contains("/nonexistent/sched.txt: cannot open"), "{e}");
}

/// A schedule of 1–12 phases, durations 1 ms–100 s, multipliers 0.01–100.
fn schedules() -> impl Strategy<Value = LoadSchedule> {
    prop::collection::vec((0.001f64..100.0, 0.01f64..100.0), 1..12).prop_map(|v| {
        let phases = v.into_iter().map(|(duration_s, multiplier)| Phase { duration_s, multiplier }).collect();
        LoadSchedule::new("prop", phases).unwrap()
    })
}

proptest! {
    /// Send times never run backwards: sorted trace offsets give
    /// non-decreasing send times, exactly (in floating point), and the warp
    /// inverts ∫ m.
    #[test]
    fn send_times_are_monotone(s in schedules(), mut base in prop::collection::vec(0.0f64..1e5, 1..300)) {
        base.sort_by(f64::total_cmp);
        let walls: Vec<f64> = base.iter().map(|&b| s.wall_time_s(b)).collect();
        for (w, b) in walls.windows(2).zip(base.windows(2)) {
            prop_assert!(w[0] <= w[1], "base {:?} → wall {:?}", b, w);
        }
        for (&b, &w) in base.iter().zip(&walls) {
            prop_assert!((s.work_at_s(w) - b).abs() <= 1e-7 * b.max(1.0), "work_at(wall({b})) = {}", s.work_at_s(w));
        }
        // Around every phase boundary of the first periods too, where rounding bites.
        let per = s.work_per_period_s();
        let mut edges: Vec<f64> = (0..3)
            .flat_map(|n| s.work_s.iter().map(move |&w| f64::from(n) * per + w))
            .flat_map(|at| [at - 1e-9, at, at + 1e-9])
            .collect();
        edges.sort_by(f64::total_cmp);
        let mut last = 0.0;
        for b in edges {
            let t = s.wall_time_s(b);
            prop_assert!(t >= last, "wall({b}) = {t} < {last}");
            last = t;
        }
    }

    /// Over whole periods the mean rate is the mean multiplier × the base
    /// rate, and each phase gets its multiplier × the base rate (± one request
    /// per phase boundary), on an evenly spaced trace.
    #[test]
    fn mean_rate_over_whole_periods(s in schedules(), periods in 1u32..4, per_period in 10.0f64..5000.0) {
        // A base rate giving about `per_period` requests per period.
        let rate = per_period / s.work_per_period_s();
        let n = f64::from(periods);
        let end_s = n * s.period_s();
        let mut count = 0u64;
        let mut by_phase = vec![0u64; s.phases().len()];
        for i in 0u64.. {
            let w = s.wall_time_s(i as f64 / rate);
            if w >= end_s {
                break;
            }
            count += 1;
            by_phase[s.phase_at(w).0] += 1;
        }
        let mean_rate = count as f64 / end_s;
        let want = s.mean_multiplier() * rate;
        // ±1 request (where the last period ends) out of per_period × periods.
        prop_assert!((mean_rate - want).abs() <= 1.0 / end_s + 1e-9 * want, "{mean_rate} vs {want}");
        for (k, p) in s.phases().iter().enumerate() {
            let expect = rate * p.multiplier * p.duration_s * n;
            prop_assert!((by_phase[k] as f64 - expect).abs() <= n + 1.0, "phase {k}: {} vs {expect}", by_phase[k]);
        }
    }
}
