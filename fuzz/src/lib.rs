//! The bodies of the fuzz targets, as plain functions: `fuzz_targets/*.rs`
//! hand them libFuzzer's inputs, and `tests/replay.rs` runs them over the
//! committed corpora on stable Rust. Each checks an invariant beyond "no
//! panic" where the code under test promises one; a broken invariant panics,
//! which libFuzzer reports as a crash.

mod gatekeeper;
mod http;
mod http2;
mod load;
mod tls;

pub use gatekeeper::{gatekeeper_classify, gatekeeper_config, gatekeeper_request, gatekeeper_response};
pub use http::{http_head, range_conditions, resolve_target};
pub use http2::h2_request;
pub use load::{load_schedule, session_toml, trace_clf, trace_csv, trace_wc98};
pub use tls::tls_names;

/// A target's body: one input, a panic when it breaks an invariant.
pub type Target = fn(&[u8]);

/// Every target by name, for the replay test.
pub const TARGETS: &[(&str, Target)] = &[
    ("http_head", http_head),
    ("resolve_target", resolve_target),
    ("range_conditions", range_conditions),
    ("trace_csv", trace_csv),
    ("trace_clf", trace_clf),
    ("trace_wc98", trace_wc98),
    ("session_toml", session_toml),
    ("load_schedule", load_schedule),
    ("gatekeeper_classify", gatekeeper_classify),
    ("gatekeeper_config", gatekeeper_config),
    ("gatekeeper_response", gatekeeper_response),
    ("gatekeeper_request", gatekeeper_request),
    ("tls_names", tls_names),
    ("h2_request", h2_request),
];

/// Splits an input into up to `N` fields at NUL bytes (the last takes the rest),
/// so one byte string can carry several independent values.
fn fields<const N: usize>(data: &[u8]) -> [&[u8]; N] {
    let mut out = [&data[..0]; N];
    let mut rest = data;
    for (i, slot) in out.iter_mut().enumerate() {
        if i + 1 == N {
            *slot = rest;
            break;
        }
        match rest.iter().position(|&b| b == 0) {
            Some(p) => {
                *slot = &rest[..p];
                rest = &rest[p + 1..];
            }
            None => {
                *slot = rest;
                rest = &rest[rest.len()..];
            }
        }
    }
    out
}

fn text(bytes: &[u8]) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(bytes)
}
