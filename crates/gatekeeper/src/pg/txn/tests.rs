//! Scripts of messages in, steps out.
use super::*;
use crate::pg::frame::next_frame;
use bytes::BytesMut;
use postgres_protocol::message::frontend;
use proptest::prelude::*;

/// One message of a script: from the client (encoded with postgres-protocol) or the server.
#[derive(Debug, Clone)]
enum M {
    Q(&'static str),
    P(&'static str, &'static str),
    B(&'static str, &'static str),
    E(&'static str),
    S,
    H,
    CopyData,
    CopyDone,
    CopyFail,
    /// Server: ReadyForQuery with a status.
    Z(u8),
    /// Server: CommandComplete.
    C,
    /// Server: CopyInResponse.
    G,
    /// Server: ErrorResponse.
    Err,
    /// Server: NotificationResponse.
    A,
}

fn client_frame(m: &M) -> Option<Bytes> {
    let mut b = BytesMut::new();
    match m {
        M::Q(sql) => frontend::query(sql, &mut b).unwrap(),
        M::P(name, sql) => frontend::parse(name, sql, [], &mut b).unwrap(),
        M::B(portal, st) => frontend::bind(
            portal,
            st,
            std::iter::empty::<i16>(),
            std::iter::empty::<()>(),
            |_: (), _| Ok(postgres_protocol::IsNull::Yes),
            std::iter::empty::<i16>(),
            &mut b,
        )
        .map_err(|_| ())
        .unwrap(),
        M::E(portal) => frontend::execute(portal, 0, &mut b).unwrap(),
        M::S => frontend::sync(&mut b),
        M::H => frontend::flush(&mut b),
        M::CopyData => b.extend_from_slice(&[b'd', 0, 0, 0, 6, b'1', b'\n']),
        M::CopyDone => frontend::copy_done(&mut b),
        M::CopyFail => frontend::copy_fail("no", &mut b).unwrap(),
        _ => return None,
    }
    Some(b.freeze())
}

fn server_msg(m: &M) -> (u8, Vec<u8>) {
    match m {
        M::Z(s) => (b'Z', vec![*s]),
        M::C => (b'C', b"SELECT 1\0".to_vec()),
        M::G => (b'G', vec![0, 0, 0]),
        M::Err => (b'E', b"SERROR\0C42601\0Msyntax\0\0".to_vec()),
        M::A => (b'A', [&[0, 0, 0, 9][..], b"ch\0hi\0"].concat()),
        other => panic!("{other:?} is not a server message"),
    }
}

/// Runs a script; returns one word per message: fwd, start, answer, swallow, end.
fn run(t: &mut Tracker, script: &[M]) -> Vec<String> {
    script
        .iter()
        .map(|m| match client_frame(m) {
            Some(frame) => {
                let f = next_frame(&mut BytesMut::from(&frame[..]), 1 << 20).unwrap().unwrap();
                match t.on_client(f.tag(), f.body(), &f.bytes).unwrap() {
                    ClientStep::Forward => "fwd".to_owned(),
                    ClientStep::Start { held: None, .. } => "start".to_owned(),
                    ClientStep::Start { held: Some(_), .. } => "start+begin".to_owned(),
                    ClientStep::Answer(_) => "answer".to_owned(),
                    ClientStep::Drop => "drop".to_owned(),
                }
            }
            None => {
                let (tag, body) = server_msg(m);
                match t.on_server(tag, &body).unwrap() {
                    ServerStep::Forward => "fwd",
                    ServerStep::Swallow => "swallow",
                    ServerStep::ForwardAndEnd => "end",
                }
                .to_owned()
            }
        })
        .collect()
}

fn tracker() -> Tracker {
    Tracker::new(TypeSource::default(), None, 4)
}

fn check(script: &[M], want: &str) {
    let mut t = tracker();
    assert_eq!(run(&mut t, script).join(" "), want, "{script:?}");
    assert!(!t.in_transaction(), "every script ends idle: {script:?}");
}

#[test]
fn autocommit_simple_query() {
    check(&[M::Q("SELECT 1"), M::C, M::Z(b'I')], "start fwd end");
}

#[test]
fn multi_statement_simple_query_is_one_transaction() {
    check(&[M::Q("SELECT 1; SELECT 2; SELECT 3"), M::C, M::C, M::C, M::Z(b'I')], "start fwd fwd fwd end");
}

#[test]
fn deferred_begin_then_statement_then_commit() {
    check(
        &[M::Q("BEGIN"), M::Q("SELECT 1"), M::C, M::Z(b'T'), M::C, M::Z(b'T'), M::Q("COMMIT"), M::C, M::Z(b'I')],
        "answer start+begin swallow swallow fwd fwd fwd fwd end",
    );
}

#[test]
fn the_first_real_statement_gives_the_type() {
    let mut t = tracker();
    let f = client_frame(&M::Q("BEGIN ISOLATION LEVEL SERIALIZABLE")).unwrap();
    assert!(matches!(t.on_client(b'Q', &f[5..], &f).unwrap(), ClientStep::Answer(_)));
    let f = client_frame(&M::Q("SELECT * FROM t /*route='orders'*/")).unwrap();
    match t.on_client(b'Q', &f[5..], &f).unwrap() {
        ClientStep::Start { ty, held: Some(held) } => {
            assert_eq!(ty, RequestType::Tag("orders".into()));
            assert_eq!(&held[5..], b"BEGIN ISOLATION LEVEL SERIALIZABLE\0");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn empty_deferred_blocks_are_answered_locally() {
    check(&[M::Q("BEGIN"), M::Q("COMMIT")], "answer answer");
    check(&[M::Q("BEGIN"), M::S, M::Q("rollback")], "answer answer answer");
}

#[test]
fn error_in_a_block_waits_for_rollback() {
    check(
        &[M::Q("BEGIN"), M::Q("SELEC 1"), M::C, M::Z(b'T'), M::Err, M::Z(b'E'), M::Q("ROLLBACK"), M::C, M::Z(b'I')],
        "answer start+begin swallow swallow fwd fwd fwd fwd end",
    );
}

#[test]
fn extended_protocol_and_pipelining() {
    // Prepare alone (Parse, Describe-less, Sync) is not admitted.
    check(&[M::P("s1", "SELECT $1"), M::S, M::Z(b'I')], "fwd fwd fwd");
    // Two pipelined executions end when both are answered.
    check(
        &[M::B("", "s1"), M::E(""), M::S, M::B("", "s1"), M::E(""), M::S, M::C, M::Z(b'I'), M::C, M::Z(b'I')],
        "start fwd fwd fwd fwd fwd fwd fwd fwd end",
    );
    // No Sync yet: the batch is open, an earlier Z does not end it.
    check(
        &[M::P("", "SELECT 1"), M::S, M::B("", ""), M::E(""), M::Z(b'I'), M::H, M::C, M::S, M::Z(b'I')],
        "fwd fwd start fwd fwd fwd fwd fwd end",
    );
}

#[test]
fn copy_in_extended_ignores_the_syncs_sent_during_copy() {
    // tokio-postgres: Bind Execute Sync, then data, CopyDone Sync.
    check(
        &[M::B("", ""), M::E(""), M::S, M::G, M::CopyData, M::CopyDone, M::S, M::C, M::Z(b'I')],
        "start fwd fwd fwd fwd fwd fwd fwd end",
    );
    check(
        &[M::B("", ""), M::E(""), M::S, M::G, M::CopyFail, M::S, M::Err, M::Z(b'I')],
        "start fwd fwd fwd fwd fwd fwd end",
    );
    check(&[M::Q("COPY t FROM STDIN"), M::G, M::CopyData, M::CopyDone, M::C, M::Z(b'I')], "start fwd fwd fwd fwd end");
}

#[test]
fn notifications_pass_while_a_begin_answer_is_swallowed() {
    check(
        &[M::Q("BEGIN"), M::Q("SELECT 1"), M::A, M::C, M::Z(b'T'), M::C, M::Z(b'T'), M::Q("END"), M::C, M::Z(b'I')],
        "answer start+begin fwd swallow swallow fwd fwd fwd fwd end",
    );
}

#[test]
fn the_statement_table_is_bounded() {
    let mut t = tracker();
    let names = ["a", "b", "c", "d", "e", "f"];
    for n in names {
        let f = client_frame(&M::P(n, "SELECT 1")).unwrap();
        t.on_client(b'P', &f[5..], &f).unwrap();
    }
    assert_eq!(t.statements.len(), 4);
    let f = client_frame(&M::B("", "f")).unwrap();
    match t.on_client(b'B', &f[5..], &f).unwrap() {
        ClientStep::Start { ty, .. } => assert_eq!(ty, RequestType::Unknown),
        other => panic!("{other:?}"),
    }
}

/// One client request and the server's answers, as a well-behaved session makes them.
fn exchange(kind: u8) -> Vec<M> {
    match kind % 6 {
        0 => vec![M::Q("SELECT 1"), M::C, M::Z(b'I')],
        1 => vec![
            M::Q("BEGIN"),
            M::Q("UPDATE t SET a = 1"),
            M::C,
            M::Z(b'T'),
            M::C,
            M::Z(b'T'),
            M::Q("COMMIT"),
            M::C,
            M::Z(b'I'),
        ],
        2 => vec![M::P("", "SELECT 1"), M::B("", ""), M::E(""), M::S, M::C, M::Z(b'I')],
        3 => vec![M::Q("SELECT 1; SELECT 2"), M::C, M::A, M::C, M::Z(b'I')],
        4 => vec![M::B("", ""), M::E(""), M::S, M::G, M::CopyData, M::CopyDone, M::S, M::C, M::Z(b'I')],
        _ => {
            vec![M::Q("BEGIN"), M::Q("SELEC"), M::C, M::Z(b'T'), M::Err, M::Z(b'E'), M::Q("ROLLBACK"), M::C, M::Z(b'I')]
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, rng_seed: proptest::test_runner::RngSeed::Fixed(5), ..ProptestConfig::default() })]

    /// Any sequence of exchanges: every start has exactly one end, at the exchange's
    /// last message, and no transaction is open between exchanges.
    #[test]
    fn every_start_ends_once_at_idle(kinds in proptest::collection::vec(0u8..6, 1..20)) {
        let mut t = tracker();
        for k in kinds {
            let steps = run(&mut t, &exchange(k));
            let starts = steps.iter().filter(|s| s.starts_with("start")).count();
            prop_assert_eq!(starts, 1, "{:?}", steps);
            prop_assert_eq!(steps.iter().filter(|s| *s == "end").count(), 1, "{:?}", steps);
            prop_assert_eq!(steps.last().map(String::as_str), Some("end"), "{:?}", steps);
            prop_assert!(!t.in_transaction());
        }
    }

    /// Pipelined autocommit queries: all sent first, then all answered: one transaction.
    #[test]
    fn a_pipeline_is_one_unit(n in 1usize..10) {
        let mut t = tracker();
        let mut script: Vec<M> = (0..n).map(|_| M::Q("SELECT 1")).collect();
        for _ in 0..n {
            script.extend([M::C, M::Z(b'I')]);
        }
        let steps = run(&mut t, &script);
        prop_assert_eq!(steps.iter().filter(|s| *s == "end").count(), 1);
        prop_assert_eq!(steps.last().map(String::as_str), Some("end"));
    }
}

/// The step words of `script` after `refuse` with the tracker marked before `batch`.
fn refused(before: &[M], batch: &[M], to_sync: bool, after: &[M]) -> (Tracker, String, Vec<u8>, String) {
    let mut t = tracker();
    run(&mut t, before);
    let mark = t.mark();
    run(&mut t, batch);
    let answer = t.refuse(mark, Bytes::from_static(b"E..."), to_sync);
    let tail = answer.last().copied().filter(|_| to_sync).map_or(String::new(), |z| (z as char).to_string());
    let words = run(&mut t, after).join(" ");
    (t, tail, answer.to_vec(), words)
}

#[test]
fn a_refused_autocommit_batch_leaves_the_session_idle() {
    let batch = [M::P("", "SELECT 1"), M::B("", ""), M::E(""), M::S];
    let (t, status, _, words) = refused(&[], &batch, true, &[M::Q("SELECT 2"), M::C, M::Z(b'I')]);
    assert_eq!(status, "I");
    assert_eq!(words, "start fwd end");
    assert!(!t.in_transaction());
    let (_, status, _, words) = refused(&[], &[M::Q("SELECT 1")], true, &batch);
    assert_eq!((status.as_str(), words.as_str()), ("I", "fwd start fwd fwd"));
}

#[test]
fn a_refused_transaction_after_a_deferred_begin_fails_the_block_until_its_end() {
    let (mut t, status, _, words) = refused(
        &[M::Q("BEGIN")],
        &[M::Q("SELECT 1")],
        true,
        &[M::Q("SELECT 2"), M::P("", "SELECT 3"), M::B("", ""), M::S, M::Q("COMMIT")],
    );
    assert_eq!(status, "E");
    // In the failed block: an error per statement, the extended batch skipped to its Sync
    // (answered 'E'), COMMIT answered ROLLBACK; all locally.
    assert_eq!(words, "answer answer drop answer answer");
    assert!(!t.in_transaction() && !t.waiting_on_client());
    assert_eq!(run(&mut t, &[M::Q("SELECT 4"), M::C, M::Z(b'I')]).join(" "), "start fwd end");
    run(&mut t, &[M::Q("BEGIN")]);
    let mark = t.mark();
    run(&mut t, &[M::Q("SELECT 5")]);
    t.refuse(mark, Bytes::new(), true);
    let f = client_frame(&M::Q("COMMIT")).unwrap();
    match t.on_client(b'Q', &f[5..], &f).unwrap() {
        ClientStep::Answer(a) => assert!(a.windows(9).any(|w| w == b"ROLLBACK\0") && a.ends_with(b"I")),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_batch_refused_at_a_flush_skips_to_its_sync() {
    let (t, _, answer, words) =
        refused(&[], &[M::P("", "SELECT 1"), M::B("", ""), M::H], false, &[M::E(""), M::S, M::Q("SELECT 2")]);
    assert_eq!(answer, b"E...", "the error alone, ReadyForQuery at the Sync");
    assert_eq!(words, "drop answer start");
    assert!(t.in_transaction());
}

#[test]
fn the_server_answering_earlier_work_during_the_wait_still_counts() {
    let mut t = tracker();
    // A prepare forwarded, its ReadyForQuery still owed.
    assert_eq!(run(&mut t, &[M::P("s", "SELECT 1"), M::S]).join(" "), "fwd fwd");
    let mark = t.mark();
    assert_eq!(run(&mut t, &[M::Q("SELECT 2")]).join(" "), "start");
    // While the Query waits for admission, the server answers the prepare.
    assert_eq!(run(&mut t, &[M::Z(b'I')]).join(" "), "fwd");
    t.refuse(mark, Bytes::new(), true);
    // Nothing is owed now: a bare BEGIN is deferred again.
    assert_eq!(run(&mut t, &[M::Q("BEGIN")]).join(" "), "answer");
}
