//! What a run is asked to do: the user model ([`Model`]), where requests come
//! from ([`Source`]), everything else ([`Config`]), and the checks that refuse
//! a configuration before anything starts.

use super::spin::MAX_SPIN_US;
use super::{LoadError, MAX_BATCH_WINDOW_US, MAX_SESSION_REQUESTS};
use crate::dist::TimeDist;
use crate::http::Target;
use crate::scale::Scaling;
use crate::schedule::LoadSchedule;
use crate::trace::TraceFormat;
use std::path::PathBuf;

/// How users arrive and behave.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Model {
    /// Each request at its scheduled time, whatever happened before.
    Open,
    /// Sessions of `k` back-to-back requests, sessions arriving at trace times.
    PartlyOpen { k: u32 },
    /// `users` users, each sending its next request a think time after the
    /// previous one completed.
    Closed { users: u32, think: TimeDist },
}

impl std::str::FromStr for Model {
    type Err = String;
    fn from_str(s: &str) -> Result<Model, String> {
        if s == "open" {
            return Ok(Model::Open);
        }
        if let Some(k) = s.strip_prefix("partly-open:") {
            let k: u32 = k.parse().map_err(|_| format!("partly-open:K: K must be a positive integer, got `{k}`"))?;
            if k == 0 || k > MAX_SESSION_REQUESTS {
                return Err(format!("partly-open:K: K must be between 1 and {MAX_SESSION_REQUESTS}"));
            }
            return Ok(Model::PartlyOpen { k });
        }
        if let Some(rest) = s.strip_prefix("closed:") {
            let (n, think) = match rest.split_once(',') {
                Some((n, t)) => {
                    let t = t
                        .strip_prefix("think=")
                        .ok_or_else(|| format!("closed:N,think=DIST: expected think=, got `{t}`"))?;
                    (n, TimeDist::parse(t).map_err(|e| e.to_string())?)
                }
                None => (rest, TimeDist::Const(0.0)),
            };
            let users: u32 = n.parse().map_err(|_| format!("closed:N: N must be a positive integer, got `{n}`"))?;
            if users == 0 {
                return Err("closed:N: N must be ≥ 1".into());
            }
            return Ok(Model::Closed { users, think });
        }
        Err(format!("unknown model `{s}` (expected open, partly-open:K or closed:N[,think=DIST])"))
    }
}

/// Where requests come from.
#[derive(Debug, Clone)]
pub enum Source {
    Trace {
        path: PathBuf,
        format: Option<TraceFormat>,
        skip_bad: bool,
    },
    /// A session model (closed model only).
    Session {
        path: PathBuf,
    },
}

/// Everything a run needs.
#[derive(Debug, Clone)]
pub struct Config {
    pub target: Target,
    pub out_dir: PathBuf,
    pub model: Model,
    pub source: Source,
    pub scaling: Scaling,
    /// `--load-schedule`: multiplies the rate `scaling` sets, phase by phase
    /// (open and partly-open models; see [`crate::schedule`]).
    pub load_schedule: Option<LoadSchedule>,
    /// For reporting the offered load (required by `Scaling::Load`).
    pub uplink_bits_per_s: Option<f64>,
    /// Stop starting requests this long after the start.
    pub duration_s: Option<f64>,
    /// Up to K requests per connection; None = one connection per request.
    pub persistent: Option<u32>,
    pub abort_after_s: Option<f64>,
    pub retries: u32,
    /// Hard limit on one attempt when no abort time is set.
    pub timeout_s: f64,
    /// Client identities for requests whose trace gives none.
    pub clients: u32,
    pub threads: usize,
    pub max_in_flight: usize,
    pub seed: u64,
    pub progress: bool,
    /// Run the dispatcher and workers under SCHED_FIFO (needs root or
    /// CAP_SYS_NICE), so other processes on a shared machine cannot delay
    /// sends; the kernel's RT throttling still leaves them 5% of each CPU.
    pub realtime: bool,
    /// Shortest interval between two wake-ups of the dispatcher: the
    /// requests due in between are sent together at the next wake-up, up to
    /// this much late (and their lateness says so). Fewer wake-ups per request
    /// at high rates; 0 wakes for every request.
    pub batch_window_us: u64,
    /// Open and partly-open models: never sleep for a wait this short, and
    /// busy-wait the last this many microseconds of longer ones (see the
    /// spinning dispatcher's wait), on a thread that both dispatches and
    /// performs worker 0's requests; 0 = off. Burns CPU: min(1, rate ×
    /// spin_us) of a core besides the requests' work; see `--spin-us`.
    pub spin_us: u64,
    pub command_line: Vec<String>,
}

