//! The HTB tree shortfirst installs, as data and as `tc` argument vectors.
//!
//! Pure: a [`TreeSpec`] (rate, bands, class numbering, MTU) in, commands out.
//! Nothing here runs a process, so every command is unit-tested.
//!
//! The tree (brief §3; this kernel has no `prio` qdisc):
//!
//! ```text
//! qdisc htb major:  default <band 0's minor>
//! └── class major:1        rate = ceil = uplink          (the shaper)
//!     ├── class major:m0   band 0 (set-up)   prio 0   tiny rate, ceil = uplink
//!     │   └── qdisc pfifo limit Q            (each band's queue, Q packets)
//!     ├── class major:m1   band 1            prio 1   tiny rate, ceil = uplink
//!     │   └── qdisc pfifo limit Q
//!     └── …                band N            prio N
//! ```
//!
//! HTB serves a class first from its own guaranteed rate, then lets it borrow
//! from the parent in `prio` order (0 first). With a tiny guaranteed rate per
//! band, almost the whole link is borrowed, so the band order decides who
//! sends: a strict-priority scheduler that a socket reaches with no filter,
//! because `SO_PRIORITY = (major << 16) | minor` names the class directly.
//!
//! Class ids are hexadecimal in `tc` syntax (`1:a` is minor 10), so every id
//! is formatted here from [`BandMap`] numbers, never typed by hand.

use shortfirst_core::bands::{Band, BandMap, MAX_DATA_BANDS};

use crate::error::UplinkError;

/// Ethernet header bytes: HTB accounts whole frames (`skb->len`), so an
/// MTU-sized IP packet costs MTU + 14 bytes of tokens.
pub const ETHERNET_HEADER_BYTES: u32 = 14;
/// Each band's guaranteed rate is this fraction of the uplink (1/1000): small
/// enough that 8 bands leak under 1% of the link past the priority order, big
/// enough that HTB's token arithmetic stays well inside its 32-bit tick range.
pub const BAND_RATE_DIVISOR: u64 = 1_000;
/// Root burst in time at the uplink rate. Tokens accumulate up to the burst
/// while the qdisc waits for its timer; on a busy 2-core machine a timer can
/// fire a millisecond or two late, and a burst shorter than that delay loses
/// link time for good. 2 ms keeps the shaper within a few packets of the rate.
pub const ROOT_BURST_US: u64 = 2_000;
/// Whatever the rate, the root may burst at least this many full frames, so a
/// slow link (10 Mbit: 2 ms is only 2,500 bytes) is not starved by timer slack.
pub const MIN_BURST_FRAMES: u32 = 4;

/// Each band's queue limit by default, packets. The server's own sockets are
/// the only senders into these queues, so the limit is a backstop, not a
/// congestion signal: each socket already bounds what it puts here (TCP small
/// queues, its congestion window and send buffer). A drop at this queue is
/// worse than useless to a local sender: TCP sees a local transmit error, and
/// a socket with nothing in flight then waits for its probe timer (at least
/// 200 ms, then 500 ms per try) and is aborted after 15 failed tries.
/// Measured (lab, 10 Mbit/s, FAIR at load 0.8, 100 s): with the paper's
/// 100-packet limit 21,000–45,000 drops, 77–179 connections aborted and a mean
/// response time of 0.29–0.40 s; with 10,000 none dropped or aborted (the
/// deepest backlog seen, 1,537 packets, was under BBR). At the limit the
/// band's pfifo drops the arriving packet (counted in `drops`).
pub const DEFAULT_QUEUE_PACKETS: u32 = 10_000;
/// Largest per-band queue accepted: 100,000 packets (150 MB at MTU 1500).
pub const MAX_QUEUE_PACKETS: u32 = 100_000;

/// What to install: the uplink rate, the number of data bands, how bands map
/// to HTB classes, and each band's queue limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TreeSpec {
    pub rate_bits_per_s: u64,
    pub data_bands: usize,
    pub band_map: BandMap,
    pub mtu_bytes: u32,
    pub queue_packets: u32,
}

/// The HTB numbers derived from a [`TreeSpec`]; see [`TreeSpec::params`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HtbParams {
    /// Deficit-round-robin quantum, bytes, on every class.
    pub quantum_bytes: u32,
    /// Root class burst and cburst, and every band's cburst, bytes.
    pub burst_bytes: u64,
    /// Each band's guaranteed rate, bits/s.
    pub band_rate_bits_per_s: u64,
    /// Each band's burst at its guaranteed rate, bytes: one frame.
    pub band_burst_bytes: u64,
}

