//! `shortfirst farm map`: an HAProxy map (URL path → backend by size interval) from a
//! docroot, and the configurations beside it — `sita` (through the map), `roundrobin`
//! and `leastconn` — for a farm of `--hosts` servers.
//!
//! Outputs, each written atomically (temporary file, then rename): the map at `--out`
//! and, beside it, `STEM.sita.cfg`, `STEM.roundrobin.cfg`, `STEM.leastconn.cfg`. HAProxy
//! reads the map at start and at every reload: when files change, run the command again
//! and reload HAProxy (docs/farm.md).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use shortfirst_core::dispatch::{parse_cutoffs, sita_e_cutoffs_by, WireCost};
use shortfirst_farm::docroot::{self, Entry};
use shortfirst_farm::haproxy::{config_text, map_text, Balance, Farm};
use shortfirst_farm::write_atomically;
use shortfirst_load::trace::{self, TraceFormat};

/// Default bound on the files a map holds (one line each, about 40 bytes).
const DEFAULT_MAX_FILES: usize = 1_000_000;
/// Most trace records read for the weights (beyond: an error, split the trace).
const MAX_TRACE_RECORDS: u64 = 100_000_000;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Subcommand, Debug)]
enum Command {
    /// Write the HAProxy map and configurations for size-interval dispatch.
    Map(MapArgs),
}

#[derive(clap::Args, Debug)]
struct MapArgs {
    /// The document root every host serves (the same files on each).
    #[arg(long, value_name = "DIR")]
    root: PathBuf,
    /// Number of hosts (backends).
    #[arg(long, value_name = "C")]
    hosts: usize,
    /// Size cutoffs, one fewer than hosts (host i takes sizes up to the i-th: 20K,1M),
    /// or sita-e: the cutoffs giving every host the same load, from the files' sizes,
    /// each weighted by its requests in --trace (by one without it).
    #[arg(long, value_name = "LIST|sita-e", default_value = "sita-e")]
    cutoffs: String,
    /// What sita-e makes equal across hosts: `wire`, the bytes each host's uplink sends
    /// (a response's body, --head-bytes, 66 header bytes per segment of 1,448,
    /// --control-bytes), or `body`, the response bodies alone.
    #[arg(long, value_name = "wire|body", default_value = "wire")]
    load_basis: LoadBasis,
    /// A response head's bytes, for --load-basis wire (`shortfirst serve`'s are 250-290).
    #[arg(long, value_name = "BYTES", default_value_t = 280)]
    head_bytes: u64,
    /// Connection control bytes (SYN-ACK, ACKs, FIN) per response, for --load-basis wire:
    /// 0 when the balancer keeps its connections to the hosts alive, as HAProxy does.
    #[arg(long, value_name = "BYTES", default_value_t = 0)]
    control_bytes: u64,
    /// Trace whose requests weight each file for sita-e (CSV, CLF or WC98; paths not in
    /// the docroot are counted and ignored).
    #[arg(long, value_name = "FILE")]
    trace: Option<PathBuf>,
    /// Trace format (csv, clf, wc98); guessed from the file name when absent.
    #[arg(long, value_name = "FORMAT", requires = "trace")]
    trace_format: Option<TraceFormat>,
    /// Host addresses HOST:PORT, comma-separated, one per host
    /// (default 127.0.0.1:8081, :8082, ...).
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    host_addrs: Vec<String>,
    /// The frontend's address.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080")]
    listen: String,
    /// A runtime API socket in the configurations (`set map` without a reload).
    #[arg(long, value_name = "PATH")]
    stats_socket: Option<PathBuf>,
    /// Most files the map may hold; a larger docroot is an error.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_FILES)]
    max_files: usize,
    /// The map file; the configurations go beside it (STEM.sita.cfg, ...).
    #[arg(long, value_name = "FILE")]
    out: PathBuf,
}

/// What SITA-E's equal load counts (`--load-basis`).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum LoadBasis {
    Wire,
    Body,
}

pub fn run(args: Args) -> Result<()> {
    match args.command {
        Command::Map(a) => map(a),
    }
}

