//! The closed model: `users` users, each sending its next request a think
//! time after the previous one completed, drawing requests from a shared
//! trace or walking a session model of its own.

use super::config::{Config, Model, Source};
use super::dispatch::open_trace;
use super::sys::stopped;
use super::worker::{Ctx, Timed};
use super::LoadError;
use crate::dist::TimeDist;
use crate::http::Conn;
use crate::session::SessionModel;
use crate::trace::{TraceError, TraceIter, TraceRecord};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Shared state of the closed model.
pub(super) struct ClosedShared {
    trace: Option<Mutex<TraceIter>>,
    /// The first error reading the shared trace; it ends the run.
    pub(super) trace_error: Mutex<Option<TraceError>>,
    session: Option<SessionModel>,
    think: TimeDist,
    next_id: AtomicU64,
    stop_at: Option<Instant>,
    exhausted: AtomicBool,
}

impl ClosedShared {
    /// The closed model's shared state (None for the other models): the
    /// trace opened, or the session model loaded, before any user starts.
    pub(super) fn for_run(cfg: &Config, run_start: Instant) -> Result<Option<Arc<ClosedShared>>, LoadError> {
        let Model::Closed { think, .. } = cfg.model else { return Ok(None) };
        let (trace, session) = match &cfg.source {
            Source::Trace { path, format, skip_bad } => {
                let (it, _) = open_trace(path, *format, *skip_bad)?;
                (Some(Mutex::new(it)), None)
            }
            Source::Session { path } => (None, Some(SessionModel::load(path)?)),
        };
        Ok(Some(Arc::new(ClosedShared {
            trace,
            trace_error: Mutex::new(None),
            session,
            think,
            next_id: AtomicU64::new(0),
            stop_at: cfg.duration_s.map(|d| run_start + Duration::from_secs_f64(d)),
            exhausted: AtomicBool::new(false),
        })))
    }

    /// The next record of the shared trace; None at its end or on a read
    /// error (kept for the run to report), which ends every user.
    fn next_from_trace(&self) -> Option<TraceRecord> {
        let next = self.trace.as_ref().and_then(|t| t.lock().ok().and_then(|mut it| it.next()));
        match next {
            Some(Ok(r)) => Some(r),
            Some(Err(e)) => {
                if let Ok(mut g) = self.trace_error.lock() {
                    g.get_or_insert(e);
                }
                self.exhausted.store(true, Ordering::Relaxed);
                None
            }
            None => {
                self.exhausted.store(true, Ordering::Relaxed);
                None
            }
        }
    }
}

/// Where one user is in its walk through the session model.
#[derive(Default)]
struct Walk {
    state: Option<usize>,
    session_no: u64,
    seq: u32,
    session_end: Option<Instant>,
}

impl Walk {
    /// The user's next request: the next step of its session, or the first
    /// of a new session once the current one is over (request count, session
    /// time, or an absorbing state).
    fn next_record(&mut self, m: &SessionModel, user: u32, rng: &mut ChaCha8Rng) -> TraceRecord {
        let now = Instant::now();
        let over = self.state.is_none()
            || m.max_requests.is_some_and(|mx| self.seq >= mx)
            || self.session_end.is_some_and(|e| now >= e);
        let s = if over {
            self.session_no += 1;
            self.seq = 0;
            self.session_end = m.session_s.map(|d| now + Duration::from_secs_f64(d.sample_s(rng)));
            m.start()
        } else {
            self.state.unwrap_or(m.start())
        };
        let next = match m.step(s, rng) {
            Some(t) => t,
            None => {
                // Absorbing state: a new session.
                self.session_no += 1;
                self.seq = 0;
                m.step(m.start(), rng).expect("start state has transitions (checked at load)")
            }
        };
        self.state = Some(next);
        self.seq += 1;
        TraceRecord {
            time_s: 0.0,
            path: m.path(next, user, self.session_no, self.seq, rng),
            size_bytes: 0,
            client: Some(user),
        }
    }
}

impl Ctx {
    /// A closed-model user: request, think, repeat.
    pub(super) async fn user_loop(&self, user: u32) {
        let shared = self.p.closed.as_ref().expect("closed model").clone();
        let mut rng = ChaCha8Rng::seed_from_u64(self.p.seed);
        rng.set_stream(1_000 + u64::from(user));
        let mut conn: Option<Conn> = None;
        // Users start staggered by one think time, not all at once.
        let mut scheduled = Instant::now() + Duration::from_secs_f64(shared.think.sample_s(&mut rng));
        let mut walk = Walk::default();
        loop {
            if shared.stop_at.is_some_and(|s| scheduled >= s) || shared.exhausted.load(Ordering::Relaxed) || stopped() {
                break;
            }
            let rec = match &shared.session {
                Some(m) => walk.next_record(m, user, &mut rng),
                None => match shared.next_from_trace() {
                    Some(r) => r,
                    None => break,
                },
            };
            tokio::time::sleep_until(scheduled.into()).await;
            let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
            conn = self.perform(id, user, &rec, scheduled, conn, Timed::Yes).await;
            scheduled = Instant::now() + Duration::from_secs_f64(shared.think.sample_s(&mut rng));
        }
    }
}
