//! The emulator's TOML configuration, checked into [`Config`] before anything
//! touches the network. Every error names the file and the key. Keys are kebab-case; the
//! older snake_case spellings (`rtt_ms`) are still read.
//!
//! ```toml
//! tun = "sfnetem0"          # the TUN device (created if absent, else attached)
//! seed = 42                 # loss and jitter streams derive from it
//! jitter-mode = "fifo"      # fifo (never reorders) | reorder (netem's tfifo)
//! down-fraction = 0.5       # share of rtt-ms and jitter-ms on the server->client side
//! queue-packets = 20000     # per line (group x direction); beyond it: drop, counted
//! queue-bytes = 32000000    # per line, bytes of queued packets
//! txqueuelen = 10000        # TUN transmit queue, so the kernel never drops silently
//!
//! [[group]]
//! name = "far"
//! subnets = ["10.78.2.0/24"]
//! rtt-ms = 200.0
//! jitter-ms = 10.0          # RTT range: rtt-ms +- jitter-ms, split like the delay
//! jitter-dist = "uniform"   # uniform | normal (jitter-ms is then the RTT's sd)
//! loss = 0.02               # each direction; loss-down / loss-up override it
//! rate-bits-per-s = 10000000  # optional, each direction
//! # gilbert = { p = 0.01, r = 0.3, loss-good = 0.0, loss-bad = 0.5 }  # instead of loss
//! ```

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::classify::Ipv4Prefix;
use crate::line::{JitterDist, JitterMode, LineParams, LossModel};

/// Defaults, chosen so the queue never binds before the TCP windows do:
/// 100 Mbit/s for 175 ms one way is ~1,500 full-size packets.
pub const DEFAULT_TUN: &str = "sfnetem0";
pub const DEFAULT_QUEUE_PACKETS: u64 = 20_000;
pub const DEFAULT_QUEUE_BYTES: u64 = 32_000_000;
pub const DEFAULT_TXQUEUELEN: u32 = 10_000;
/// Limits on inputs (each loop and table sized by them stays bounded).
pub const MAX_GROUPS: usize = 64;
pub const MAX_SUBNETS_PER_GROUP: usize = 64;
pub const MAX_RTT_MS: f64 = 10_000.0;
pub const MAX_QUEUE_PACKETS: u64 = 1_000_000;
pub const MAX_QUEUE_BYTES: u64 = 1 << 30;
pub const MIN_RATE_BITS_PER_S: u64 = 8_000;

/// A configuration error: which file, which key, what is wrong.
#[derive(Debug, thiserror::Error)]
#[error("netem config {path}: {key}: {message}")]
pub struct ConfigError {
    pub path: String,
    pub key: String,
    pub message: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawConfig {
    tun: Option<String>,
    seed: Option<u64>,
    #[serde(alias = "jitter_mode")]
    jitter_mode: Option<String>,
    #[serde(alias = "down_fraction")]
    down_fraction: Option<f64>,
    #[serde(alias = "queue_packets")]
    queue_packets: Option<u64>,
    #[serde(alias = "queue_bytes")]
    queue_bytes: Option<u64>,
    txqueuelen: Option<u32>,
    #[serde(default)]
    group: Vec<RawGroup>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawGroup {
    name: String,
    subnets: Vec<String>,
    #[serde(alias = "rtt_ms")]
    rtt_ms: f64,
    #[serde(alias = "jitter_ms")]
    jitter_ms: Option<f64>,
    #[serde(alias = "jitter_dist")]
    jitter_dist: Option<String>,
    #[serde(alias = "down_fraction")]
    down_fraction: Option<f64>,
    loss: Option<f64>,
    #[serde(alias = "loss_down")]
    loss_down: Option<f64>,
    #[serde(alias = "loss_up")]
    loss_up: Option<f64>,
    gilbert: Option<RawGilbert>,
    #[serde(alias = "rate_bits_per_s")]
    rate_bits_per_s: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawGilbert {
    p: f64,
    r: f64,
    #[serde(alias = "loss_good")]
    loss_good: Option<f64>,
    #[serde(alias = "loss_bad")]
    loss_bad: Option<f64>,
}

/// One client group, resolved into its two lines.
#[derive(Clone, Debug, Serialize)]
pub struct GroupConfig {
    pub name: String,
    pub subnets: Vec<Ipv4Prefix>,
    pub rtt_ms: f64,
    pub jitter_ms: f64,
    /// Server -> client (towards the group's addresses).
    pub down: LineParams,
    /// Client -> server (from the group's addresses).
    pub up: LineParams,
}

/// A checked configuration.
#[derive(Clone, Debug, Serialize)]
pub struct Config {
    pub source: PathBuf,
    pub tun: String,
    pub seed: u64,
    pub jitter_mode: JitterMode,
    pub txqueuelen: u32,
    pub groups: Vec<GroupConfig>,
}

impl Config {
    /// Reads and checks `path`.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            path: path.display().to_string(),
            key: "(file)".into(),
            message: e.to_string(),
        })?;
        Config::parse(&text, path)
    }

