//! shortfirst-uplink: installs, reads and removes the HTB priority-band tree
//! on a server's uplink, so that a socket's `SO_PRIORITY` (from
//! [`shortfirst_core::bands::BandMap`]) picks its band with no tc filter.
//!
//! The tree and its numbers are pure data in [`htb`]; [`stats`] parses the
//! counters; this module runs the commands (`ip`, `tc`, `ethtool`, via argument
//! vectors, never a shell) through a [`Runner`], so the sequencing — refusing
//! foreign qdiscs, replacing our own, rolling back a half-installed tree — is
//! unit-tested with a scripted runner.

pub mod error;
pub mod htb;
pub mod rate;
pub mod stats;

use serde::Serialize;
use serde_json::Value;
use shortfirst_core::bands::{Band, BandMap};

use error::check_device_name;
pub use error::UplinkError;
pub use htb::{HtbParams, TreeSpec};
pub use rate::{format_rate, parse_rate_bits_per_s};
pub use stats::Counters;

/// What a command printed and how it ended.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CommandOutput {
    pub success: bool,
    /// e.g. "exit status 2", for messages.
    pub status: String,
    pub stdout: String,
    pub stderr: String,
}

/// Runs one command given as an argument vector (program first).
pub trait Runner {
    fn run(&mut self, argv: &[String]) -> std::io::Result<CommandOutput>;

    /// Whether this process may change qdiscs (CAP_NET_ADMIN); `None` when unknown.
    fn has_net_admin(&self) -> Option<bool> {
        None
    }
}

/// Runs commands for real, with `LC_ALL=C` so error messages are the ones we match.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemRunner;

impl Runner for SystemRunner {
    fn run(&mut self, argv: &[String]) -> std::io::Result<CommandOutput> {
        let (program, args) = argv.split_first().expect("a command has a program");
        let out = std::process::Command::new(program)
            .args(args)
            .env("LC_ALL", "C")
            .stdin(std::process::Stdio::null())
            .output()?;
        Ok(CommandOutput {
            success: out.status.success(),
            status: out.status.to_string(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        })
    }

    fn has_net_admin(&self) -> Option<bool> {
        let status = std::fs::read_to_string("/proc/self/status").ok()?;
        let hex = status.lines().find_map(|l| l.strip_prefix("CapEff:"))?.trim();
        let caps = u64::from_str_radix(hex, 16).ok()?;
        const CAP_NET_ADMIN: u32 = 12;
        Some(caps & (1 << CAP_NET_ADMIN) != 0)
    }
}

/// Whether setup turns segmentation/receive offloads off on the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Offloads {
    /// `ethtool -K DEV tso off gso off gro off`, then checked (the default:
    /// shaping needs MTU-sized packets).
    #[default]
    Off,
    /// Leave them as they are.
    Keep,
}

/// What `setup` installs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SetupOptions {
    pub rate_bits_per_s: u64,
    /// Data bands, 1..=7; band 0 (set-up) comes on top.
    pub data_bands: usize,
    /// Each band's queue limit, packets.
    pub queue_packets: u32,
    pub band_map: BandMap,
    pub offloads: Offloads,
}

impl SetupOptions {
    /// The defaults for everything but the rate: the bands of `serve`'s default cutoffs
    /// ([`shortfirst_core::bands::DEFAULT_DATA_BANDS`]), [`htb::DEFAULT_QUEUE_PACKETS`]-packet
    /// band queues, `BandMap::default()`, offloads off.
    pub fn new(rate_bits_per_s: u64) -> SetupOptions {
        SetupOptions {
            rate_bits_per_s,
            data_bands: shortfirst_core::bands::DEFAULT_DATA_BANDS,
            queue_packets: htb::DEFAULT_QUEUE_PACKETS,
            band_map: BandMap::default(),
            offloads: Offloads::Off,
        }
    }
}

/// What `setup` did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetupReport {
    pub dev: String,
    pub spec: TreeSpec,
    pub params: HtbParams,
    /// An earlier shortfirst tree was replaced.
    pub replaced: bool,
    pub offloads_off: bool,
}

/// What `teardown` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TeardownOutcome {
    Removed,
    /// No shortfirst tree was there; nothing changed.
    NothingInstalled,
}

