//! Size classes and priority bands: the SRPT approximation the server uses.
//!
//! A response's priority is a *band*: band 0 is reserved for connection set-up
//! (SYN-ACKs, request parsing) and never carries response data; data bands are
//! `1..=cutoffs.len() + 1`, band 1 being the smallest remaining sizes. A response
//! starts in the band of its full size and moves to a better (lower) band each
//! time its remaining bytes fall to or below a cutoff, never the other way
//! (Harchol-Balter et al. 2003, §2.2).
//!
//! Everything here is pure: sizes in, bands out. The server turns a band into a
//! socket priority ([`BandMap`]), the simulator into a queue index.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

/// The most data bands a policy may use. HTB has 8 priority levels (0..=7) and
/// band 0 is set-up only, so 7 data bands fit; more buys almost nothing (§2.2.2).
pub const MAX_DATA_BANDS: usize = 7;

/// The server's default cutoffs: spaced by a factor of 4 from 1 KB to 1 MB. A web page's
/// resources (up to a few hundred KB) start in other bands than multi-megabyte downloads, and
/// a heavy tail's large files are still ranked among themselves; in simulation they beat the
/// paper's 1K..50K on its own World-Cup-like trace too (decision 0020).
pub const DEFAULT_CUTOFFS_BYTES: [u64; 6] = [1_000, 4_000, 16_000, 64_000, 256_000, 1_000_000];

/// Data bands the default cutoffs make, and so the bands `shortfirst uplink setup` builds
/// unless told otherwise: a tree with fewer would send the largest responses' packets to its
/// default class, band 0 (set-up).
pub const DEFAULT_DATA_BANDS: usize = DEFAULT_CUTOFFS_BYTES.len() + 1;

const _: () = assert!(DEFAULT_DATA_BANDS <= MAX_DATA_BANDS);

/// Largest cutoff we accept: 1 TiB. A cutoff above every plausible response only
/// hides a typo (e.g. a missing unit turned into bits).
pub const MAX_CUTOFF_BYTES: u64 = 1 << 40;

/// A priority band. Lower is served first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Band(u8);

impl Band {
    /// Connection set-up: SYN-ACKs and everything before a response size is known.
    pub const SETUP: Band = Band(0);
    /// The best data band: the smallest remaining responses (and every response under FAIR).
    pub const FIRST_DATA: Band = Band(1);

    /// A band from its index; `None` above the last band HTB can express.
    pub fn new(index: u8) -> Option<Band> {
        (usize::from(index) <= MAX_DATA_BANDS).then_some(Band(index))
    }

    pub fn index(self) -> u8 {
        self.0
    }

    pub fn is_data(self) -> bool {
        self.0 > 0
    }
}

impl std::fmt::Display for Band {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CutoffsError {
    #[error("too many cutoffs: {count} given, at most {max} (one fewer than the {bands} data bands)", max = MAX_DATA_BANDS - 1, bands = MAX_DATA_BANDS)]
    TooMany { count: usize },
    #[error("cutoff #{position} is {value_bytes} bytes: cutoffs must be at least 1 byte")]
    Zero { position: usize, value_bytes: u64 },
    #[error("cutoff #{position} is {value_bytes} bytes: cutoffs must be at most {max} bytes", max = MAX_CUTOFF_BYTES)]
    TooLarge { position: usize, value_bytes: u64 },
    #[error("cutoff #{position} ({value_bytes} bytes) is not above the one before it ({previous_bytes} bytes): cutoffs must be strictly increasing")]
    NotIncreasing { position: usize, value_bytes: u64, previous_bytes: u64 },
    #[error("cutoff #{position} {text:?}: expected a byte count such as 1500, 2K, 5KB or 1.5M")]
    Syntax { position: usize, text: String },
}

/// Strictly increasing size cutoffs in bytes; `k` cutoffs make `k + 1` data bands.
/// No cutoffs at all is FAIR: every response in band 1.
#[derive(Clone, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Cutoffs {
    bytes: Vec<u64>,
}

