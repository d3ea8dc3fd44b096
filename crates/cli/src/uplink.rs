//! `shortfirst uplink`: install, show and remove the HTB priority-band tree on
//! the server's uplink (the work is in the `shortfirst-uplink` crate).
//!
//! Class ids come from `BandMap::default()`, the same numbering `shortfirst
//! serve` uses for `SO_PRIORITY`, so the two always agree.

use anyhow::Context;
use shortfirst_core::bands::{BandMap, DEFAULT_DATA_BANDS, MAX_DATA_BANDS};
use shortfirst_uplink::htb::{DEFAULT_QUEUE_PACKETS, MAX_QUEUE_PACKETS};
use shortfirst_uplink::{
    self as uplink, format_rate, Offloads, SetupOptions, SystemRunner, TeardownOutcome, UplinkStats,
};

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Subcommand, Debug)]
enum Command {
    /// Shape DEV's egress at --link-rate with one strict-priority HTB class per band
    /// (band 0 = connection set-up, then the data bands). Replaces a tree it
    /// installed before; refuses other root qdiscs. Needs CAP_NET_ADMIN.
    Setup {
        /// Network device whose egress is the uplink, e.g. eth0.
        #[arg(long)]
        dev: String,
        /// The link's rate: 10mbit, 100Mbit, 1gbit, 500kbit or bits per second.
        #[arg(long, value_name = "RATE", value_parser = parse_rate)]
        link_rate: u64,
        /// Data bands (1 to 7); band 0 for set-up comes on top. `serve`'s default cutoffs
        /// use 7; a tree with fewer bands than the server's cutoffs make sends the largest
        /// responses' packets to band 0 (set-up), ahead of everything.
        #[arg(long, default_value_t = DEFAULT_DATA_BANDS as u8, value_parser = clap::value_parser!(u8).range(1..=MAX_DATA_BANDS as i64))]
        bands: u8,
        /// Each band's queue limit in packets (a pfifo per band); beyond it
        /// arriving packets are dropped. The default is a backstop the
        /// server's sockets do not reach (they bound their own queueing); a
        /// drop here stalls a local sender for its probe timer (>= 200 ms).
        #[arg(long, default_value_t = DEFAULT_QUEUE_PACKETS,
              value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_QUEUE_PACKETS)))]
        queue_packets: u32,
        /// `off` turns TSO/GSO/GRO off on DEV and caps GSO packets at one
        /// segment (`gso_max_segs 1`), so packets are MTU-sized at the qdisc
        /// (the priority order then acts per packet); `keep` leaves them.
        /// Teardown does not undo either.
        #[arg(long, value_enum, default_value_t = OffloadsArg::Off)]
        offloads: OffloadsArg,
    },
    /// Per-band counters: bytes, packets, backlog, drops.
    Show {
        #[arg(long)]
        dev: String,
        /// Print JSON (one object: dev, rate_bits_per_s, bands[], total).
        #[arg(long)]
        json: bool,
    },
    /// Remove the tree (and its queued packets). Nothing installed: no-op.
    Teardown {
        #[arg(long)]
        dev: String,
    },
}

#[derive(clap::ValueEnum, Clone, Copy, Debug)]
enum OffloadsArg {
    Off,
    Keep,
}

fn parse_rate(text: &str) -> Result<u64, String> {
    uplink::parse_rate_bits_per_s(text).map_err(|e| e.to_string())
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let map = BandMap::default();
    let mut runner = SystemRunner;
    match args.command {
        Command::Setup { dev, link_rate: rate, bands, queue_packets, offloads } => {
            let offloads = match offloads {
                OffloadsArg::Off => Offloads::Off,
                OffloadsArg::Keep => Offloads::Keep,
            };
            let options = SetupOptions {
                rate_bits_per_s: rate,
                data_bands: usize::from(bands),
                queue_packets,
                band_map: map,
                offloads,
            };
            let r = uplink::setup(&mut runner, &dev, &options).with_context(|| format!("uplink setup on {dev}"))?;
            let first = map.class_minor(shortfirst_core::bands::Band::SETUP);
            println!(
                "{} uplink on {dev}: HTB {}, band 0 (set-up) + {bands} data bands in classes {:x}:{:x}..{:x}:{:x}, \
                 {queue_packets}-packet band queues, quantum {} B, burst {} B, per-band guaranteed {}{}",
                if r.replaced { "replaced" } else { "installed" },
                format_rate(rate),
                map.major,
                first,
                map.major,
                first + u16::from(bands),
                r.params.quantum_bytes,
                r.params.burst_bytes,
                format_rate(r.params.band_rate_bits_per_s),
                if r.offloads_off { "; TSO/GSO/GRO off, gso_max_segs 1" } else { "" },
            );
        }
        Command::Show { dev, json } => {
            let stats = uplink::show(&mut runner, &dev, map).with_context(|| format!("uplink show on {dev}"))?;
            if json {
                println!("{}", serde_json::to_string_pretty(&stats)?);
            } else {
                print!("{}", render_table(&stats));
            }
        }
        Command::Teardown { dev } => {
            match uplink::teardown(&mut runner, &dev, map).with_context(|| format!("uplink teardown on {dev}"))? {
                TeardownOutcome::Removed => println!("removed the shortfirst uplink from {dev}"),
                TeardownOutcome::NothingInstalled => println!("no shortfirst uplink on {dev}: nothing to remove"),
            }
        }
    }
    Ok(())
}

fn render_table(s: &UplinkStats) -> String {
    let mut out = format!(
        "uplink {} at {}\n{:>4}  {:>6}  {:>14}  {:>10}  {:>13}  {:>15}  {:>8}\n",
        s.dev,
        s.rate_bits_per_s.map(format_rate).unwrap_or_else(|| "?".into()),
        "band",
        "class",
        "bytes",
        "packets",
        "backlog_bytes",
        "backlog_packets",
        "drops"
    );
    let row = |label: &str, class: &str, c: &uplink::Counters| {
        format!(
            "{label:>4}  {class:>6}  {:>14}  {:>10}  {:>13}  {:>15}  {:>8}\n",
            c.bytes, c.packets, c.backlog_bytes, c.backlog_packets, c.drops
        )
    };
    for b in &s.bands {
        out += &row(&b.band.to_string(), &b.class, &b.counters);
    }
    out += &row("all", "", &s.total);
    out
}
