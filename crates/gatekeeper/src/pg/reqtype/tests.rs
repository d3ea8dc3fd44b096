use super::*;
use proptest::prelude::*;

fn same(a: &str, b: &str) {
    assert_eq!(normalized(a), normalized(b), "{a:?} vs {b:?}");
    assert_eq!(fingerprint(a), fingerprint(b), "{a:?} vs {b:?}");
}

fn differ(a: &str, b: &str) {
    assert_ne!(fingerprint(a), fingerprint(b), "{a:?} vs {b:?}");
}

#[test]
fn literals_parameters_comments_case_and_space_do_not_matter() {
    same("SELECT * FROM t WHERE id = 42", "select *\n  from T where ID=$1 -- x");
    same("SELECT 'a''b', E'\\'', $$x$$", "SELECT 'z', 'y', $q$;$q$");
    same("SELECT a FROM t WHERE x = -1.5e3", "SELECT a FROM t WHERE x = 7");
    same("SELECT -1, a FROM t WHERE -2 < a", "SELECT 1, a FROM t WHERE 3 < a");
    same("SELECT a FROM t WHERE id IN (1, 2, 3)", "SELECT a FROM t WHERE id IN ($1)");
    same("SELECT ARRAY[1,2,3]", "SELECT array[ $1 , $2 ]");
    same("/* route='x' */ SELECT 1;", "SELECT 2");
    same("BEGIN; SELECT 1 FROM t; COMMIT", "SELECT 5 FROM t");
}

#[test]
fn shapes_differ() {
    differ("SELECT a FROM t", "SELECT b FROM t");
    differ("SELECT a FROM t WHERE x = 1", "SELECT a FROM t WHERE x > 1");
    differ("SELECT a - 1 FROM t", "SELECT a FROM t");
    differ(r#"SELECT "A" FROM t"#, "SELECT a FROM t");
    differ("SELECT a FROM t WHERE id IN (SELECT b FROM u)", "SELECT a FROM t WHERE id IN (1, 2)");
    differ("SELECT 1 FROM t", "SELECT 1 FROM t2");
}

#[test]
fn only_the_first_statement_counts() {
    same("SELECT 1 FROM a; SELECT 2 FROM b", "SELECT 1 FROM a; DELETE FROM c");
    same(";; SELECT 1", "SELECT 1");
}

#[test]
fn tags_from_sqlcommenter_comments_and_application_name() {
    let src = TypeSource::default();
    let q = "SELECT * FROM books /*route='best_sellers',traceparent='00-abc-def-01'*/";
    assert_eq!(classify(q, &src, None), RequestType::Tag("best_sellers".into()));
    let q2 = "SELECT * FROM books /*traceparent='00-zzz-yyy-01',route='best_sellers'*/";
    assert_eq!(classify(q, &src, None), classify(q2, &src, None));
    assert_eq!(comment_tag("/*route='%2Fitems%2F%7Bid%7D'*/ SELECT 1", "route").as_deref(), Some("/items/{id}"));
    let untagged = "SELECT * FROM books /*traceparent='00-abc-def-01'*/";
    let other = "SELECT * FROM books /*traceparent='00-xyz-uvw-02'*/";
    assert_eq!(classify(untagged, &src, None), classify(other, &src, None));
    let by_app = TypeSource { comment_key: None, application_name: true };
    assert_eq!(classify(q, &by_app, Some("reports")), RequestType::Tag("reports".into()));
    assert!(matches!(classify(q, &by_app, Some("")), RequestType::Fingerprint(_)));
    let long = format!("/*route='{}'*/SELECT 1", "é".repeat(100));
    match classify(&long, &src, None) {
        RequestType::Tag(t) => assert!(t.len() <= MAX_TAG_BYTES),
        other => panic!("{other:?}"),
    }
}

#[test]
fn transaction_statements() {
    assert_eq!(lone_begin("BEGIN"), Some("BEGIN"));
    assert_eq!(lone_begin(" begin work; "), Some("BEGIN"));
    assert_eq!(lone_begin("BEGIN ISOLATION LEVEL SERIALIZABLE"), Some("BEGIN"));
    assert_eq!(lone_begin("START TRANSACTION READ ONLY"), Some("START TRANSACTION"));
    assert_eq!(lone_begin("BEGIN; SELECT 1"), None);
    assert_eq!(lone_begin("SELECT 1"), None);
    assert_eq!(lone_begin("/* begin */ SELECT 1"), None);
    assert_eq!(lone_end("COMMIT"), Some("COMMIT"));
    assert_eq!(lone_end("end transaction;"), Some("COMMIT"));
    assert_eq!(lone_end("ROLLBACK"), Some("ROLLBACK"));
    assert_eq!(lone_end("abort work"), Some("ROLLBACK"));
    assert_eq!(lone_end("COMMIT AND CHAIN"), None);
    assert_eq!(lone_end("ROLLBACK TO SAVEPOINT a"), None);
}

/// A literal of any form with the given value.
fn literal(v: &str, form: u8) -> String {
    match form % 5 {
        0 => format!("'{}'", v.replace('\'', "''")),
        1 => format!("E'{}'", v.replace('\\', "\\\\").replace('\'', "\\'")),
        2 => format!("$q${}$q$", v.replace('$', "")),
        3 => format!("{}", v.len() as i64 - 7),
        _ => format!("{}.5e{}", v.len(), v.len() % 3),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, rng_seed: proptest::test_runner::RngSeed::Fixed(17), ..ProptestConfig::default() })]

    #[test]
    fn a_literal_value_never_changes_the_fingerprint(
        a in "[ -~é\\n]{0,20}", b in "[ -~é\\n]{0,20}", form in 0u8..5, n in 1usize..5,
    ) {
        let list = |v: &str| (0..n).map(|_| literal(v, form)).collect::<Vec<_>>().join(", ");
        let q = |v: &str| format!("SELECT x FROM t WHERE a = {} AND b IN ({}) /* {} */", literal(v, form), list(v), v.replace(['*', '/'], ""));
        prop_assert_eq!(fingerprint(&q(&a)), fingerprint(&q(&b)));
    }

    #[test]
    fn different_shapes_differ(cols in proptest::collection::vec("[a-z]{1,6}", 1..4), op in 0usize..4, tab in "[a-z]{1,6}") {
        let ops = ["=", "<", ">", "<>"];
        let q1 = format!("SELECT {} FROM {tab} WHERE k {} 1", cols.join(", "), ops[op]);
        let q2 = format!("SELECT {} FROM {tab} WHERE k {} 1", cols.join(", "), ops[(op + 1) % 4]);
        let q3 = format!("SELECT {}, extra FROM {tab} WHERE k {} 1", cols.join(", "), ops[op]);
        let q4 = format!("SELECT {} FROM {tab}x WHERE k {} 1", cols.join(", "), ops[op]);
        prop_assert_ne!(fingerprint(&q1), fingerprint(&q2));
        prop_assert_ne!(fingerprint(&q1), fingerprint(&q3));
        prop_assert_ne!(fingerprint(&q1), fingerprint(&q4));
    }

    #[test]
    fn any_text_lexes_without_panic_and_covers_its_input(s in "\\PC{0,60}") {
        let covered: usize = crate::pg::lexer::tokens(&s).map(|t| t.text.len()).sum();
        prop_assert!(covered <= s.len());
        let _ = fingerprint(&s);
    }
}