impl Cutoffs {
    /// What `serve` uses unless told otherwise: [`DEFAULT_CUTOFFS_BYTES`].
    pub fn server_default() -> Cutoffs {
        Cutoffs { bytes: DEFAULT_CUTOFFS_BYTES.to_vec() }
    }

    /// The paper's six classes: 1 KB, 2 KB, 5 KB, 20 KB, 50 KB (§2.2.4), tuned to a 1998 trace
    /// whose responses were mostly a few KB.
    pub fn paper() -> Cutoffs {
        Cutoffs { bytes: vec![1_000, 2_000, 5_000, 20_000, 50_000] }
    }

    /// One band for everything: FAIR sharing.
    pub fn fair() -> Cutoffs {
        Cutoffs { bytes: Vec::new() }
    }

    pub fn new(bytes: Vec<u64>) -> Result<Cutoffs, CutoffsError> {
        if bytes.len() > MAX_DATA_BANDS - 1 {
            return Err(CutoffsError::TooMany { count: bytes.len() });
        }
        for (i, &value_bytes) in bytes.iter().enumerate() {
            let position = i + 1;
            if value_bytes == 0 {
                return Err(CutoffsError::Zero { position, value_bytes });
            }
            if value_bytes > MAX_CUTOFF_BYTES {
                return Err(CutoffsError::TooLarge { position, value_bytes });
            }
            if i > 0 && value_bytes <= bytes[i - 1] {
                return Err(CutoffsError::NotIncreasing { position, value_bytes, previous_bytes: bytes[i - 1] });
            }
        }
        Ok(Cutoffs { bytes })
    }

    /// Parses `1K,2K,5K,20K,50K` (K = 1000, Ki = 1024; also M/Mi, G/Gi, optional
    /// trailing `B`). An empty string is FAIR.
    pub fn parse(text: &str) -> Result<Cutoffs, CutoffsError> {
        let text = text.trim();
        if text.is_empty() {
            return Ok(Cutoffs::fair());
        }
        let bytes = text
            .split(',')
            .enumerate()
            .map(|(i, part)| {
                parse_size_bytes(part)
                    .ok_or_else(|| CutoffsError::Syntax { position: i + 1, text: part.trim().to_string() })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Cutoffs::new(bytes)
    }

    pub fn as_slice(&self) -> &[u64] {
        &self.bytes
    }

    /// Number of data bands these cutoffs make.
    pub fn data_bands(&self) -> usize {
        self.bytes.len() + 1
    }

    /// The band of a response with `remaining_bytes` left to send: 1 plus the
    /// number of cutoffs it is above. Zero bytes left still maps to band 1 (a
    /// header-only response is data, and data never goes in band 0).
    pub fn band_for_remaining(&self, remaining_bytes: u64) -> Band {
        let above = self.bytes.partition_point(|&c| c < remaining_bytes);
        Band(1 + above as u8)
    }
}

impl std::fmt::Display for Cutoffs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = self.bytes.iter().map(|b| b.to_string()).collect();
        write!(f, "{}", parts.join(","))
    }
}

/// Parses a byte count with an optional decimal (K, M, G) or binary (Ki, Mi, Gi)
/// suffix and optional trailing `B`, case-insensitive: `1500`, `2K`, `5KB`, `1.5M`, `64KiB`
/// (the shared rule of [`crate::units::parse_size_bytes`]).
pub fn parse_size_bytes(text: &str) -> Option<u64> {
    crate::units::parse_size_bytes(text).ok()
}

/// Where one response stands: its band now, and the bytes still to send.
///
/// The driver calls [`Response::sent`] after each write; it returns the new band
/// only when the write crossed a cutoff, so the server makes one `setsockopt`
/// per crossing, never one per write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    band: Band,
    remaining_bytes: u64,
}

impl Response {
    /// A response of `size_bytes` (headers included, if the driver counts them).
    pub fn start(cutoffs: &Cutoffs, size_bytes: u64) -> Response {
        Response { band: cutoffs.band_for_remaining(size_bytes), remaining_bytes: size_bytes }
    }

    pub fn band(&self) -> Band {
        self.band
    }

