//! Groups (the streams of a connection) under the uplink scheduler: one ranking across
//! every response of every connection, one grant per connection at a time, a closed
//! window or a blocked connection never holding the link.

use proptest::prelude::*;

use super::*;

const MS: u64 = 1_000_000;

fn sched(policy: &str, mode: Mode) -> UplinkScheduler {
    // The scheduler tests' configuration, with room for four connections' groups.
    let config = SchedConfig { max_groups: 4, ..super::tests::config(mode) };
    UplinkScheduler::new(Policy::parse(policy).unwrap(), config).unwrap()
}

fn srpt() -> UplinkScheduler {
    sched("srpt", Mode::WorkConserving)
}

#[test]
fn a_short_stream_goes_before_the_rest_of_a_long_one_on_another_connection() {
    let mut s = srpt();
    let (a, b) = (s.open_group().unwrap(), s.open_group().unwrap());
    let long = s.register_in(a, 1_000_000).unwrap();
    s.set_group_writable(a, true);
    let g = s.next_grant(0).unwrap();
    assert_eq!(g.id, long);
    s.report(0, long, g.bytes, 0, false); // the codec holds its chunk: not writable
    let short = s.register_in(b, 20_000).unwrap();
    let plain = s.register(50_000).unwrap();
    s.set_writable(plain, true);
    s.set_group_writable(a, true);
    assert_eq!(s.next_grant(0), None, "the budget is spent");
    assert_eq!(s.next_grant(10 * MS).unwrap().id, plain, "connection b is not writable yet");
    s.set_group_writable(b, true);
    assert_eq!(s.next_grant(20 * MS).unwrap().id, short, "the shortest of every connection");
    let g = s.next_grant(30 * MS).unwrap();
    assert_eq!(g.id, long, "plain holds a grant; long is what is left");
}

#[test]
fn a_connection_holds_one_grant_at_a_time_and_ranks_its_own_streams() {
    let mut s = srpt();
    let a = s.open_group().unwrap();
    let large = s.register_in(a, 1_000_000).unwrap();
    let small = s.register_in(a, 30_000).unwrap();
    let other = s.register(2_000_000).unwrap();
    s.set_writable(other, true);
    assert_eq!(s.next_grant(0).unwrap().id, other, "a is not writable yet");
    s.set_group_writable(a, true);
    let g = s.next_grant(20 * MS).unwrap();
    assert_eq!(g.id, small, "within a connection, the shortest stream");
    assert_eq!(s.next_grant(40 * MS), None, "one grant per connection: large waits for small's");
    s.report(40 * MS, small, g.bytes, 0, true);
    assert_eq!(s.next_grant(40 * MS).unwrap().id, small, "written, connection still writable: small again");
    s.finish(40 * MS, small);
    assert_eq!(s.next_grant(60 * MS).unwrap().id, large, "small done: large");
    assert_eq!(s.stats().groups, 1);
}

#[test]
fn a_closed_window_never_holds_the_connection_or_the_link() {
    let mut s = srpt();
    let a = s.open_group().unwrap();
    let small = s.register_in(a, 30_000).unwrap();
    let large = s.register_in(a, 1_000_000).unwrap();
    s.set_writable(small, false); // the client keeps its window closed
    s.set_group_writable(a, true);
    let g = s.next_grant(0).unwrap();
    assert_eq!(g.id, large);
    s.report(0, large, g.bytes, 0, true);
    s.set_writable(small, true);
    assert_eq!(s.next_grant(20 * MS).unwrap().id, small, "its window open, the best again");
}

