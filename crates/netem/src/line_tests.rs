use proptest::prelude::*;

use super::*;

const MS: u64 = 1_000_000;

fn drain_all(line: &mut DelayLine<u64>) -> Vec<Released<u64>> {
    let mut out = Vec::new();
    while let Some(r) = line.pop_due(u64::MAX) {
        out.push(r);
    }
    out
}

/// (arrival ms, size) -> release ms, for fixed parameters.
#[test]
fn table_of_release_times() {
    struct Case {
        name: &'static str,
        params: LineParams,
        arrivals: Vec<(u64, u32)>,
        want_ms: Vec<u64>,
    }
    let rate = |bits| LineParams { rate_bits_per_s: Some(bits), ..LineParams::delay(10 * MS) };
    let cases = vec![
        Case {
            name: "plain delay",
            params: LineParams::delay(25 * MS),
            arrivals: vec![(0, 1500), (1, 1500), (7, 40)],
            want_ms: vec![25, 26, 32],
        },
        Case {
            name: "zero delay releases at arrival",
            params: LineParams::delay(0),
            arrivals: vec![(3, 100), (3, 100)],
            want_ms: vec![3, 3],
        },
        Case {
            // 1500 B at 1.2 Mbit/s = 10 ms on the wire each.
            name: "rate serialises back to back, then delays",
            params: rate(1_200_000),
            arrivals: vec![(0, 1500), (0, 1500), (5, 1500), (100, 1500)],
            want_ms: vec![20, 30, 40, 120],
        },
    ];
    for c in cases {
        let mut line = DelayLine::new(c.params, 1, 0);
        let got: Vec<u64> = c
            .arrivals
            .iter()
            .enumerate()
            .map(|(i, (t, size))| line.offer(t * MS, *size, i as u64).unwrap() / MS)
            .collect();
        assert_eq!(got, c.want_ms, "{}", c.name);
    }
}

#[test]
fn pop_due_respects_time_and_counts() {
    let mut line = DelayLine::new(LineParams::delay(10 * MS), 1, 0);
    line.offer(0, 100, 1u64).unwrap();
    line.offer(MS, 200, 2).unwrap();
    assert_eq!(line.next_release_ns(), Some(10 * MS));
    assert_eq!(line.pop_due(10 * MS - 1), None);
    assert_eq!(line.pop_due(10 * MS).unwrap().payload, 1);
    assert_eq!(line.pop_due(10 * MS), None);
    assert_eq!(line.queued_bytes(), 200);
    assert_eq!(line.pop_due(11 * MS).unwrap().payload, 2);
    let c = line.counters();
    assert_eq!((c.rx_packets, c.rx_bytes, c.tx_packets, c.tx_bytes), (2, 300, 2, 300));
    assert_eq!(c.max_queued_packets, 2);
    assert_eq!(c.max_queued_bytes, 300);
}

#[test]
fn queue_limits_drop_and_count() {
    let params = LineParams { queue_packets: 2, queue_bytes: 2_500, ..LineParams::delay(MS) };
    let mut line = DelayLine::new(params, 1, 0);
    assert!(line.offer(0, 1000, 0u64).is_ok());
    assert!(line.offer(0, 1000, 1).is_ok());
    assert_eq!(line.offer(0, 10, 2).unwrap_err(), Dropped { cause: DropCause::QueuePackets, payload: 2 });
    line.pop_due(MS).unwrap();
    assert_eq!(line.offer(0, 1600, 3).unwrap_err(), Dropped { cause: DropCause::QueueBytes, payload: 3 });
    assert!(line.offer(0, 1500, 4).is_ok());
    let c = line.counters();
    assert_eq!((c.dropped_queue_packets, c.dropped_queue_bytes, c.dropped_loss), (1, 1, 0));
}

#[test]
fn fifo_jitter_never_reorders_but_reorder_mode_does() {
    let jittery = |mode| LineParams { jitter_ns: 10 * MS, mode, ..LineParams::delay(20 * MS) };
    let mut fifo = DelayLine::new(jittery(JitterMode::Fifo), 3, 0);
    let mut reorder = DelayLine::new(jittery(JitterMode::Reorder), 3, 0);
    for i in 0..2_000u64 {
        fifo.offer(i * 100_000, 1500, i).unwrap();
        reorder.offer(i * 100_000, 1500, i).unwrap();
    }
    let f: Vec<u64> = drain_all(&mut fifo).into_iter().map(|r| r.payload).collect();
    assert!(f.windows(2).all(|w| w[0] < w[1]));
    let r: Vec<u64> = drain_all(&mut reorder).into_iter().map(|r| r.payload).collect();
    let inversions = r.windows(2).filter(|w| w[0] > w[1]).count();
    assert!(inversions > 100, "reorder mode reordered only {inversions} times");
}