    pub fn remaining_bytes(&self) -> u64 {
        self.remaining_bytes
    }

    /// Records `sent_bytes` more written. Returns `Some(band)` when the response
    /// moved to a better band. Sending more than remains is clamped: the driver's
    /// count of header bytes may differ from its estimate, and a band can only
    /// improve, so clamping is safe.
    ///
    /// The write that empties the response never moves it. The kernel stamps a
    /// packet with the socket's priority when it transmits it, not when the
    /// bytes were written, so after the last write the connection's band decides
    /// where the bytes still queued in the socket go: the bytes of that last
    /// write, whose remaining size the current band already describes. Moving to
    /// the band of "0 bytes left" would promote up to a send buffer of a large
    /// response's tail into the best band, and cost a keep-alive connection two
    /// `setsockopt` calls per response (there and back).
    pub fn sent(&mut self, cutoffs: &Cutoffs, sent_bytes: u64) -> Option<Band> {
        self.remaining_bytes = self.remaining_bytes.saturating_sub(sent_bytes);
        if self.remaining_bytes == 0 {
            return None;
        }
        let band = cutoffs.band_for_remaining(self.remaining_bytes);
        debug_assert!(band <= self.band, "a band never gets worse as bytes drain");
        if band < self.band {
            self.band = band;
            Some(band)
        } else {
            None
        }
    }
}

/// How a band becomes a socket priority: `SO_PRIORITY = (major << 16) | minor`
/// classifies a packet straight into HTB class `major:minor` (brief §3). Band `b`
/// is class `major:(minor_base + b)`; HTB class minor 0 is the qdisc itself, so
/// `minor_base` is at least 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BandMap {
    pub major: u16,
    pub minor_base: u16,
}

impl Default for BandMap {
    fn default() -> Self {
        BandMap { major: 1, minor_base: 10 }
    }
}

impl BandMap {
    /// HTB class minor of a band.
    pub fn class_minor(self, band: Band) -> u16 {
        self.minor_base + u16::from(band.index())
    }

    /// The `SO_PRIORITY` value that puts a socket's packets in `band`.
    pub fn so_priority(self, band: Band) -> u32 {
        (u32::from(self.major) << 16) | u32::from(self.class_minor(band))
    }

    /// The band whose class `major:minor` is, if any (e.g. to label tc counters).
    pub fn band_of_class(self, major: u16, minor: u16) -> Option<Band> {
        if major != self.major || minor < self.minor_base {
            return None;
        }
        u8::try_from(minor - self.minor_base).ok().and_then(Band::new)
    }
}

/// Cutoffs derived from the response sizes seen lately, by the paper's rules of
/// thumb (§2.2.2): the first cutoff near the median, the last with about 1% of
/// responses above it, logarithmic spacing in between.
///
/// The window is a ring of the last `window_len` sizes; older sizes fall out, so
/// memory is bounded and the cutoffs follow the current mix.
#[derive(Clone, Debug)]
pub struct AutoCutoffs {
    window: VecDeque<u64>,
    window_len: usize,
    data_bands: usize,
}

/// Fraction of responses the last cutoff leaves above it (the paper: 0.5–1%).
pub const AUTO_TOP_FRACTION: f64 = 0.01;
/// Below this many observations the rules of thumb are noise; keep the defaults.
pub const AUTO_MIN_OBSERVATIONS: usize = 100;

impl AutoCutoffs {
    /// `data_bands` in `2..=MAX_DATA_BANDS`; `window_len` at least
    /// [`AUTO_MIN_OBSERVATIONS`].
    pub fn new(data_bands: usize, window_len: usize) -> AutoCutoffs {
        assert!((2..=MAX_DATA_BANDS).contains(&data_bands), "data_bands {data_bands} outside 2..={MAX_DATA_BANDS}");
        assert!(window_len >= AUTO_MIN_OBSERVATIONS, "window_len {window_len} below {AUTO_MIN_OBSERVATIONS}");
        AutoCutoffs { window: VecDeque::with_capacity(window_len), window_len, data_bands }
    }