    /// Checks `text` as if read from `path` (named in errors).
    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let err = |key: &str, message: String| ConfigError {
            path: path.display().to_string(),
            key: key.to_string(),
            message,
        };
        let raw: RawConfig = toml::from_str(text).map_err(|e| {
            let line = e.span().map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1);
            err(&line.map(|l| format!("line {l}")).unwrap_or_else(|| "(toml)".into()), e.message().to_string())
        })?;
        let tun = raw.tun.as_deref().unwrap_or(DEFAULT_TUN).to_string();
        check_ifname(&tun).map_err(|m| err("tun", m))?;
        let defaults = LineDefaults::check(&raw, &err)?;
        let txqueuelen = raw.txqueuelen.unwrap_or(DEFAULT_TXQUEUELEN);
        if !(1_000..=1_000_000).contains(&txqueuelen) {
            return Err(err("txqueuelen", format!("{txqueuelen}: expected 1000..=1000000")));
        }
        if raw.group.is_empty() {
            return Err(err("group", "no [[group]]: at least one client group is needed".into()));
        }
        if raw.group.len() > MAX_GROUPS {
            return Err(err("group", format!("{} groups: at most {MAX_GROUPS}", raw.group.len())));
        }
        let mut taken = Taken::default();
        let mut groups = Vec::with_capacity(raw.group.len());
        for (i, g) in raw.group.into_iter().enumerate() {
            let group_err = |field: &str, message: String| err(&format!("group[{i}].{field}"), message);
            groups.push(check_group(g, &defaults, &mut taken, &group_err)?);
        }
        let jitter_mode = defaults.jitter_mode;
        Ok(Config { source: path.to_path_buf(), tun, seed: raw.seed.unwrap_or(1), jitter_mode, txqueuelen, groups })
    }
}

/// The settings at the top of the file that every group's lines take.
struct LineDefaults {
    jitter_mode: JitterMode,
    /// A group's `down_fraction` overrides it.
    down_fraction: f64,
    queue_packets: u64,
    queue_bytes: u64,
}

impl LineDefaults {
    fn check(raw: &RawConfig, err: &dyn Fn(&str, String) -> ConfigError) -> Result<LineDefaults, ConfigError> {
        let jitter_mode = match raw.jitter_mode.as_deref().unwrap_or("fifo") {
            "fifo" => JitterMode::Fifo,
            "reorder" => JitterMode::Reorder,
            other => return Err(err("jitter-mode", format!("{other:?}: expected \"fifo\" or \"reorder\""))),
        };
        let down_fraction = raw.down_fraction.unwrap_or(0.5);
        check_fraction(down_fraction).map_err(|m| err("down-fraction", m))?;
        let queue_packets = raw.queue_packets.unwrap_or(DEFAULT_QUEUE_PACKETS);
        if !(1..=MAX_QUEUE_PACKETS).contains(&queue_packets) {
            return Err(err("queue-packets", format!("{queue_packets}: expected 1..={MAX_QUEUE_PACKETS}")));
        }
        let queue_bytes = raw.queue_bytes.unwrap_or(DEFAULT_QUEUE_BYTES);
        if !(65_536..=MAX_QUEUE_BYTES).contains(&queue_bytes) {
            return Err(err("queue-bytes", format!("{queue_bytes}: expected 65536..={MAX_QUEUE_BYTES}")));
        }
        Ok(LineDefaults { jitter_mode, down_fraction, queue_packets, queue_bytes })
    }
}

/// The names and subnets of the groups checked so far: no two groups share one.
#[derive(Default)]
struct Taken {
    names: HashSet<String>,
    /// Each with the name of the group it belongs to.
    subnets: Vec<(Ipv4Prefix, String)>,
}