#[test]
fn a_closed_group_gets_nothing_and_is_freed_with_its_last_member() {
    let mut s = srpt();
    let groups: Vec<GroupId> = (0..4).map(|_| s.open_group().unwrap()).collect();
    assert_eq!(s.open_group(), Err(SchedError::GroupsFull { max: 4 }));
    let a = groups[0];
    let x = s.register_in(a, 10_000).unwrap();
    s.set_group_writable(a, true);
    let g = s.next_grant(0).unwrap();
    s.close_group(a);
    assert_eq!(s.register_in(a, 1), Err(SchedError::GroupClosed));
    s.report(0, x, g.bytes / 2, 0, true);
    assert_eq!(s.next_grant(20 * MS), None, "closed: not writable again");
    assert_eq!(s.stats().groups, 4, "still held by its member");
    s.finish(20 * MS, x);
    assert_eq!(s.stats().groups, 3);
    let reused = s.open_group().unwrap();
    assert_eq!(reused.index(), a.index());
    assert_ne!(reused, a, "a new generation");
    // A group closed while a member holds a grant: the grant is refunded at its finish.
    let y = s.register_in(reused, 5_000).unwrap();
    s.set_group_writable(reused, true);
    let g = s.next_grant(40 * MS).unwrap();
    assert_eq!(g.id, y);
    let refunded = s.stats().refunded_bytes;
    s.close_group(reused);
    s.finish(40 * MS, y);
    assert_eq!(s.stats().refunded_bytes, refunded + g.bytes);
    assert_eq!((s.stats().groups, s.stats().registered, s.stats().ready), (3, 0, 0));
}

#[test]
fn fair_shares_bytes_between_the_streams_of_a_connection_and_other_connections() {
    let mut s = sched("fair", Mode::WorkConserving);
    let a = s.open_group().unwrap();
    let streams = [s.register_in(a, 10_000_000).unwrap(), s.register_in(a, 10_000_000).unwrap()];
    let plain = s.register(10_000_000).unwrap();
    s.set_writable(plain, true);
    s.set_group_writable(a, true);
    let mut bytes = [0u64; 3];
    for t in 0..300 {
        while let Some(g) = s.next_grant(t * MS) {
            let i = if g.id == plain { 2 } else { streams.iter().position(|&x| x == g.id).unwrap() };
            bytes[i] += g.bytes;
            s.report(t * MS, g.id, g.bytes, 0, i == 2);
            if i < 2 {
                s.set_group_writable(a, true); // the codec wrote the chunk
            }
        }
    }
    let (lo, hi) = (bytes.iter().min().unwrap(), bytes.iter().max().unwrap());
    assert!(hi - lo <= 2 * s.quantum_bytes(), "fair drifted apart: {bytes:?}");
}

#[test]
fn limited_concurrency_admits_streams_one_by_one() {
    let mut s = sched("srpt", Mode::LimitedConcurrency { writers: 1 });
    let a = s.open_group().unwrap();
    let first = s.register_in(a, 100_000).unwrap();
    let second = s.register_in(a, 1_000).unwrap();
    s.set_group_writable(a, true);
    assert_eq!(s.stats().waiting, 1);
    let g = s.next_grant(0).unwrap();
    assert_eq!(g.id, first, "the one admitted, though longer");
    s.report(0, first, g.bytes, 0, true);
    s.finish(0, first);
    assert_eq!(s.next_grant(20 * MS).unwrap().id, second);
}

