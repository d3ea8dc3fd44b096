//! Replays the committed corpora (`corpus/<target>/`) and the crash
//! regressions (`regressions/<target>/`) through every target's body, on
//! stable Rust: what the fuzzer once found keeps being checked by `make test`.

use std::path::Path;

#[test]
fn corpora_replay_without_breaking_an_invariant() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut replayed = 0;
    for (name, target) in shortfirst_fuzz::TARGETS {
        let mut inputs = 0;
        for dir in ["corpus", "regressions"] {
            let Ok(entries) = std::fs::read_dir(root.join(dir).join(name)) else { continue };
            for entry in entries {
                let path = entry.unwrap().path();
                let data = std::fs::read(&path).unwrap();
                let outcome = std::panic::catch_unwind(|| target(&data));
                assert!(outcome.is_ok(), "{name}: {} broke an invariant", path.display());
                inputs += 1;
            }
        }
        assert!(inputs > 0, "{name}: no corpus committed under corpus/{name}");
        replayed += inputs;
    }
    eprintln!("replayed {replayed} inputs");
}