/// One band's counters, as `show` reports them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BandStats {
    pub band: u8,
    /// The HTB class in tc syntax, e.g. `1:a`.
    pub class: String,
    /// The `SO_PRIORITY` value that selects this band.
    pub so_priority: u32,
    #[serde(flatten)]
    pub counters: Counters,
}

/// `show`'s result: per band, and the root class (the whole uplink).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct UplinkStats {
    pub dev: String,
    /// The uplink rate, when tc reported it.
    pub rate_bits_per_s: Option<u64>,
    pub bands: Vec<BandStats>,
    pub total: Counters,
}

/// The root qdisc of a device, as `tc -j qdisc show` reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct RootQdisc {
    kind: String,
    handle: String,
    /// HTB's `default` minor, when it is an HTB qdisc.
    htb_default: Option<u16>,
}

enum Ownership {
    /// Ours: HTB with our handle and band 0 as default.
    Ours,
    /// A kernel default (handle `0:`: noqueue, pfifo_fast, mq, fq_codel …).
    KernelDefault,
    Foreign,
}

impl RootQdisc {
    fn ownership(&self, map: BandMap) -> Ownership {
        let ours_handle = format!("{:x}:", map.major);
        if self.kind == "htb" && self.handle == ours_handle && self.htb_default == Some(map.class_minor(Band::SETUP)) {
            Ownership::Ours
        } else if self.handle == "0:" {
            Ownership::KernelDefault
        } else {
            Ownership::Foreign
        }
    }

    fn describe(&self) -> String {
        format!("`{} {}`", self.kind, self.handle)
    }
}

/// Installs the tree on `dev` as `options` say: the uplink rate, the data
/// bands plus band 0, classes numbered by the band map, band queue limits.
///
/// Replaces a tree shortfirst installed before; refuses any other non-default
/// root qdisc. If a step fails, everything added is removed again (the device
/// is left with its kernel-default qdisc) and the error says so. Offloads
/// turned off stay off: teardown does not know their earlier state.
pub fn setup(runner: &mut dyn Runner, dev: &str, options: &SetupOptions) -> Result<SetupReport, UplinkError> {
    let SetupOptions { rate_bits_per_s, data_bands, queue_packets, band_map, offloads } = *options;
    check_device_name(dev)?;
    let mtu_bytes = link_info(runner, dev)?.mtu_bytes;
    let spec = TreeSpec::new(rate_bits_per_s, data_bands, band_map, mtu_bytes)?.with_queue_packets(queue_packets)?;
    if runner.has_net_admin() == Some(false) {
        return Err(UplinkError::PermissionDenied { dev: dev.into(), action: "installing the HTB tree".into() });
    }
    let root = root_qdisc(runner, dev)?;
    let replaced = match root.ownership(band_map) {
        Ownership::Ours => true,
        Ownership::KernelDefault => false,
        Ownership::Foreign => {
            return Err(UplinkError::ForeignQdisc { dev: dev.into(), kind: root.kind, handle: root.handle })
        }
    };
    if offloads == Offloads::Off {
        run_checked(runner, &htb::offloads_off_command(dev), dev, "turning offloads off")?;
        run_checked(runner, &htb::gso_one_segment_command(dev), dev, "capping GSO packets at one segment")?;
        check_offloads_off(runner, dev)?;
    }
    if replaced {
        run_checked(runner, &htb::teardown_command(dev), dev, "removing the old HTB tree")?;
    }
    for (i, command) in spec.setup_commands(dev).iter().enumerate() {
        if let Err(source) = run_checked(runner, command, dev, "installing the HTB tree") {
            if i == 0 {
                // The root qdisc itself failed: nothing was added.
                return Err(source);
            }
            return Err(match run_checked(runner, &htb::teardown_command(dev), dev, "rolling back") {
                Ok(()) => UplinkError::RolledBack { source: Box::new(source) },
                Err(rollback) => UplinkError::RollbackFailed {
                    dev: dev.into(),
                    source: Box::new(source),
                    rollback: Box::new(rollback),
                },
            });
        }
    }
    Ok(SetupReport { dev: dev.into(), params: spec.params(), spec, replaced, offloads_off: offloads == Offloads::Off })
}