fn map(a: MapArgs) -> Result<()> {
    if a.hosts == 0 || a.hosts > shortfirst_core::dispatch::MAX_HOSTS {
        bail!("--hosts {}: must be between 1 and {}", a.hosts, shortfirst_core::dispatch::MAX_HOSTS);
    }
    let found = docroot::scan(&a.root, a.max_files).with_context(|| format!("--root {}", a.root.display()))?;
    if found.entries.is_empty() {
        bail!("--root {}: no files to map", a.root.display());
    }
    let cutoffs = if a.cutoffs == "sita-e" {
        let mut sizes = weights(&found.entries, a.trace.as_deref(), a.trace_format)?;
        let wire = WireCost { head_bytes: a.head_bytes, control_bytes: a.control_bytes };
        let cost = |size_bytes| match a.load_basis {
            LoadBasis::Wire => wire.bytes(size_bytes),
            LoadBasis::Body => size_bytes,
        };
        sita_e_cutoffs_by(&mut sizes, a.hosts, cost).context("--cutoffs sita-e")?
    } else {
        parse_cutoffs(&a.cutoffs).with_context(|| format!("--cutoffs {}", a.cutoffs))?
    };
    if cutoffs.len() + 1 != a.hosts {
        bail!("--cutoffs {}: {} cutoffs for --hosts {}; give one fewer than hosts", a.cutoffs, cutoffs.len(), a.hosts);
    }
    let hosts = if a.host_addrs.is_empty() {
        (0..a.hosts).map(|i| format!("127.0.0.1:{}", 8081 + i)).collect()
    } else if a.host_addrs.len() == a.hosts {
        a.host_addrs.clone()
    } else {
        bail!("--host-addrs: {} addresses for --hosts {}", a.host_addrs.len(), a.hosts);
    };
    let farm = Farm {
        listen: a.listen.clone(),
        hosts,
        cutoffs,
        map_path: absolute(&a.out)?,
        stats_socket: a.stats_socket.as_deref().map(absolute).transpose()?,
    };
    let map = map_text(&farm, &found.entries).context("the map")?;
    let configs: Vec<(PathBuf, String)> = Balance::ALL
        .iter()
        .map(|&b| Ok((a.out.with_extension(format!("{}.cfg", b.name())), config_text(&farm, b)?)))
        .collect::<Result<_, shortfirst_farm::haproxy::ConfigError>>()?;
    if let Some(parent) = a.out.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
    }
    write_atomically(&a.out, map.as_bytes())?;
    for (path, text) in &configs {
        write_atomically(path, text.as_bytes())?;
    }
    eprintln!(
        "shortfirst farm map: {} paths ({} files, {} symlinks skipped) over {} hosts, cutoffs {:?} bytes: {}",
        found.entries.len(),
        found.files,
        found.skipped_symlinks,
        a.hosts,
        farm.cutoffs,
        a.out.display()
    );
    for (path, _) in &configs {
        eprintln!("  {}", path.display());
    }
    Ok(())
}

/// `(size, weight)` per entry: its requests in the trace, or 1 each without one.
fn weights(entries: &[Entry], trace_path: Option<&Path>, format: Option<TraceFormat>) -> Result<Vec<(u64, u64)>> {
    let Some(path) = trace_path else {
        return Ok(entries.iter().map(|e| (e.size_bytes, 1)).collect());
    };
    let mut counts: HashMap<&str, u64> = entries.iter().map(|e| (e.url_path.as_str(), 0)).collect();
    let (mut matched, mut unknown, mut read) = (0u64, 0u64, 0u64);
    for r in trace::open(path, format).with_context(|| format!("--trace {}", path.display()))? {
        let r = r?;
        read += 1;
        if read > MAX_TRACE_RECORDS {
            bail!("--trace {}: more than {MAX_TRACE_RECORDS} requests; split the trace", path.display());
        }
        let target = r.path.split('?').next().unwrap_or("");
        match counts.get_mut(target) {
            Some(c) => {
                *c += 1;
                matched += 1;
            }
            None => unknown += 1,
        }
    }
    if matched == 0 {
        bail!("--trace {}: none of its {read} requests is a file of the docroot", path.display());
    }
    eprintln!("shortfirst farm map: trace weights from {matched} requests ({unknown} for paths not in the docroot)");
    Ok(entries.iter().map(|e| (e.size_bytes, counts[e.url_path.as_str()])).collect())
}

/// The path as HAProxy must see it: absolute (from the current directory), UTF-8.
fn absolute(path: &Path) -> Result<String> {
    let full = if path.is_absolute() { path.to_path_buf() } else { std::env::current_dir()?.join(path) };
    full.to_str().map(str::to_string).with_context(|| format!("{}: not UTF-8", full.display()))
}