#[test]
fn a_turn_carries_a_connections_small_streams_within_the_quantum_best_first() {
    // Look-ahead enough for more than a quantum, so the quantum ends the turn.
    let mut config = SchedConfig { max_groups: 4, ..super::tests::config(Mode::WorkConserving) };
    config.pacer.lookahead_ns = 40 * MS;
    let mut s = UplinkScheduler::new(Policy::parse("srpt").unwrap(), config).unwrap();
    let (a, b) = (s.open_group().unwrap(), s.open_group().unwrap());
    let sizes = [9_000u64, 1_000, 4_000, 3_000, 500];
    let streams: Vec<ConnId> = sizes.iter().map(|&n| s.register_in(a, n).unwrap()).collect();
    let closed = s.register_in(a, 200).unwrap();
    s.set_writable(closed, false); // its window is closed: never part of a turn
    let other = s.register_in(b, 100).unwrap();
    s.set_group_writable(a, true);
    let first = s.next_grant(0).unwrap();
    assert_eq!((first.id, first.bytes), (streams[4], 500), "the shortest of connection a");
    assert_eq!(s.grant_in_group(0, a, 500), None, "a member holds the grant");
    s.report(0, first.id, 500, 0, false);
    let mut turn = vec![first.bytes];
    let mut order = vec![first.id];
    while let Some(g) = s.grant_in_group(0, a, turn.iter().sum()) {
        assert_eq!(s.grant_in_group(0, a, 0), None, "one grant at a time");
        turn.push(g.bytes);
        order.push(g.id);
        s.report(0, g.id, g.bytes, 0, false);
    }
    assert_eq!(order, [streams[4], streams[1], streams[3], streams[2], streams[0]], "best first");
    let quantum = s.quantum_bytes();
    assert_eq!(turn.iter().sum::<u64>(), quantum.min(sizes.iter().sum()), "{turn:?}");
    assert!(s.app_remaining(streams[0]).unwrap() > 0, "the last one cut at the quantum");
    assert_eq!(s.app_remaining(closed), Some(200));
    // The turn ends; connection b, not writable, was never granted; a is writable again.
    s.set_group_writable(b, true);
    s.set_group_writable(a, true);
    assert_eq!(s.next_grant(40 * MS).unwrap().id, other, "b's stream, shorter than a's rest");
}

#[test]
fn a_turn_waits_for_the_pacer_as_a_grant_does() {
    let mut s = srpt();
    let a = s.open_group().unwrap();
    let streams: Vec<ConnId> = (0..64).map(|_| s.register_in(a, 1_000).unwrap()).collect();
    s.set_group_writable(a, true);
    let (mut granted, mut turn) = (0, 0);
    if let Some(g) = s.next_grant(0) {
        s.report(0, g.id, g.bytes, 0, false);
        (granted, turn) = (1, g.bytes);
        while let Some(g) = s.grant_in_group(0, a, turn) {
            s.report(0, g.id, g.bytes, 0, false);
            (granted, turn) = (granted + 1, turn + g.bytes);
        }
    }
    // 8 Mbit/s with 4 ms of look-ahead: 4,000 bytes of budget at time 0, 1,000 a stream.
    assert!(granted >= 1 && turn <= 4_000 + 1_000, "{granted} grants, {turn} bytes");
    assert!(granted < streams.len(), "the pacer's budget bounds a turn");
}

#[derive(Clone, Debug)]
enum Op {
    /// A response in group `g` (or alone when `g` ≥ 3) of this size.
    Register(usize, u64),
    /// Entry `i` writable (alone) or its window open (in a group).
    Writable(usize, bool),
    GroupWritable(usize, bool),
    /// Advance time, then grant what is allowed: each grant written in quarters; the
    /// connection takes bytes again at once or not.
    Tick(u64, u8, bool),
    Finish(usize),
    Close(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0usize..5, 1u64..2_000_000).prop_map(|(g, b)| Op::Register(g, b)),
        (0usize..20, any::<bool>()).prop_map(|(i, w)| Op::Writable(i, w)),
        (0usize..3, any::<bool>()).prop_map(|(g, w)| Op::GroupWritable(g, w)),
        (0u64..5_000, 0u8..=4, any::<bool>()).prop_map(|(d, q, w)| Op::Tick(d, q, w)),
        (0usize..20).prop_map(Op::Finish),
        (0usize..3).prop_map(Op::Close),
    ]
}

