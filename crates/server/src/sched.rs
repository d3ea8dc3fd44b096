//! Applies the scheduling decisions of `shortfirst_core::bands` to sockets.
//!
//! The ranking itself (size → band, crossings, auto cutoffs) lives in core; this
//! module only (1) picks the cutoffs a policy uses, learning them online for
//! `srpt2` and `--cutoffs auto`, and (2) turns a band into one `setsockopt(SO_PRIORITY)`
//! when, and only when, a socket's band changes.
//!
//! For `srrt` the cutoffs are durations in microseconds (the same band
//! arithmetic), and what the window learns from is each response's estimated
//! remaining response time at its start ([`crate::srrt`]).
//!
//! Auto cutoffs: every response's size goes into a bounded window
//! ([`ServerConfig::auto_window`] sizes, oldest dropped); every
//! [`ServerConfig::auto_recompute_every`] responses the cutoffs are recomputed and
//! published. Connections pick the new cutoffs up at their next response (a
//! response keeps the cutoffs it started with).

use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use shortfirst_core::bands::{AutoCutoffs, Band, BandMap, Cutoffs};
use shortfirst_core::srrt::RrtCutoffs;

use crate::config::{CutoffsSpec, Policy, RrtCutoffsSpec, ServerConfig};

/// Data bands `srpt --cutoffs auto` learns (the paper's six classes).
pub const AUTO_DATA_BANDS: usize = 6;

/// Called after each successful `SO_PRIORITY` change with the socket and the new
/// value: a test hook to observe the crossings the kernel really saw.
pub type PriorityObserver = Arc<dyn Fn(RawFd, u32) + Send + Sync>;

struct Auto {
    window: AutoCutoffs,
    since_recompute: usize,
}

/// The cutoff chooser: which cutoffs responses start with, per policy (fixed, or learned
/// from the sizes or estimates seen).
pub struct CutoffChooser {
    policy: Policy,
    band_map: BandMap,
    current: RwLock<Arc<Cutoffs>>,
    generation: AtomicU64,
    auto: Option<Mutex<Auto>>,
    recompute_every: usize,
}

impl CutoffChooser {
    pub fn new(config: &ServerConfig) -> CutoffChooser {
        let (initial, auto_bands) = match (&config.policy, &config.cutoffs) {
            (Policy::Fair | Policy::Las, _) => (Cutoffs::fair(), None),
            (Policy::Srpt, CutoffsSpec::List(c)) => (c.clone(), None),
            (Policy::Srpt, CutoffsSpec::Auto) => (Cutoffs::paper(), Some(AUTO_DATA_BANDS)),
            // The paper's two-class split: 1 KB until the median is known.
            (Policy::Srpt2, _) => (Cutoffs::new(vec![1_000]).expect("valid"), Some(2)),
            // Response-time cutoffs in µs; `auto` starts from the default list.
            (Policy::Srrt, _) => match &config.rrt_cutoffs {
                RrtCutoffsSpec::List(c) => (c.as_cutoffs_us().clone(), None),
                RrtCutoffsSpec::Auto => (RrtCutoffs::default_list().as_cutoffs_us().clone(), Some(AUTO_DATA_BANDS)),
            },
        };
        CutoffChooser {
            policy: config.policy,
            band_map: BandMap::default(),
            current: RwLock::new(Arc::new(initial)),
            generation: AtomicU64::new(0),
            auto: auto_bands.map(|bands| {
                Mutex::new(Auto { window: AutoCutoffs::new(bands, config.auto_window), since_recompute: 0 })
            }),
            recompute_every: config.auto_recompute_every,
        }
    }

    pub fn policy(&self) -> Policy {
        self.policy
    }

    pub fn band_map(&self) -> BandMap {
        self.band_map
    }

    /// The cutoffs now in force.
    pub fn cutoffs(&self) -> Arc<Cutoffs> {
        self.current.read().expect("cutoffs lock poisoned").clone()
    }