#[test]
fn uniform_jitter_spans_its_range_with_the_right_mean() {
    let params = LineParams { jitter_ns: 10 * MS, mode: JitterMode::Reorder, ..LineParams::delay(50 * MS) };
    let mut line = DelayLine::new(params, 9, 0);
    let delays: Vec<f64> = (0..20_000u64).map(|i| (line.offer(0, 100, i).unwrap()) as f64 / MS as f64).collect();
    let min = delays.iter().copied().fold(f64::MAX, f64::min);
    let max = delays.iter().copied().fold(0.0, f64::max);
    let mean = delays.iter().sum::<f64>() / delays.len() as f64;
    assert!((40.0..40.1).contains(&min) && (59.9..=60.0).contains(&max), "{min} {max}");
    assert!((mean - 50.0).abs() < 0.2, "mean {mean}");
}

#[test]
fn normal_jitter_has_its_sd_and_never_goes_negative() {
    let params = LineParams {
        jitter_ns: 5 * MS,
        jitter_dist: JitterDist::Normal,
        mode: JitterMode::Reorder,
        ..LineParams::delay(50 * MS)
    };
    let mut line = DelayLine::new(params, 9, 0);
    let d: Vec<f64> = (0..20_000u64).map(|i| line.offer(0, 100, i).unwrap() as f64 / MS as f64).collect();
    let mean = d.iter().sum::<f64>() / d.len() as f64;
    let sd = (d.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / d.len() as f64).sqrt();
    assert!((mean - 50.0).abs() < 0.2 && (sd - 5.0).abs() < 0.2, "{mean} {sd}");
    let params = LineParams { jitter_ns: 10 * MS, jitter_dist: JitterDist::Normal, ..LineParams::delay(MS) };
    let mut line = DelayLine::new(params, 9, 0);
    for i in 0..1000u64 {
        assert!(line.offer(MS * i, 100, i).unwrap() >= MS * i);
    }
}

/// The realised loss rate is within a 99.9% binomial interval of p.
#[test]
fn bernoulli_loss_rate() {
    for p in [0.0, 0.01, 0.05, 0.3] {
        let mut line = DelayLine::new(LineParams { loss: LossModel::bernoulli(p), ..LineParams::delay(0) }, 11, 4);
        let n = 100_000u64;
        for i in 0..n {
            let _ = line.offer(i, 100, i);
            line.pop_due(u64::MAX);
        }
        let lost = line.counters().dropped_loss as f64;
        let half_width = 3.3 * (p * (1.0 - p) * n as f64).sqrt();
        assert!((lost - p * n as f64).abs() <= half_width, "p={p}: lost {lost} of {n}");
    }
}

#[test]
fn gilbert_loss_is_bursty_with_the_stationary_mean() {
    let model = LossModel::Gilbert { p: 0.01, r: 0.2, loss_good: 0.0, loss_bad: 1.0 };
    let mut line = DelayLine::new(LineParams { loss: model, ..LineParams::delay(0) }, 5, 0);
    let n = 200_000u64;
    let mut lost = Vec::with_capacity(n as usize);
    for i in 0..n {
        lost.push(line.offer(i, 100, i).is_err());
        line.pop_due(u64::MAX);
    }
    let rate = lost.iter().filter(|l| **l).count() as f64 / n as f64;
    assert!((rate - model.mean()).abs() < 0.01, "rate {rate} vs {}", model.mean());
    // Mean burst length of a bad state that always loses is 1/r = 5.
    let bursts = lost.windows(2).filter(|w| !w[0] && w[1]).count() as f64;
    let mean_burst = lost.iter().filter(|l| **l).count() as f64 / bursts;
    assert!((mean_burst - 5.0).abs() < 0.5, "mean burst {mean_burst}");
}