/// Removes the tree from `dev`. Idempotent: no tree, nothing to do. Refuses a
/// root qdisc shortfirst did not install.
pub fn teardown(runner: &mut dyn Runner, dev: &str, band_map: BandMap) -> Result<TeardownOutcome, UplinkError> {
    check_device_name(dev)?;
    let root = root_qdisc(runner, dev)?;
    match root.ownership(band_map) {
        Ownership::Ours => {
            if runner.has_net_admin() == Some(false) {
                return Err(UplinkError::PermissionDenied { dev: dev.into(), action: "removing the HTB tree".into() });
            }
            run_checked(runner, &htb::teardown_command(dev), dev, "removing the HTB tree")?;
            Ok(TeardownOutcome::Removed)
        }
        Ownership::KernelDefault => Ok(TeardownOutcome::NothingInstalled),
        Ownership::Foreign => Err(UplinkError::ForeignQdisc { dev: dev.into(), kind: root.kind, handle: root.handle }),
    }
}

/// Per-band counters of the tree on `dev`.
pub fn show(runner: &mut dyn Runner, dev: &str, band_map: BandMap) -> Result<UplinkStats, UplinkError> {
    check_device_name(dev)?;
    let root = root_qdisc(runner, dev)?;
    if !matches!(root.ownership(band_map), Ownership::Ours) {
        return Err(UplinkError::NotInstalled { dev: dev.into(), found: root.describe() });
    }
    let command = htb::argv(&["tc", "-s", "-j", "class", "show", "dev", dev]);
    let out = run_output(runner, &command, dev, "reading class counters")?;
    let classes = stats::parse_class_show(&out.stdout)
        .map_err(|detail| UplinkError::Parse { command: command.join(" "), detail })?;
    Ok(band_stats(dev, band_map, &classes))
}

/// Labels classes with bands: the root class (no parent) is the total, the
/// classes `band_map` knows are bands, anything else (another tool's classes
/// under our qdisc) is ignored.
fn band_stats(dev: &str, band_map: BandMap, classes: &[stats::ClassStats]) -> UplinkStats {
    let mut bands = Vec::new();
    let mut total = Counters::default();
    let mut rate_bits_per_s = None;
    for c in classes.iter().filter(|c| c.major == band_map.major) {
        if c.parent.is_none() {
            total = c.counters;
            rate_bits_per_s = c.rate_bits_per_s;
        } else if let Some(band) = band_map.band_of_class(c.major, c.minor) {
            bands.push(BandStats {
                band: band.index(),
                class: htb::class_id(c.major, c.minor),
                so_priority: band_map.so_priority(band),
                counters: c.counters,
            });
        }
    }
    bands.sort_by_key(|b| b.band);
    UplinkStats { dev: dev.into(), rate_bits_per_s, bands, total }
}

struct LinkInfo {
    mtu_bytes: u32,
    /// `None` when `ip` does not report it.
    gso_max_segs: Option<u64>,
}

fn link_info(runner: &mut dyn Runner, dev: &str) -> Result<LinkInfo, UplinkError> {
    let command = htb::argv(&["ip", "-d", "-j", "link", "show", "dev", dev]);
    let out = run_output(runner, &command, dev, "reading the device")?;
    let parse = |detail: String| UplinkError::Parse { command: command.join(" "), detail };
    let value: Value = serde_json::from_str(&out.stdout).map_err(|e| parse(format!("invalid JSON: {e}")))?;
    let link = value.get(0).ok_or_else(|| parse("no device listed".into()))?;
    let mtu = link.get("mtu").and_then(Value::as_u64).ok_or_else(|| parse("no mtu".into()))?;
    Ok(LinkInfo {
        mtu_bytes: u32::try_from(mtu).map_err(|_| UplinkError::Mtu { mtu_bytes: u32::MAX })?,
        gso_max_segs: link.get("gso_max_segs").and_then(Value::as_u64),
    })
}

fn root_qdisc(runner: &mut dyn Runner, dev: &str) -> Result<RootQdisc, UplinkError> {
    let command = htb::argv(&["tc", "-j", "qdisc", "show", "dev", dev]);
    let out = run_output(runner, &command, dev, "reading the root qdisc")?;
    parse_root_qdisc(&out.stdout).map_err(|detail| UplinkError::Parse { command: command.join(" "), detail })
}