impl TreeSpec {
    /// Checks the numbers fit HTB: 1..=7 data bands, a usable class numbering, an MTU.
    pub fn new(
        rate_bits_per_s: u64,
        data_bands: usize,
        band_map: BandMap,
        mtu_bytes: u32,
    ) -> Result<Self, UplinkError> {
        if !(1..=MAX_DATA_BANDS).contains(&data_bands) {
            return Err(UplinkError::Bands { bands: data_bands });
        }
        // Major 0 means "unspecified" to tc and ffff is reserved for ingress/clsact.
        if band_map.major == 0 || band_map.major == 0xffff {
            return Err(UplinkError::BandMap { reason: format!("major {} must be in 1..=0xfffe", band_map.major) });
        }
        // Minor 0 is the qdisc itself; the last band's minor must fit in 16 bits.
        if band_map.minor_base == 0 || u32::from(band_map.minor_base) + MAX_DATA_BANDS as u32 > 0xfffe {
            return Err(UplinkError::BandMap {
                reason: format!("minor base {} must be in 1..={}", band_map.minor_base, 0xfffe - MAX_DATA_BANDS),
            });
        }
        if !(576..=65_535).contains(&mtu_bytes) {
            return Err(UplinkError::Mtu { mtu_bytes });
        }
        Ok(TreeSpec { rate_bits_per_s, data_bands, band_map, mtu_bytes, queue_packets: DEFAULT_QUEUE_PACKETS })
    }

    /// The same tree with `queue_packets` (1..=[`MAX_QUEUE_PACKETS`]) per band queue.
    pub fn with_queue_packets(self, queue_packets: u32) -> Result<Self, UplinkError> {
        if !(1..=MAX_QUEUE_PACKETS).contains(&queue_packets) {
            return Err(UplinkError::QueuePackets { queue_packets });
        }
        Ok(TreeSpec { queue_packets, ..self })
    }

    /// HTB quantum, burst and band rates for this link.
    ///
    /// - quantum = one full frame (MTU + Ethernet header): each deficit-round-
    ///   robin turn sends exactly one MTU-sized packet, the fairest choice
    ///   within a band, and never below the MTU (HTB would then need several
    ///   rounds per packet). Giving it explicitly also silences HTB's "quantum
    ///   of class is small/big" warnings, which come from the r2q default
    ///   (rate / 10) being below 1,000 bytes for the tiny band rates or above
    ///   200,000 bytes at gigabit rates.
    /// - burst = max([`MIN_BURST_FRAMES`] frames, [`ROOT_BURST_US`] at the
    ///   uplink rate): 6,056 bytes at 10 Mbit, 25,000 at 100 Mbit. Bursts do
    ///   not weaken the priority order: HTB picks the best band per packet.
    /// - band rate = uplink / [`BAND_RATE_DIVISOR`], at least 1 kbit/s
    ///   (10 kbit/s on a 10 Mbit link); band burst = one frame.
    pub fn params(&self) -> HtbParams {
        let frame_bytes = self.mtu_bytes + ETHERNET_HEADER_BYTES;
        let burst_for_time_bytes = self.rate_bits_per_s / 8 * ROOT_BURST_US / 1_000_000;
        HtbParams {
            quantum_bytes: frame_bytes,
            burst_bytes: burst_for_time_bytes.max(u64::from(MIN_BURST_FRAMES * frame_bytes)),
            band_rate_bits_per_s: (self.rate_bits_per_s / BAND_RATE_DIVISOR).max(1_000),
            band_burst_bytes: u64::from(frame_bytes),
        }
    }

    /// The root class minor: 1, unless the band numbering starts at 1, then
    /// the first minor after the last possible band.
    pub fn root_minor(&self) -> u16 {
        let first = self.band_map.minor_base;
        if first <= 1 && 1 <= first + MAX_DATA_BANDS as u16 {
            first + MAX_DATA_BANDS as u16 + 1
        } else {
            1
        }
    }