#[test]
fn same_seed_same_decisions_other_stream_differs() {
    let params = LineParams { loss: LossModel::bernoulli(0.2), jitter_ns: MS, ..LineParams::delay(10 * MS) };
    let run = |stream| {
        let mut line = DelayLine::new(params.clone(), 42, stream);
        (0..500u64).map(|i| line.offer(i * MS, 100, i).ok()).collect::<Vec<_>>()
    };
    assert_eq!(run(0), run(0));
    assert_ne!(run(0), run(2));
}

#[test]
fn loss_pattern_does_not_depend_on_jitter() {
    let lost = |jitter_ns| {
        let p = LineParams { loss: LossModel::bernoulli(0.1), jitter_ns, ..LineParams::delay(10 * MS) };
        let mut line = DelayLine::new(p, 42, 0);
        (0..500u64).map(|i| line.offer(i * MS, 100, i).is_err()).collect::<Vec<_>>()
    };
    assert_eq!(lost(0), lost(3 * MS));
}

#[test]
fn drain_empties_the_line() {
    let mut line = DelayLine::new(LineParams::delay(MS), 1, 0);
    line.offer(0, 10, 1u64).unwrap();
    line.offer(0, 10, 2).unwrap();
    assert_eq!(line.drain(), vec![1, 2]);
    assert_eq!((line.queued_packets(), line.queued_bytes()), (0, 0));
}

fn arb_params() -> impl Strategy<Value = LineParams> {
    (
        0u64..200,
        0u64..50,
        prop::bool::ANY,
        prop::bool::ANY,
        0.0f64..0.5,
        prop::option::of(100_000u64..100_000_000),
        1usize..50,
    )
        .prop_map(|(delay_ms, jitter_pct, reorder, normal, loss, rate, qp)| {
            let delay_ns = delay_ms * MS;
            LineParams {
                delay_ns,
                jitter_ns: delay_ns * jitter_pct / 100,
                jitter_dist: if normal { JitterDist::Normal } else { JitterDist::Uniform },
                mode: if reorder { JitterMode::Reorder } else { JitterMode::Fifo },
                loss: LossModel::bernoulli(loss),
                rate_bits_per_s: rate,
                queue_packets: qp,
                queue_bytes: 40_000,
            }
        })
}

proptest! {
    /// Feeding packets and popping at arbitrary times: every packet is
    /// released exactly once or counted dropped; none leaves before it is
    /// due, nor before arrival + delay - jitter (normal: before arrival);
    /// fifo mode keeps arrival order.
    #[test]
    fn conservation_order_and_earliest_release(
        params in arb_params(),
        seed in 0u64..1000,
        steps in prop::collection::vec((0u64..5 * MS, 40u32..1500, prop::bool::ANY), 1..300),
    ) {
        let mut line = DelayLine::new(params.clone(), seed, 0);
        let mut now = 0u64;
        let mut arrival = Vec::new();
        let mut released: Vec<(u64, u64)> = Vec::new(); // (seq, at)
        let mut dropped = 0u64;
        for (i, (gap, size, pop)) in steps.iter().enumerate() {
            now += gap;
            arrival.push(now);
            match line.offer(now, *size, i as u64) {
                Ok(at) => prop_assert!(at >= now),
                Err(d) => { prop_assert_eq!(d.payload, i as u64); dropped += 1; }
            }
            if *pop {
                while let Some(r) = line.pop_due(now) {
                    prop_assert!(r.release_ns <= now);
                    released.push((r.payload, r.release_ns));
                }
            }
        }
        while let Some(r) = line.pop_due(u64::MAX) {
            released.push((r.payload, r.release_ns));
        }
        let n = steps.len() as u64;
        prop_assert_eq!(released.len() as u64 + dropped, n);
        let c = *line.counters();
        prop_assert_eq!(c.rx_packets, n);
        prop_assert_eq!(c.tx_packets + c.dropped(), n);
        prop_assert_eq!(line.queued_bytes(), 0);
        let mut seen = std::collections::HashSet::new();
        for (seq, at) in &released {
            prop_assert!(seen.insert(*seq));
            let a = arrival[*seq as usize];
            let floor = match params.jitter_dist {
                JitterDist::Uniform => a + params.delay_ns - params.jitter_ns,
                JitterDist::Normal => a,
            };
            prop_assert!(*at >= floor, "released {at} < floor {floor}");
            if params.jitter_ns == 0 {
                prop_assert!(*at >= a + params.delay_ns);
            }
        }
        if params.mode == JitterMode::Fifo {
            prop_assert!(released.windows(2).all(|w| w[0].0 < w[1].0), "fifo reordered");
        }
    }
}