fn parse_root_qdisc(json: &str) -> Result<RootQdisc, String> {
    let value: Value = serde_json::from_str(json.trim()).map_err(|e| format!("invalid JSON: {e}"))?;
    let items = value.as_array().ok_or("expected a JSON array")?;
    let root =
        items.iter().find(|q| q.get("root").and_then(Value::as_bool) == Some(true)).ok_or("no root qdisc listed")?;
    let kind = root.get("kind").and_then(Value::as_str).ok_or("root qdisc without \"kind\"")?;
    let handle = root.get("handle").and_then(Value::as_str).ok_or("root qdisc without \"handle\"")?;
    // tc prints HTB's default as "0xa"; accept a plain number too.
    let htb_default = root.get("options").and_then(|o| o.get("default")).and_then(|d| match d {
        Value::String(s) => u16::from_str_radix(s.trim_start_matches("0x"), 16).ok(),
        Value::Number(n) => n.as_u64().and_then(|n| u16::try_from(n).ok()),
        _ => None,
    });
    Ok(RootQdisc { kind: kind.into(), handle: handle.into(), htb_default })
}

/// The three offloads that make packets bigger than the MTU at the qdisc.
const OFFLOAD_FEATURES: [&str; 3] =
    ["tcp-segmentation-offload", "generic-segmentation-offload", "generic-receive-offload"];

fn check_offloads_off(runner: &mut dyn Runner, dev: &str) -> Result<(), UplinkError> {
    let out = run_output(runner, &htb::argv(&["ethtool", "-k", dev]), dev, "reading offloads")?;
    let mut still_on: Vec<String> = OFFLOAD_FEATURES
        .iter()
        .copied()
        .filter(|feature| {
            out.stdout.lines().any(|l| {
                l.trim()
                    .strip_prefix(feature)
                    .and_then(|r| r.strip_prefix(':'))
                    .is_some_and(|v| v.trim().starts_with("on"))
            })
        })
        .map(String::from)
        .collect();
    if let Some(segs) = link_info(runner, dev)?.gso_max_segs.filter(|&segs| segs != 1) {
        still_on.push(format!("gso_max_segs {segs}"));
    }
    if still_on.is_empty() {
        Ok(())
    } else {
        Err(UplinkError::OffloadsStillOn { dev: dev.into(), still_on: still_on.join(", ") })
    }
}

fn run_checked(runner: &mut dyn Runner, argv: &[String], dev: &str, action: &str) -> Result<(), UplinkError> {
    run_output(runner, argv, dev, action).map(|_| ())
}

/// Runs a command; maps a missing tool, a missing device and a missing
/// capability to their own errors, anything else to [`UplinkError::Command`].
fn run_output(runner: &mut dyn Runner, argv: &[String], dev: &str, action: &str) -> Result<CommandOutput, UplinkError> {
    let command = argv.join(" ");
    let out = runner.run(argv).map_err(|source| {
        if source.kind() == std::io::ErrorKind::NotFound {
            match argv[0].as_str() {
                "ethtool" => {
                    UplinkError::ToolMissing { tool: "ethtool", package: "ethtool", hint: ", or use --offloads keep" }
                }
                "ip" => UplinkError::ToolMissing { tool: "ip", package: "iproute2", hint: "" },
                _ => UplinkError::ToolMissing { tool: "tc", package: "iproute2", hint: "" },
            }
        } else {
            UplinkError::Spawn { command: command.clone(), source }
        }
    })?;
    if out.success {
        return Ok(out);
    }
    let stderr = out.stderr.trim();
    if stderr.contains("Operation not permitted") || stderr.contains("Permission denied") {
        return Err(UplinkError::PermissionDenied { dev: dev.into(), action: action.into() });
    }
    if stderr.contains("Cannot find device") || stderr.contains("does not exist") || stderr.contains("No such device") {
        return Err(UplinkError::NoSuchDevice { dev: dev.into() });
    }
    Err(UplinkError::Command { command, status: out.status, stderr: stderr.to_string() })
}

#[cfg(test)]
mod tests;