    /// Bands with a class: set-up (0) and the data bands.
    pub fn bands(&self) -> impl Iterator<Item = Band> {
        (0..=self.data_bands as u8).map(|i| Band::new(i).expect("data_bands checked against MAX_DATA_BANDS"))
    }

    /// The qdisc handle in tc syntax, e.g. `1:`.
    pub fn qdisc_handle(&self) -> String {
        format!("{:x}:", self.band_map.major)
    }

    pub fn class_id(&self, minor: u16) -> String {
        class_id(self.band_map.major, minor)
    }

    /// Commands that install the tree on `dev`, in order: the root qdisc, the
    /// root class, then per band its class and its pfifo queue (handle chosen
    /// by the kernel). Assumes no shortfirst tree is present (setup deletes an
    /// old one first).
    pub fn setup_commands(&self, dev: &str) -> Vec<Vec<String>> {
        let p = self.params();
        let root_class = self.class_id(self.root_minor());
        let mut commands = vec![argv(&[
            "tc",
            "qdisc",
            "add",
            "dev",
            dev,
            "root",
            "handle",
            &self.qdisc_handle(),
            "htb",
            "default",
            &format!("{:x}", self.band_map.class_minor(Band::SETUP)),
        ])];
        commands.push(self.class_command(
            dev,
            &self.qdisc_handle(),
            &root_class,
            self.rate_bits_per_s,
            p.burst_bytes,
            None,
        ));
        for band in self.bands() {
            let id = self.class_id(self.band_map.class_minor(band));
            let prio = Some(band.index());
            commands.push(self.class_command(dev, &root_class, &id, p.band_rate_bits_per_s, p.band_burst_bytes, prio));
            commands.push(argv(&["tc", "qdisc", "add", "dev", dev, "parent", &id, "pfifo", "limit"]));
            commands.last_mut().expect("just pushed").push(self.queue_packets.to_string());
        }
        commands
    }
}

impl TreeSpec {
    /// `tc class add` for one class: ceil is always the uplink rate, cburst
    /// the root burst and quantum one frame; only the root class has no prio.
    fn class_command(
        &self,
        dev: &str,
        parent: &str,
        class_id: &str,
        rate_bits_per_s: u64,
        burst_bytes: u64,
        prio: Option<u8>,
    ) -> Vec<String> {
        let p = self.params();
        let mut command = argv(&["tc", "class", "add", "dev", dev, "parent", parent, "classid", class_id, "htb"]);
        let mut option = |key: &str, value: String| command.extend([key.to_string(), value]);
        option("rate", format!("{rate_bits_per_s}bit"));
        option("ceil", format!("{}bit", self.rate_bits_per_s));
        option("burst", burst_bytes.to_string());
        option("cburst", p.burst_bytes.to_string());
        if let Some(prio) = prio {
            option("prio", prio.to_string());
        }
        option("quantum", p.quantum_bytes.to_string());
        command
    }
}

/// `major:minor` in tc's hexadecimal class-id syntax.
pub fn class_id(major: u16, minor: u16) -> String {
    format!("{major:x}:{minor:x}")
}

/// Parses tc's `major:minor` (hexadecimal) class id.
pub fn parse_class_id(text: &str) -> Option<(u16, u16)> {
    let (major, minor) = text.split_once(':')?;
    let major = if major.is_empty() { 0 } else { u16::from_str_radix(major, 16).ok()? };
    let minor = if minor.is_empty() { 0 } else { u16::from_str_radix(minor, 16).ok()? };
    Some((major, minor))
}

/// Removes the root qdisc, and with it every class and queued packet.
pub fn teardown_command(dev: &str) -> Vec<String> {
    argv(&["tc", "qdisc", "del", "dev", dev, "root"])
}

/// Turns TCP segmentation, generic segmentation and generic receive offload
/// off in the device's features.
pub fn offloads_off_command(dev: &str) -> Vec<String> {
    argv(&["ethtool", "-K", dev, "tso", "off", "gso", "off", "gro", "off"])
}

/// Caps GSO packets at one segment. Needed on top of `ethtool -K … gso off`:
/// since Linux 4.19 TCP always builds GSO packets (up to 64 KB) and, when the
/// device lacks GSO, segments them only *after* the qdisc, so HTB would queue,
/// order and drop 64 KB units (measured here: 193,792 bytes of backlog in 3
/// packets). With `gso_max_segs 1` every packet at the qdisc is MTU-sized.
pub fn gso_one_segment_command(dev: &str) -> Vec<String> {
    argv(&["ip", "link", "set", "dev", dev, "gso_max_segs", "1"])
}