    /// Refreshes a connection's cached cutoffs if they were republished; cheap
    /// (one atomic load) when they were not.
    pub fn refresh(&self, cache: &mut CutoffsCache) {
        let generation = self.generation.load(Ordering::Acquire);
        if generation != cache.generation {
            cache.cutoffs = self.cutoffs();
            cache.rrt = self.rrt_view(&cache.cutoffs);
            cache.generation = generation;
        }
    }

    /// `srrt`'s typed view of the cutoffs in force (built once per publication
    /// per connection, not per response).
    fn rrt_view(&self, cutoffs: &Cutoffs) -> Option<Arc<RrtCutoffs>> {
        (self.policy == Policy::Srrt).then(|| Arc::new(RrtCutoffs::from_cutoffs_us(cutoffs.clone())))
    }

    /// Records what a response is ranked by (its size; for `srrt` its estimate at
    /// start in µs) for the auto policies; recomputes periodically.
    pub fn observe(&self, rank_value: u64) {
        let Some(auto) = &self.auto else { return };
        let mut auto = auto.lock().expect("auto cutoffs lock poisoned");
        auto.window.observe(rank_value.max(1));
        auto.since_recompute += 1;
        if auto.since_recompute >= self.recompute_every {
            auto.since_recompute = 0;
            if let Some(cutoffs) = auto.window.compute() {
                let mut current = self.current.write().expect("cutoffs lock poisoned");
                if **current != cutoffs {
                    if self.policy == Policy::Srrt {
                        let rrt = RrtCutoffs::from_cutoffs_us(cutoffs.clone());
                        tracing::info!(rrt_cutoffs = %rrt, "auto RRT cutoffs recomputed");
                    } else {
                        tracing::info!(cutoffs = %cutoffs, "auto cutoffs recomputed");
                    }
                    *current = Arc::new(cutoffs);
                    self.generation.fetch_add(1, Ordering::Release);
                }
            }
        }
    }
}

/// A connection's copy of the cutoffs, refreshed by [`CutoffChooser::refresh`].
pub struct CutoffsCache {
    pub cutoffs: Arc<Cutoffs>,
    /// The same cutoffs as durations, under `srrt` only.
    pub rrt: Option<Arc<RrtCutoffs>>,
    generation: u64,
}

impl CutoffsCache {
    pub fn new(chooser: &CutoffChooser) -> CutoffsCache {
        let generation = chooser.generation.load(Ordering::Acquire);
        let cutoffs = chooser.cutoffs();
        CutoffsCache { rrt: chooser.rrt_view(&cutoffs), cutoffs, generation }
    }
}

/// Sets an integer socket option.
pub fn setsockopt_int(fd: RawFd, level: libc::c_int, name: libc::c_int, value: libc::c_int) -> std::io::Result<()> {
    // SAFETY: `fd` is an open socket owned by the caller; the option value is a
    // c_int living for the duration of the call, with its exact size passed.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Sets `SO_PRIORITY` on a socket.
pub fn set_so_priority(fd: RawFd, priority: u32) -> std::io::Result<()> {
    setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_PRIORITY, priority as libc::c_int)
}