    pub fn observe(&mut self, size_bytes: u64) {
        if self.window.len() == self.window_len {
            self.window.pop_front();
        }
        self.window.push_back(size_bytes);
    }

    pub fn observations(&self) -> usize {
        self.window.len()
    }

    /// Cutoffs for the current window, or `None` with too few observations.
    /// Cost O(n log n) in the window: call it every few thousand responses, not per request.
    pub fn compute(&self) -> Option<Cutoffs> {
        if self.window.len() < AUTO_MIN_OBSERVATIONS {
            return None;
        }
        let mut sorted: Vec<u64> = self.window.iter().copied().collect();
        sorted.sort_unstable();
        Some(cutoffs_from_sorted(&sorted, self.data_bands))
    }
}

/// The rules of thumb applied to sorted sizes. Collapses duplicate cutoffs, so a
/// narrow distribution yields fewer bands rather than empty ones.
pub fn cutoffs_from_sorted(sorted_bytes: &[u64], data_bands: usize) -> Cutoffs {
    assert!(!sorted_bytes.is_empty(), "no sizes to derive cutoffs from");
    assert!((2..=MAX_DATA_BANDS).contains(&data_bands));
    debug_assert!(sorted_bytes.windows(2).all(|w| w[0] <= w[1]), "sizes must be sorted");
    let quantile = |q: f64| -> u64 {
        let rank = ((sorted_bytes.len() as f64) * q).ceil() as usize;
        sorted_bytes[rank.clamp(1, sorted_bytes.len()) - 1]
    };
    let first = quantile(0.5).max(1);
    let n_cutoffs = data_bands - 1;
    let mut bytes = vec![first];
    if n_cutoffs > 1 {
        let last = quantile(1.0 - AUTO_TOP_FRACTION).max(first);
        let ratio = last as f64 / first as f64;
        for i in 1..n_cutoffs {
            let c = (first as f64 * ratio.powf(i as f64 / (n_cutoffs - 1) as f64)).round() as u64;
            bytes.push(c.min(MAX_CUTOFF_BYTES));
        }
    }
    bytes.dedup();
    Cutoffs::new(bytes).expect("derived cutoffs are increasing, non-zero and bounded")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_separates_page_resources_from_downloads() {
        let c = Cutoffs::server_default();
        assert_eq!(Cutoffs::new(DEFAULT_CUTOFFS_BYTES.to_vec()).as_ref(), Ok(&c), "the default is valid");
        assert_eq!(c.data_bands(), DEFAULT_DATA_BANDS);
        // A web font (140 KB) starts two bands ahead of downloads of megabytes; under the
        // paper's cutoffs all three share the last band.
        let bands = |c: &Cutoffs| [140_000, 2_000_000, 5_000_000].map(|s| c.band_for_remaining(s).index());
        assert_eq!(bands(&c), [5, 7, 7]);
        assert_eq!(bands(&Cutoffs::paper()), [6, 6, 6]);
        // The download reaches the font's band only once no more than 256 KB is left of it.
        let mut download = Response::start(&c, 5_000_000);
        assert_eq!(download.sent(&c, 5_000_000 - 256_001), Some(Band(6)));
        assert_eq!(download.sent(&c, 1), Some(Band(5)));
    }

    #[test]
    fn band_for_remaining_table() {
        let c = Cutoffs::paper();
        let table: &[(u64, u8)] = &[
            (0, 1),
            (1, 1),
            (1_000, 1),
            (1_001, 2),
            (2_000, 2),
            (2_001, 3),
            (5_000, 3),
            (5_001, 4),
            (20_000, 4),
            (20_001, 5),
            (50_000, 5),
            (50_001, 6),
            (2_000_000, 6),
            (u64::MAX, 6),
        ];
        for &(remaining, band) in table {
            assert_eq!(c.band_for_remaining(remaining).index(), band, "remaining {remaining}");
        }
    }

    #[test]
    fn fair_is_one_band() {
        let c = Cutoffs::fair();
        assert_eq!(c.data_bands(), 1);
        for r in [0, 1, 1_000_000, u64::MAX] {
            assert_eq!(c.band_for_remaining(r), Band::FIRST_DATA);
        }
    }

    #[test]
    fn parse_table() {
        let ok: &[(&str, &[u64])] = &[
            ("", &[]),
            ("1K,2K,5K,20K,50K", &[1_000, 2_000, 5_000, 20_000, 50_000]),
            ("1024", &[1024]),
            ("1Ki, 64KiB", &[1024, 65_536]),
            ("1.5M", &[1_500_000]),
            ("1kb,2mb", &[1_000, 2_000_000]),
        ];
        for (text, want) in ok {
            assert_eq!(Cutoffs::parse(text).unwrap().as_slice(), *want, "{text}");
        }
        let bad: &[(&str, CutoffsError)] = &[
            ("1K,abc", CutoffsError::Syntax { position: 2, text: "abc".into() }),
            ("2K,1K", CutoffsError::NotIncreasing { position: 2, value_bytes: 1_000, previous_bytes: 2_000 }),
            ("1K,1K", CutoffsError::NotIncreasing { position: 2, value_bytes: 1_000, previous_bytes: 1_000 }),
            ("0", CutoffsError::Zero { position: 1, value_bytes: 0 }),
            ("1,2,3,4,5,6,7", CutoffsError::TooMany { count: 7 }),
            ("2T", CutoffsError::Syntax { position: 1, text: "2T".into() }),
            ("-1", CutoffsError::Syntax { position: 1, text: "-1".into() }),
            ("0.5", CutoffsError::Syntax { position: 1, text: "0.5".into() }),
            ("2000G", CutoffsError::TooLarge { position: 1, value_bytes: 2_000_000_000_000 }),
        ];
        for (text, want) in bad {
            assert_eq!(&Cutoffs::parse(text).unwrap_err(), want, "{text}");
        }
    }

    #[test]
    fn response_crossings_table() {
        // (size, writes, expected band after each write as Some(new) on crossing)
        let c = Cutoffs::paper();
        let mut r = Response::start(&c, 60_000);
        assert_eq!(r.band().index(), 6);
        let steps: &[(u64, Option<u8>)] = &[
            (5_000, None),     // 55_000 left: still above 50K
            (5_000, Some(5)),  // 50_000: crossed into (20K, 50K]
            (29_000, None),    // 21_000
            (1_000, Some(4)),  // 20_000
            (19_500, Some(1)), // 500: skips bands 3 and 2 in one call
            (500, None),       // 0
            (10, None),        // over-send is clamped
        ];
        for &(sent, want) in steps {
            assert_eq!(r.sent(&c, sent).map(Band::index), want, "after sending {sent}");
        }
        assert_eq!(r.remaining_bytes(), 0);

        // The write that empties a response leaves it where it is: a 1 KiB file
        // behind a 250-byte head stays in band 2 (1K–2K) to its last byte, so a
        // keep-alive connection serving such files never changes band.
        let mut r = Response::start(&c, 1_274);
        assert_eq!(r.band().index(), 2);
        assert_eq!(r.sent(&c, 250), None, "1,024 left: still band 2");
        assert_eq!(r.sent(&c, 1_024), None, "emptied: no crossing");
        assert_eq!(r.band().index(), 2);
        // Emptied in one write from the start: no crossing either.
        let mut r = Response::start(&c, 60_000);
        assert_eq!(r.sent(&c, 60_000), None);
        assert_eq!(r.band().index(), 6);
    }

    #[test]
    fn band_map_round_trip() {
        let m = BandMap::default();
        assert_eq!(m.so_priority(Band::SETUP), (1 << 16) | 10);
        assert_eq!(m.so_priority(Band::new(6).unwrap()), (1 << 16) | 16);
        for i in 0..=MAX_DATA_BANDS as u8 {
            let b = Band::new(i).unwrap();
            assert_eq!(m.band_of_class(1, m.class_minor(b)), Some(b));
        }
        assert_eq!(m.band_of_class(2, 10), None);
        assert_eq!(m.band_of_class(1, 9), None);
        assert_eq!(m.band_of_class(1, 18), None);
        assert!(Band::new(8).is_none());
    }

    #[test]
    fn auto_cutoffs_follow_the_rules_of_thumb() {
        // 1..=10_000 bytes uniformly: median 5_000, 99th percentile 9_900.
        let sorted: Vec<u64> = (1..=10_000).collect();
        let c = cutoffs_from_sorted(&sorted, 6);
        let s = c.as_slice();
        assert_eq!(s.len(), 5);
        assert_eq!(s[0], 5_000);
        assert_eq!(s[4], 9_900);
        // logarithmic spacing: constant ratio between neighbours (within rounding)
        let ratios: Vec<f64> = s.windows(2).map(|w| w[1] as f64 / w[0] as f64).collect();
        for r in &ratios {
            assert!((r - ratios[0]).abs() < 0.01, "{ratios:?}");
        }
        // srpt2: a single cutoff at the median
        assert_eq!(cutoffs_from_sorted(&sorted, 2).as_slice(), &[5_000]);
        // all sizes equal: one cutoff, not five copies
        assert_eq!(cutoffs_from_sorted(&[700; 500], 6).as_slice(), &[700]);
    }

    #[test]
    fn auto_cutoffs_window_is_bounded() {
        let mut a = AutoCutoffs::new(2, 100);
        for _ in 0..99 {
            a.observe(10);
        }
        assert!(a.compute().is_none(), "too few observations");
        for _ in 0..1_000 {
            a.observe(1_000_000);
        }
        assert_eq!(a.observations(), 100);
        assert_eq!(a.compute().unwrap().as_slice(), &[1_000_000], "old sizes have left the window");
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        fn cutoffs() -> impl Strategy<Value = Cutoffs> {
            proptest::collection::btree_set(1u64..10_000_000, 0..MAX_DATA_BANDS)
                .prop_map(|set| Cutoffs::new(set.into_iter().collect()).unwrap())
        }

        proptest! {
            #[test]
            fn smaller_remaining_never_lower_priority(c in cutoffs(), a in 0u64..20_000_000, b in 0u64..20_000_000) {
                let (small, large) = if a <= b { (a, b) } else { (b, a) };
                prop_assert!(c.band_for_remaining(small) <= c.band_for_remaining(large));
            }

            #[test]
            fn data_never_in_setup_band(c in cutoffs(), r in any::<u64>()) {
                let band = c.band_for_remaining(r);
                prop_assert!(band.is_data());
                prop_assert!(usize::from(band.index()) <= c.data_bands());
            }

            #[test]
            fn each_cutoff_crossed_at_most_once(c in cutoffs(), size in 0u64..20_000_000, writes in proptest::collection::vec(1u64..200_000, 1..200)) {
                let mut r = Response::start(&c, size);
                let mut crossed = std::collections::BTreeSet::new();
                let mut last = r.band();
                for w in writes {
                    if let Some(b) = r.sent(&c, w) {
                        prop_assert!(b < last, "crossing must improve the band");
                        prop_assert!(b.is_data());
                        prop_assert!(crossed.insert(b), "band {b} entered twice");
                        last = b;
                    }
                }
                prop_assert!(crossed.len() <= c.as_slice().len());
                if r.remaining_bytes() > 0 {
                    prop_assert_eq!(r.band(), c.band_for_remaining(r.remaining_bytes()));
                } else {
                    // Emptied: the band of the bytes of the last write, never better.
                    prop_assert!(r.band() >= c.band_for_remaining(0));
                }
            }

            #[test]
            fn derived_cutoffs_are_valid(mut sizes in proptest::collection::vec(1u64..5_000_000, 1..2_000), bands in 2usize..=MAX_DATA_BANDS) {
                sizes.sort_unstable();
                let c = cutoffs_from_sorted(&sizes, bands);
                prop_assert!(!c.as_slice().is_empty());
                prop_assert!(c.data_bands() <= bands);
                // the first cutoff is the median: at least half the sizes at or below it
                let at_or_below = sizes.iter().filter(|&&s| s <= c.as_slice()[0]).count();
                prop_assert!(at_or_below * 2 >= sizes.len());
            }
        }
    }
}