/// The test's own view of an entry: its group (by position) and whether it can take
/// bytes by itself.
struct Model {
    id: ConnId,
    group: Option<usize>,
    writable: bool,
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// Against a model: every grant goes to an entry that can take bytes (itself, and
    /// its group writable, open and holding no grant), under srpt to the least remaining
    /// of all such entries; a connection never holds two grants; the scheduler's sets
    /// empty when everything finishes.
    #[test]
    fn grants_follow_srpt_across_every_stream_of_every_connection(ops in proptest::collection::vec(op(), 1..300)) {
        let mut s = srpt();
        let groups: Vec<GroupId> = (0..3).map(|_| s.open_group().unwrap()).collect();
        let (mut group_writable, mut closed) = ([false; 3], [false; 3]);
        let mut entries: Vec<Model> = Vec::new();
        let mut now = 0;
        for op in &ops {
            match *op {
                Op::Register(g, size) => {
                    let id = if g < 3 { s.register_in(groups[g], size) } else { s.register(size) };
                    if let Ok(id) = id {
                        entries.push(Model { id, group: (g < 3).then_some(g), writable: g < 3 });
                    }
                }
                Op::Writable(i, w) if i < entries.len() && s.app_remaining(entries[i].id).is_some() => {
                    s.set_writable(entries[i].id, w);
                    entries[i].writable = w;
                }
                Op::GroupWritable(g, w) if !closed[g] => {
                    s.set_group_writable(groups[g], w);
                    group_writable[g] = w;
                }
                Op::Close(g) if !closed[g] => {
                    s.close_group(groups[g]);
                    (closed[g], group_writable[g]) = (true, false);
                }
                Op::Tick(d_us, quarters, still) => {
                    now += d_us * 1_000;
                    let mut busy = [false; 3];
                    while let Some(g) = s.next_grant(now) {
                        let i = entries.iter().position(|e| e.id == g.id).expect("a registered entry");
                        let e = &entries[i];
                        prop_assert!(e.writable, "granted an entry that cannot take bytes");
                        if let Some(k) = e.group {
                            prop_assert!(group_writable[k] && !busy[k], "group {k}: not writable or busy");
                            busy[k] = true;
                        }
                        let granted = s.app_remaining(g.id).unwrap();
                        for other in &entries {
                            let Some(r) = s.app_remaining(other.id) else { continue };
                            let could = other.writable && other.group.is_none_or(|k| group_writable[k] && !busy[k]);
                            prop_assert!(!could || r == 0 || r >= granted, "granted {granted} while {r} could send");
                        }
                        let written = g.bytes * u64::from(quarters) / 4;
                        let w = still && written == g.bytes;
                        s.report(now, g.id, written, 0, w);
                        match e.group {
                            Some(k) => { group_writable[k] = w && !closed[k]; busy[k] = false; }
                            None => entries[i].writable = w,
                        }
                        // A member that took its whole grant: the rest of the turn, within
                        // the quantum, to the best of its own connection's open members.
                        let Some(k) = entries[i].group.filter(|_| written == g.bytes) else { continue };
                        let mut turn = g.bytes;
                        while let Some(t) = s.grant_in_group(now, groups[k], turn) {
                            let j = entries.iter().position(|e| e.id == t.id).expect("a registered entry");
                            prop_assert_eq!(entries[j].group, Some(k), "a turn stays in its connection");
                            prop_assert!(entries[j].writable, "a turn granted a closed window");
                            prop_assert!(turn + t.bytes <= s.quantum_bytes(), "a turn beyond the quantum");
                            let got = s.app_remaining(t.id).unwrap();
                            for other in entries.iter().filter(|e| e.group == Some(k) && e.writable) {
                                let r = s.app_remaining(other.id).unwrap_or(0);
                                prop_assert!(r == 0 || r >= got, "turn granted {} while {} of its own could send", got, r);
                            }
                            turn += t.bytes;
                            s.report(now, t.id, t.bytes, 0, false);
                            group_writable[k] = false;
                        }
                    }
                }
                Op::Finish(i) if i < entries.len() && s.app_remaining(entries[i].id).is_some() => {
                    s.finish(now, entries[i].id);
                }
                _ => {}
            }
        }
        for e in &entries {
            if s.app_remaining(e.id).is_some() {
                s.finish(now, e.id);
            }
        }
        for (g, &c) in groups.iter().zip(&closed) {
            if !c {
                s.close_group(*g);
            }
        }
        let st = s.stats();
        prop_assert_eq!((st.registered, st.ready, st.groups), (0, 0, 0));
    }
}