impl Taken {
    /// Parses `g`'s subnets and claims them for it.
    fn claim_subnets(
        &mut self,
        g: &RawGroup,
        err: &dyn Fn(&str, String) -> ConfigError,
    ) -> Result<Vec<Ipv4Prefix>, ConfigError> {
        if g.subnets.is_empty() || g.subnets.len() > MAX_SUBNETS_PER_GROUP {
            return Err(err("subnets", format!("expected 1..={MAX_SUBNETS_PER_GROUP} subnets")));
        }
        let mut subnets = Vec::with_capacity(g.subnets.len());
        for s in &g.subnets {
            let p: Ipv4Prefix = s.parse().map_err(|m| err("subnets", m))?;
            if let Some((_, other)) = self.subnets.iter().find(|(q, _)| *q == p) {
                return Err(err("subnets", format!("{p} is also a subnet of group {other:?}")));
            }
            self.subnets.push((p, g.name.clone()));
            subnets.push(p);
        }
        Ok(subnets)
    }
}

/// Checks one `[[group]]` and resolves it into its two lines; `err` takes the
/// key within the group (`rtt_ms`) and names the group.
fn check_group(
    g: RawGroup,
    defaults: &LineDefaults,
    taken: &mut Taken,
    err: &dyn Fn(&str, String) -> ConfigError,
) -> Result<GroupConfig, ConfigError> {
    if !valid_name(&g.name) {
        return Err(err("name", format!("{:?}: expected 1 to 32 of [A-Za-z0-9_.-]", g.name)));
    }
    if !taken.names.insert(g.name.clone()) {
        return Err(err("name", format!("{:?} is used by two groups", g.name)));
    }
    let subnets = taken.claim_subnets(&g, err)?;
    if !(0.0..=MAX_RTT_MS).contains(&g.rtt_ms) {
        return Err(err("rtt-ms", format!("{}: expected 0..={MAX_RTT_MS}", g.rtt_ms)));
    }
    let jitter_ms = g.jitter_ms.unwrap_or(0.0);
    if !(0.0..=g.rtt_ms).contains(&jitter_ms) {
        return Err(err("jitter-ms", format!("{jitter_ms}: expected 0..=rtt-ms ({})", g.rtt_ms)));
    }
    let jitter_dist = match g.jitter_dist.as_deref().unwrap_or("uniform") {
        "uniform" => JitterDist::Uniform,
        "normal" => JitterDist::Normal,
        other => return Err(err("jitter-dist", format!("{other:?}: expected \"uniform\" or \"normal\""))),
    };
    let frac = g.down_fraction.unwrap_or(defaults.down_fraction);
    check_fraction(frac).map_err(|m| err("down-fraction", m))?;
    let (loss_down, loss_up) = loss_models(&g, err)?;
    if let Some(rate) = g.rate_bits_per_s {
        if rate < MIN_RATE_BITS_PER_S {
            return Err(err("rate-bits-per-s", format!("{rate}: expected >= {MIN_RATE_BITS_PER_S}")));
        }
    }
    let line = |share: f64, loss: LossModel| LineParams {
        delay_ns: ms_to_ns(g.rtt_ms * share),
        jitter_ns: ms_to_ns(jitter_ms * share),
        jitter_dist,
        mode: defaults.jitter_mode,
        loss,
        rate_bits_per_s: g.rate_bits_per_s,
        queue_packets: defaults.queue_packets as usize,
        queue_bytes: defaults.queue_bytes,
    };
    let (down, up) = (line(frac, loss_down), line(1.0 - frac, loss_up));
    Ok(GroupConfig { name: g.name, subnets, rtt_ms: g.rtt_ms, jitter_ms, down, up })
}

/// A group's loss on its (down, up) lines: a Gilbert-Elliott model for both, or
/// Bernoulli losses (`loss`, each direction overridable); not both kinds.
fn loss_models(g: &RawGroup, err: &dyn Fn(&str, String) -> ConfigError) -> Result<(LossModel, LossModel), ConfigError> {
    match (&g.gilbert, g.loss, g.loss_down, g.loss_up) {
        (Some(ge), None, None, None) => {
            let model = gilbert(ge).map_err(|(f, m)| err(&format!("gilbert.{f}"), m))?;
            Ok((model, model))
        }
        (Some(_), ..) => Err(err("gilbert", "give either gilbert or loss/loss-down/loss-up, not both".into())),
        (None, loss, down, up) => {
            let base = loss.unwrap_or(0.0);
            check_probability(base, false).map_err(|m| err("loss", m))?;
            let d = down.unwrap_or(base);
            check_probability(d, false).map_err(|m| err("loss-down", m))?;
            let u = up.unwrap_or(base);
            check_probability(u, false).map_err(|m| err("loss-up", m))?;
            Ok((LossModel::bernoulli(d), LossModel::bernoulli(u)))
        }
    }
}

