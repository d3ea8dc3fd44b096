//! Embeds the commit the crate is built from (`SHORTFIRST_GIT_COMMIT`), for
//! `summary.json`: a result must say which code produced it.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn main() {
    // Rerun when HEAD moves (a commit, a checkout), the index changes, or any
    // source of the workspace's crates changes (so `-dirty` is current).
    let mut watch: Vec<String> = vec!["../../crates".into()];
    watch.extend(["HEAD", "index", "packed-refs"].iter().filter_map(|p| git(&["rev-parse", "--git-path", p])));
    if let Some(head_ref) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watch.extend(git(&["rev-parse", "--git-path", &head_ref]));
    }
    for path in watch {
        // A path that does not exist would make cargo rerun on every build.
        if std::path::Path::new(&path).exists() {
            println!("cargo:rerun-if-changed={path}");
        }
    }
    println!("cargo:rerun-if-env-changed=SHORTFIRST_GIT_COMMIT");
    let commit = std::env::var("SHORTFIRST_GIT_COMMIT")
        .ok()
        .or_else(|| git(&["describe", "--always", "--dirty", "--abbrev=40"]))
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=SHORTFIRST_GIT_COMMIT={commit}");
}