impl Config {
    /// Refuses settings that contradict each other or are out of range,
    /// naming the option, before anything starts.
    pub(super) fn validate(&self) -> Result<(), LoadError> {
        let cerr = |m: String| LoadError::Config(m);
        if self.threads == 0 {
            return Err(cerr("--threads must be ≥ 1".into()));
        }
        if self.clients == 0 {
            return Err(cerr("--clients must be ≥ 1".into()));
        }
        if self.batch_window_us > MAX_BATCH_WINDOW_US {
            return Err(cerr(format!("--batch-window-us must be at most {MAX_BATCH_WINDOW_US}")));
        }
        if self.spin_us > MAX_SPIN_US {
            return Err(cerr(format!("--spin-us must be at most {MAX_SPIN_US}")));
        }
        if self.persistent == Some(0) {
            return Err(cerr("--persistent K must be ≥ 1".into()));
        }
        let positive = |v: f64| v.is_finite() && v > 0.0;
        if !positive(self.timeout_s) || self.abort_after_s.is_some_and(|a| !positive(a)) {
            return Err(cerr("--timeout and --abort-after must be positive".into()));
        }
        if self.retries > 0 && self.abort_after_s.is_none() {
            return Err(cerr("--retries needs --abort-after (retries follow a user abort)".into()));
        }
        if let (Source::Session { .. }, Model::Open | Model::PartlyOpen { .. }) = (&self.source, self.model) {
            return Err(cerr("a session model drives closed-model users: use --model closed:N".into()));
        }
        if let Model::Closed { users, .. } = self.model {
            if users as usize > self.max_in_flight {
                return Err(cerr(format!("closed:{users} exceeds --max-in-flight {}", self.max_in_flight)));
            }
            if self.scaling != Scaling::AsIs {
                return Err(cerr("--load/--rate/--speed scale trace times; the closed model ignores them".into()));
            }
            if self.load_schedule.is_some() {
                return Err(cerr(
                    "--load-schedule warps trace times (open and partly-open models); closed-model users have none"
                        .into(),
                ));
            }
        }
        Ok(())
    }

    /// Requests per batch the dispatcher hands over: K for the partly-open
    /// model, else 1.
    pub(super) fn batch_len(&self) -> usize {
        match self.model {
            Model::PartlyOpen { k } => k as usize,
            _ => 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_parsing() {
        assert_eq!("open".parse::<Model>().unwrap(), Model::Open);
        assert_eq!("partly-open:5".parse::<Model>().unwrap(), Model::PartlyOpen { k: 5 });
        assert_eq!("closed:10".parse::<Model>().unwrap(), Model::Closed { users: 10, think: TimeDist::Const(0.0) });
        assert_eq!(
            "closed:3,think=exp:7:70".parse::<Model>().unwrap(),
            Model::Closed { users: 3, think: TimeDist::Exp { mean_s: 7.0, max_s: Some(70.0) } }
        );
        for bad in ["closed", "closed:0", "partly-open:0", "closed:2,thonk=1", "semi"] {
            assert!(bad.parse::<Model>().is_err(), "{bad}");
        }
    }
}