pub(crate) fn argv(parts: &[&str]) -> Vec<String> {
    parts.iter().map(|s| s.to_string()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(rate: u64, bands: usize) -> TreeSpec {
        TreeSpec::new(rate, bands, BandMap::default(), 1500).unwrap()
    }

    fn joined(commands: &[Vec<String>]) -> Vec<String> {
        commands.iter().map(|c| c.join(" ")).collect()
    }

    #[test]
    fn default_tree_at_10_mbit() {
        let got = joined(&spec(10_000_000, 6).setup_commands("sfx0"));
        let want = [
            "tc qdisc add dev sfx0 root handle 1: htb default a",
            "tc class add dev sfx0 parent 1: classid 1:1 htb rate 10000000bit ceil 10000000bit burst 6056 cburst 6056 quantum 1514",
            "tc class add dev sfx0 parent 1:1 classid 1:a htb rate 10000bit ceil 10000000bit burst 1514 cburst 6056 prio 0 quantum 1514",
            "tc qdisc add dev sfx0 parent 1:a pfifo limit 10000",
            "tc class add dev sfx0 parent 1:1 classid 1:b htb rate 10000bit ceil 10000000bit burst 1514 cburst 6056 prio 1 quantum 1514",
            "tc qdisc add dev sfx0 parent 1:b pfifo limit 10000",
            "tc class add dev sfx0 parent 1:1 classid 1:c htb rate 10000bit ceil 10000000bit burst 1514 cburst 6056 prio 2 quantum 1514",
            "tc qdisc add dev sfx0 parent 1:c pfifo limit 10000",
            "tc class add dev sfx0 parent 1:1 classid 1:d htb rate 10000bit ceil 10000000bit burst 1514 cburst 6056 prio 3 quantum 1514",
            "tc qdisc add dev sfx0 parent 1:d pfifo limit 10000",
            "tc class add dev sfx0 parent 1:1 classid 1:e htb rate 10000bit ceil 10000000bit burst 1514 cburst 6056 prio 4 quantum 1514",
            "tc qdisc add dev sfx0 parent 1:e pfifo limit 10000",
            "tc class add dev sfx0 parent 1:1 classid 1:f htb rate 10000bit ceil 10000000bit burst 1514 cburst 6056 prio 5 quantum 1514",
            "tc qdisc add dev sfx0 parent 1:f pfifo limit 10000",
            "tc class add dev sfx0 parent 1:1 classid 1:10 htb rate 10000bit ceil 10000000bit burst 1514 cburst 6056 prio 6 quantum 1514",
            "tc qdisc add dev sfx0 parent 1:10 pfifo limit 10000",
        ];
        assert_eq!(got, want);
    }

    #[test]
    fn class_ids_match_so_priority() {
        // The whole point: a socket with BandMap::so_priority(band) lands in that band's class.
        for map in [BandMap::default(), BandMap { major: 0x2a, minor_base: 0x10 }, BandMap { major: 1, minor_base: 1 }]
        {
            let s = TreeSpec::new(10_000_000, 7, map, 1500).unwrap();
            let commands = s.setup_commands("d");
            for band in s.bands() {
                let prio = map.so_priority(band);
                let id = class_id((prio >> 16) as u16, (prio & 0xffff) as u16);
                let line = &commands[2 + 2 * usize::from(band.index())];
                let queue = &commands[3 + 2 * usize::from(band.index())];
                assert_eq!(queue[6], id, "band {band}'s queue hangs under its class");
                let at = line.iter().position(|a| a == "classid").unwrap();
                assert_eq!(line[at + 1], id, "band {band}");
                assert_eq!(parse_class_id(&id), Some((map.major, map.class_minor(band))));
                let prio_at = line.iter().position(|a| a == "prio").unwrap();
                assert_eq!(line[prio_at + 1], band.index().to_string());
            }
            // The root class never collides with a band class.
            let root = s.root_minor();
            assert!(s.bands().all(|b| map.class_minor(b) != root), "{map:?}");
            // Unclassified packets go to band 0.
            let default_at = commands[0].iter().position(|a| a == "default").unwrap();
            assert_eq!(u16::from_str_radix(&commands[0][default_at + 1], 16).unwrap(), map.class_minor(Band::SETUP));
        }
    }

    #[test]
    fn params_scale_with_rate_and_mtu() {
        let table: &[(u64, u32, HtbParams)] = &[
            (
                10_000_000,
                1500,
                HtbParams {
                    quantum_bytes: 1514,
                    burst_bytes: 6056,
                    band_rate_bits_per_s: 10_000,
                    band_burst_bytes: 1514,
                },
            ),
            (
                100_000_000,
                1500,
                HtbParams {
                    quantum_bytes: 1514,
                    burst_bytes: 25_000,
                    band_rate_bits_per_s: 100_000,
                    band_burst_bytes: 1514,
                },
            ),
            (
                1_000_000_000,
                9000,
                HtbParams {
                    quantum_bytes: 9014,
                    burst_bytes: 250_000,
                    band_rate_bits_per_s: 1_000_000,
                    band_burst_bytes: 9014,
                },
            ),
            (
                100_000,
                1500,
                HtbParams {
                    quantum_bytes: 1514,
                    burst_bytes: 6056,
                    band_rate_bits_per_s: 1_000,
                    band_burst_bytes: 1514,
                },
            ),
        ];
        for (rate, mtu, want) in table {
            let s = TreeSpec::new(*rate, 6, BandMap::default(), *mtu).unwrap();
            assert_eq!(s.params(), *want, "rate {rate} mtu {mtu}");
            // Guaranteed rates of all bands together stay under 1% of the link.
            assert!(want.band_rate_bits_per_s * 8 <= rate / 100 + 8_000);
            // Quantum never below one MTU-sized packet.
            assert!(want.quantum_bytes >= *mtu);
        }
    }

    #[test]
    fn band_counts() {
        assert_eq!(spec(10_000_000, 1).setup_commands("d").len(), 2 + 2 * 2);
        assert_eq!(spec(10_000_000, 7).setup_commands("d").len(), 2 + 2 * 8);
        let map = BandMap::default();
        assert!(matches!(TreeSpec::new(1, 0, map, 1500), Err(UplinkError::Bands { bands: 0 })));
        assert!(matches!(TreeSpec::new(1, 8, map, 1500), Err(UplinkError::Bands { bands: 8 })));
        assert!(matches!(
            TreeSpec::new(1, 6, BandMap { major: 0, minor_base: 10 }, 1500),
            Err(UplinkError::BandMap { .. })
        ));
        assert!(matches!(
            TreeSpec::new(1, 6, BandMap { major: 1, minor_base: 0 }, 1500),
            Err(UplinkError::BandMap { .. })
        ));
        assert!(matches!(TreeSpec::new(1, 6, map, 100), Err(UplinkError::Mtu { mtu_bytes: 100 })));
        let s = spec(10_000_000, 6);
        assert_eq!(s.queue_packets, DEFAULT_QUEUE_PACKETS);
        let deep = s.with_queue_packets(1000).unwrap();
        assert!(deep
            .setup_commands("d")
            .iter()
            .any(|c| c.join(" ") == "tc qdisc add dev d parent 1:10 pfifo limit 1000"));
        for bad in [0, MAX_QUEUE_PACKETS + 1] {
            assert!(matches!(s.with_queue_packets(bad), Err(UplinkError::QueuePackets { .. })), "{bad}");
        }
    }

    #[test]
    fn class_id_syntax() {
        assert_eq!(class_id(1, 10), "1:a");
        assert_eq!(class_id(0x10, 0x11), "10:11");
        assert_eq!(parse_class_id("1:a"), Some((1, 10)));
        assert_eq!(parse_class_id("1:"), Some((1, 0)));
        assert_eq!(parse_class_id(":10"), Some((0, 16)));
        assert_eq!(parse_class_id("1:10000"), None);
        assert_eq!(parse_class_id("x:1"), None);
        assert_eq!(parse_class_id("root"), None);
    }

    #[test]
    fn teardown_and_offloads() {
        assert_eq!(teardown_command("eth0").join(" "), "tc qdisc del dev eth0 root");
        assert_eq!(offloads_off_command("eth0").join(" "), "ethtool -K eth0 tso off gso off gro off");
        assert_eq!(gso_one_segment_command("eth0").join(" "), "ip link set dev eth0 gso_max_segs 1");
    }
}
