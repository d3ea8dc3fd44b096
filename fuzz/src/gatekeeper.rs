//! The gatekeeper's classifier and configuration, through its public API only.

use shortfirst_core::admission::auto::AutoConfig;
use shortfirst_gatekeeper::classify::{route_template, Classifier, Rule, OVERFLOW_TYPE};
use shortfirst_gatekeeper::config::{parse_cost_us, parse_duration, Upstream};
use shortfirst_gatekeeper::{CapacitySetting, ProxyConfig, ProxySettings};

use crate::{fields, text};

/// Input: `max_types`, rule lines, then request lines `METHOD PATH [HEADER-VALUE]`.
/// Invariants: an index is always below `max_types`; the same request gets the
/// same index; the registry never grows past `max_types`; a route template
/// keeps the method and starts its path with `/`.
pub fn gatekeeper_classify(data: &[u8]) {
    let [max, rules, requests] = fields::<3>(data);
    let max_types = 2 + usize::from(max.first().copied().unwrap_or(0) % 16);
    let rules: Vec<Rule> = text(rules).lines().take(16).filter_map(|l| Rule::parse(l).ok()).collect();
    let declared = ["declared".to_string()];
    let Ok(c) = Classifier::new(rules, max_types, &declared) else { return };
    assert_eq!(c.type_name(0).as_deref(), Some("declared"));
    for line in text(requests).lines().take(64) {
        let mut parts = line.splitn(3, ' ');
        let method = parts.next().unwrap_or("");
        let path = parts.next().unwrap_or("");
        let mut headers = hyper::HeaderMap::new();
        if let Some(v) = parts.next().and_then(|v| hyper::header::HeaderValue::from_str(v).ok()) {
            headers.insert("x-type", v);
        }
        let i = c.classify(method, path, &headers);
        assert!(i < max_types, "index {i} with max_types {max_types}");
        assert_eq!(c.classify(method, path, &headers), i, "classification is not stable");
        let name = c.type_name(i).expect("an index the classifier gave has a name");
        assert!(i != c.overflow_index() || name == OVERFLOW_TYPE);
        // The proxy hands it hyper's path-and-query, which starts with `/`.
        if path.starts_with('/') {
            let route = route_template(method, path);
            assert!(route.starts_with(&format!("{method} /")), "{route:?}");
        }
    }
    assert!(c.types().len() <= max_types);
}

/// Input: a TOML config file, then a capacity, an upstream, a cost and a
/// duration string. Invariants: whatever parses is in range (positive
/// capacity, validated auto settings, an upstream prefix without trailing `/`).
pub fn gatekeeper_config(data: &[u8]) {
    let [toml_text, capacity, upstream, cost, duration] = fields::<5>(data);
    if let Ok(file) = ProxySettings::parse(&text(toml_text), std::path::Path::new("fuzz.toml")) {
        let _ = file.estimator();
        let _ = file.auto(AutoConfig::default());
        let _ = ProxyConfig::from_settings(&file);
    }
    match CapacitySetting::parse(&text(capacity)) {
        Ok(CapacitySetting::Fixed { capacity_us }) => assert!(capacity_us > 0),
        Ok(CapacitySetting::Auto(_)) | Err(_) => {}
    }
    if let Ok(u) = Upstream::parse(&text(upstream)) {
        assert!(!u.prefix.ends_with('/'), "prefix {:?}", u.prefix);
    }
    if let Ok(us) = parse_cost_us(&text(cost), "cost") {
        assert!(us <= 1_000_000_000_000_000);
    }
    let _ = parse_duration(&text(duration), "duration");
}