fn ms_to_ns(ms: f64) -> u64 {
    (ms * 1e6).round() as u64
}

fn gilbert(g: &RawGilbert) -> Result<LossModel, (&'static str, String)> {
    check_probability(g.p, true).map_err(|m| ("p", m))?;
    check_probability(g.r, true).map_err(|m| ("r", m))?;
    if g.p + g.r == 0.0 {
        return Err(("r", "p and r are both 0: the chain never moves".into()));
    }
    let loss_good = g.loss_good.unwrap_or(0.0);
    check_probability(loss_good, false).map_err(|m| ("loss-good", m))?;
    let loss_bad = g.loss_bad.unwrap_or(1.0);
    check_probability(loss_bad, true).map_err(|m| ("loss-bad", m))?;
    Ok(LossModel::Gilbert { p: g.p, r: g.r, loss_good, loss_bad })
}

fn check_probability(p: f64, one_allowed: bool) -> Result<(), String> {
    let ok = if one_allowed { (0.0..=1.0).contains(&p) } else { (0.0..1.0).contains(&p) };
    if ok {
        Ok(())
    } else if one_allowed {
        Err(format!("{p}: expected a probability in [0, 1]"))
    } else {
        Err(format!("{p}: expected a probability in [0, 1) (1 would drop everything)"))
    }
}

fn check_fraction(f: f64) -> Result<(), String> {
    if (0.0..=1.0).contains(&f) {
        Ok(())
    } else {
        Err(format!("{f}: expected a fraction in [0, 1]"))
    }
}

fn valid_name(name: &str) -> bool {
    (1..=32).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.')
}