/// Reads `SO_PRIORITY` back from a socket (tests, diagnostics).
pub fn so_priority(fd: RawFd) -> std::io::Result<u32> {
    let mut value: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: as above; the kernel writes at most `len` bytes into `value`.
    let rc = unsafe {
        libc::getsockopt(fd, libc::SOL_SOCKET, libc::SO_PRIORITY, (&mut value as *mut libc::c_int).cast(), &mut len)
    };
    if rc == 0 {
        Ok(value as u32)
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// The band a socket is in, so a priority is only set when it changes.
pub struct BandSocket {
    fd: RawFd,
    band: Band,
    band_map: BandMap,
    enabled: bool,
    observer: Option<PriorityObserver>,
}

impl BandSocket {
    /// A freshly accepted socket: it inherited the listener's set-up priority.
    pub fn accepted(
        socket: &impl AsRawFd,
        band_map: BandMap,
        enabled: bool,
        observer: Option<PriorityObserver>,
    ) -> BandSocket {
        BandSocket { fd: socket.as_raw_fd(), band: Band::SETUP, band_map, enabled, observer }
    }

    pub fn band(&self) -> Band {
        self.band
    }

    /// Moves the socket to `band`; a no-op (no syscall) if it is already there.
    /// A failure is logged and the connection carries on in its old band: the
    /// response is still correct, only its scheduling is degraded.
    pub fn set(&mut self, band: Band) {
        debug_assert!(band.is_data(), "response data never goes in the set-up band");
        if band == self.band {
            return;
        }
        self.band = band;
        if !self.enabled {
            return;
        }
        let priority = self.band_map.so_priority(band);
        match set_so_priority(self.fd, priority) {
            Ok(()) => {
                if let Some(observe) = &self.observer {
                    observe(self.fd, priority);
                }
            }
            Err(e) => tracing::warn!(error = %e, band = %band, "setsockopt(SO_PRIORITY) failed"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_pick_their_cutoffs() {
        let mut c = ServerConfig::new("/");
        c.policy = Policy::Fair;
        assert_eq!(*CutoffChooser::new(&c).cutoffs(), Cutoffs::fair());
        c.policy = Policy::Srpt;
        assert_eq!(*CutoffChooser::new(&c).cutoffs(), Cutoffs::server_default());
        c.policy = Policy::Srpt2;
        assert_eq!(CutoffChooser::new(&c).cutoffs().as_slice(), &[1_000]);
    }

    #[test]
    fn srpt2_learns_the_median_and_connections_see_it() {
        let mut c = ServerConfig::new("/");
        c.policy = Policy::Srpt2;
        c.auto_window = 1_000;
        c.auto_recompute_every = 500;
        let s = CutoffChooser::new(&c);
        let mut cache = CutoffsCache::new(&s);
        for i in 0..499u64 {
            s.observe(10_000 + i % 3);
        }
        s.refresh(&mut cache);
        assert_eq!(cache.cutoffs.as_slice(), &[1_000], "not recomputed before the period");
        s.observe(10_000);
        s.refresh(&mut cache);
        assert_eq!(cache.cutoffs.as_slice(), &[10_001]);
    }

    #[test]
    fn cutoffs_auto_starts_from_the_paper_and_learns() {
        let mut c = ServerConfig::new("/");
        c.cutoffs = CutoffsSpec::Auto;
        c.auto_window = 1_000;
        c.auto_recompute_every = 1_000;
        let s = CutoffChooser::new(&c);
        assert_eq!(*s.cutoffs(), Cutoffs::paper());
        // 1..=1000 bytes: median 500, 99th percentile 990.
        for size in 1..=1_000u64 {
            s.observe(size);
        }
        let learned = s.cutoffs();
        assert_eq!(learned.as_slice().len(), AUTO_DATA_BANDS - 1);
        assert_eq!(learned.as_slice()[0], 500);
        assert_eq!(*learned.as_slice().last().unwrap(), 990);
    }

    #[test]
    fn band_socket_sets_only_on_change() {
        let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let seen2 = seen.clone();
        let observer: PriorityObserver = Arc::new(move |fd, p| seen2.lock().unwrap().push((fd, p)));
        let map = BandMap::default();
        let mut b = BandSocket::accepted(&sock, map, true, Some(observer));
        // Priorities above 6 need CAP_NET_ADMIN; without it this test has nothing to observe.
        if set_so_priority(sock.as_raw_fd(), map.so_priority(Band::SETUP)).is_err() {
            eprintln!("skipping: setting SO_PRIORITY needs CAP_NET_ADMIN");
            return;
        }
        for band in [3, 3, 2, 2, 2, 1] {
            b.set(Band::new(band).unwrap());
        }
        let got: Vec<u32> = seen.lock().unwrap().iter().map(|&(_, p)| p).collect();
        let want: Vec<u32> = [3, 2, 1].iter().map(|&i| map.so_priority(Band::new(i).unwrap())).collect();
        assert_eq!(got, want);
        assert_eq!(so_priority(sock.as_raw_fd()).unwrap(), map.so_priority(Band::FIRST_DATA));
    }
}