/// Fingerprints are type names that outlive a build (configuration, dashboards): these
/// values, and the normalised texts they hash, must never change.
#[test]
fn fingerprints_are_stable() {
    let pinned: &[(&str, u64, &str)] = &[
        (
            "SELECT abalance FROM pgbench_accounts WHERE aid = 4711;",
            0xaa9d_837b_400f_0501,
            "select abalance from pgbench_accounts where aid = ?",
        ),
        (
            "UPDATE pgbench_accounts SET abalance = abalance + -3921 WHERE aid = 52;",
            0xc5a3_483b_ee4f_6f12,
            "update pgbench_accounts set abalance = abalance + ? where aid = ?",
        ),
        (
            "select a from t where id in (1, 2, 3) and b = any(array[$1, $2])",
            0xdd42_1969_767f_7880,
            "select a from t where id in ( ? ) and b = any ( array [ ? ] )",
        ),
        (
            "SELECT \u{c4}rger, \"Quoted\" FROM \u{3a3}\u{38a}\u{3a3}\u{3a5}\u{3a6}\u{39f}\u{3a3} WHERE x = -1",
            0xfce2_72df_c126_e133,
            "select \u{e4}rger , \"Quoted\" from \u{3c3}\u{3af}\u{3c3}\u{3c5}\u{3c6}\u{3bf}\u{3c2} where x = ?",
        ),
        (
            "SELECT a FROM t WHERE j ? 'k' AND j ?| array['a','b']",
            0xf02c_dd02_2a21_7d6b,
            "select a from t where j ? ? and j ?| array [ ? ]",
        ),
        (
            "BEGIN; START TRANSACTION; INSERT INTO t VALUES (1, 'x', -2.5e3) RETURNING id",
            0x1553_4163_6ae7_1ab7,
            "insert into t values ( ? , ? , ? ) returning id",
        ),
        (
            "/*route='x'*/ WITH q AS (SELECT 1) SELECT * FROM q -- tail",
            0xf5d5_e122_6f81_cc73,
            "with q as ( select ? ) select * from q",
        ),
        (
            "SELECT a ? -1, B - -2 FROM t WHERE c IN (1, -2)",
            0x640a_6e19_8aa6_1bb6,
            "select a ? - ? , b - ? from t where c in ( ? )",
        ),
        ("BEGIN; start transaction", 0x01f0_3568_14e7_d89a, "begin"),
        ("", 0xcbf2_9ce4_8422_2325, ""),
    ];
    for (text, fp, norm) in pinned {
        assert_eq!(normalized(text), *norm, "{text:?}");
        assert_eq!(fingerprint(text), *fp, "{text:?}");
    }
}