/// A Linux interface name: 1..=15 bytes, no '/', whitespace or ':'.
pub fn check_ifname(name: &str) -> Result<(), String> {
    if (1..=15).contains(&name.len()) && name.bytes().all(|b| b.is_ascii_graphic() && b != b'/' && b != b':') {
        Ok(())
    } else {
        Err(format!("{name:?}: expected an interface name of 1 to 15 printable characters"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(text, Path::new("wan.toml"))
    }

    const TWO_GROUPS: &str = r#"
        seed = 7
        [[group]]
        name = "near"
        subnets = ["10.78.1.0/24"]
        rtt_ms = 40
        [[group]]
        name = "far"
        subnets = ["10.78.2.0/24", "10.79.0.0/16"]
        rtt_ms = 200
        jitter_ms = 20
        loss = 0.02
        loss_up = 0.0
        rate_bits_per_s = 10_000_000
    "#;

    #[test]
    fn resolves_groups_into_lines() {
        let c = parse(TWO_GROUPS).unwrap();
        assert_eq!(c.tun, DEFAULT_TUN);
        assert_eq!(c.seed, 7);
        assert_eq!(c.jitter_mode, JitterMode::Fifo);
        let far = &c.groups[1];
        assert_eq!(far.down.delay_ns, 100_000_000);
        assert_eq!(far.up.delay_ns, 100_000_000);
        assert_eq!(far.down.jitter_ns, 10_000_000);
        assert_eq!(far.down.loss, LossModel::bernoulli(0.02));
        assert_eq!(far.up.loss, LossModel::bernoulli(0.0));
        assert_eq!(far.down.rate_bits_per_s, Some(10_000_000));
        assert_eq!(far.subnets.len(), 2);
        assert_eq!(c.groups[0].down.queue_packets as u64, DEFAULT_QUEUE_PACKETS);
    }

    #[test]
    fn down_fraction_splits_delay_and_jitter() {
        let c = parse("down_fraction = 1.0\n[[group]]\nname='a'\nsubnets=['10.0.0.0/8']\nrtt_ms=100\njitter_ms=10\n")
            .unwrap();
        assert_eq!(c.groups[0].down.delay_ns, 100_000_000);
        assert_eq!(c.groups[0].down.jitter_ns, 10_000_000);
        assert_eq!(c.groups[0].up.delay_ns, 0);
        assert_eq!(c.groups[0].up.jitter_ns, 0);
    }

    #[test]
    fn gilbert_model() {
        let c = parse("[[group]]\nname='a'\nsubnets=['10.0.0.0/8']\nrtt_ms=10\ngilbert={p=0.01,r=0.5,loss_bad=0.8}\n")
            .unwrap();
        assert_eq!(c.groups[0].down.loss, LossModel::Gilbert { p: 0.01, r: 0.5, loss_good: 0.0, loss_bad: 0.8 });
    }

    /// Each bad input names the key it is about.
    #[test]
    fn errors_name_file_and_key() {
        let g = "[[group]]\nname='a'\nsubnets=['10.0.0.0/8']\nrtt_ms=10\n";
        let table: &[(&str, &str)] = &[
            ("seed = 1\n", "group"),
            (&format!("jitter_mode='x'\n{g}"), "jitter-mode"),
            (&format!("down_fraction=1.5\n{g}"), "down-fraction"),
            (&format!("queue_packets=0\n{g}"), "queue-packets"),
            (&format!("queue_bytes=10\n{g}"), "queue-bytes"),
            (&format!("tun='a/b'\n{g}"), "tun"),
            (&format!("{g}loss=1.0\n"), "group[0].loss"),
            (&format!("{g}loss_down=-0.1\n"), "group[0].loss-down"),
            (&format!("{g}jitter_ms=11\n"), "group[0].jitter-ms"),
            (&format!("{g}jitter_dist='pareto'\n"), "group[0].jitter-dist"),
            (&format!("{g}rate_bits_per_s=10\n"), "group[0].rate-bits-per-s"),
            (&format!("{g}loss=0.1\ngilbert={{p=0.1,r=0.1}}\n"), "group[0].gilbert"),
            (&format!("{g}gilbert={{p=2.0,r=0.1}}\n"), "group[0].gilbert.p"),
            ("[[group]]\nname='a'\nsubnets=['10.0.0.0/33']\nrtt_ms=1\n", "group[0].subnets"),
            ("[[group]]\nname='a'\nsubnets=[]\nrtt_ms=1\n", "group[0].subnets"),
            ("[[group]]\nname=''\nsubnets=['10.0.0.0/8']\nrtt_ms=1\n", "group[0].name"),
            ("[[group]]\nname='a'\nsubnets=['10.0.0.0/8']\nrtt_ms=-1\n", "group[0].rtt-ms"),
            (&format!("{g}[[group]]\nname='a'\nsubnets=['11.0.0.0/8']\nrtt_ms=1\n"), "group[1].name"),
            (&format!("{g}[[group]]\nname='b'\nsubnets=['10.0.0.0/8']\nrtt_ms=1\n"), "group[1].subnets"),
        ];
        for (text, key) in table {
            let e = parse(text).expect_err(text);
            assert_eq!(&e.key, key, "{text}: {e}");
            assert!(e.to_string().starts_with("netem config wan.toml: "), "{e}");
        }
    }

    #[test]
    fn kebab_case_keys_and_the_older_snake_case_ones_read_the_same() {
        let kebab = "jitter-mode='reorder'\ndown-fraction=0.25\nqueue-packets=50\nqueue-bytes=70000\n\
            [[group]]\nname='a'\nsubnets=['10.0.0.0/8']\nrtt-ms=10\njitter-ms=2\njitter-dist='normal'\n\
            rate-bits-per-s=1000000\ngilbert={p=0.1,r=0.2,loss-good=0.01,loss-bad=0.5}\n";
        let snake = kebab.replace("-mode", "_mode").replace("-fraction", "_fraction").replace("-packets", "_packets");
        let snake = snake.replace("-bytes", "_bytes").replace("-ms", "_ms").replace("-dist", "_dist");
        let snake = snake.replace("rate-bits-per-s", "rate_bits_per_s").replace("loss-", "loss_");
        assert!(snake.contains("rtt_ms") && snake.contains("loss_good") && !snake.contains("-ms"), "{snake}");
        let (a, b) = (parse(kebab).unwrap(), parse(&snake).unwrap());
        assert_eq!(format!("{:?}", a.groups), format!("{:?}", b.groups));
        assert_eq!((a.jitter_mode, a.groups[0].down.queue_packets), (b.jitter_mode, 50));
    }

    #[test]
    fn unknown_keys_are_refused_with_their_name() {
        let e = parse("[[group]]\nname='a'\nsubnets=['10.0.0.0/8']\nrtt_ms=10\nlos=0.1\n").unwrap_err();
        assert!(e.message.contains("los"), "{e}");
        let e = parse("sede = 1\n").unwrap_err();
        assert!(e.message.contains("sede"), "{e}");
    }

    #[test]
    fn missing_file_is_named() {
        let e = Config::load(Path::new("/nonexistent/wan.toml")).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/wan.toml"), "{e}");
    }
}
