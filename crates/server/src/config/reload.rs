//! What a reload (SIGHUP) may change and what only a restart can: the one list of the
//! settings bound at start (sockets, threads, the scheduler and its policy, socket buffer
//! sizes). Every other setting — the roots and `[[host]]` sites, `cache-control`,
//! `listings`, `dotfiles`, `precompressed`, `unknown-host`, request limits read per
//! request, `max-connections` (under the user-space schedulers, only lowered: their table
//! is sized at start) and `at-max-connections`, the access log and the certificates —
//! applies to the requests after the reload; the timeouts and head limits
//! (`header-timeout`, `idle-timeout`, `send-timeout`, `max-request-line-bytes`,
//! `max-header-bytes`, `max-headers`) to the connections accepted after it
//! (`live::ConnSettings`), and `drain-timeout` to the next shutdown.

use super::{Scheduling, ServerConfig};

/// Applies `$apply!(key => field, …)` to every restart-only setting (`key` as spelt in
/// the file). `tls-listen` is handled apart: the certificates under it may change.
macro_rules! restart_only {
    ($apply:ident) => {
        $apply!(
            "listen" => listen,
            "admin" => admin,
            "threads" => threads,
            "backlog" => backlog,
            "sendfile-chunk-bytes" => sendfile_chunk_bytes,
            "send-buffer-bytes" => send_buffer_bytes,
            "notsent-lowat-bytes" => notsent_lowat_bytes,
            "socket-priority" => socket_priority,
            "policy" => policy,
            "policy" => srpt_exact,
            "cutoffs" => cutoffs,
            "rrt-cutoffs" => rrt_cutoffs,
            "rrt-estimator" => rrt_estimator,
            "rrt-step-bytes" => rrt_step_bytes,
            "auto-window" => auto_window,
            "auto-recompute-every" => auto_recompute_every,
            "scheduler" => scheduler,
            "link-rate" => link_rate_bits_per_s,
            "write-concurrency" => write_concurrency,
            "pacer-lookahead" => pacer_lookahead,
            "pacer-rate-fraction" => pacer_rate_fraction,
            "pacer-burst-bytes" => pacer_burst_bytes,
            "http2" => http2,
            "http2-max-concurrent-streams" => http2_max_concurrent_streams
        )
    };
}

impl ServerConfig {
    /// Makes `self` (a configuration read again) keep `running`'s value of every setting
    /// a reload cannot change. Returns the keys `self` gave another value, each once:
    /// ignored until a restart.
    pub fn keep_restart_only(&mut self, running: &ServerConfig) -> Vec<&'static str> {
        let mut ignored = Vec::new();
        macro_rules! keep {
            ($($key:literal => $field:ident),*) => { $(
                if format!("{:?}", self.$field) != format!("{:?}", running.$field) {
                    self.$field = running.$field.clone();
                    if !ignored.contains(&$key) {
                        ignored.push($key);
                    }
                }
            )* };
        }
        restart_only!(keep);
        // The user-space schedulers size their table by it at start: lower only.
        if self.scheduler != Scheduling::Kernel && self.max_connections > running.max_connections {
            self.max_connections = running.max_connections;
            ignored.push("max-connections");
        }
        let listen = |c: &ServerConfig| c.tls.as_ref().map(|t| t.listen);
        if listen(self) != listen(running) {
            // An HTTPS listener cannot come or go, nor move: the running one's settings,
            // certificates included, stay.
            self.tls = running.tls.clone();
            ignored.push("tls-listen");
        }
        ignored
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restart_only_settings_keep_their_running_value_and_are_named() {
        let running = ServerConfig::new("/srv/a");
        let mut new = ServerConfig::new("/srv/b");
        new.listen = "127.0.0.1:9".parse().unwrap();
        new.threads = 3;
        new.policy = super::super::Policy::Fair;
        new.max_body_bytes = 7;
        new.dotfiles = super::super::Dotfiles::Allow;
        let ignored = new.keep_restart_only(&running);
        assert_eq!(ignored, vec!["listen", "threads", "policy"]);
        assert_eq!((new.listen, new.threads, new.policy), (running.listen, running.threads, running.policy));
        // What a reload applies stays as read.
        assert_eq!(new.root, std::path::PathBuf::from("/srv/b"));
        assert_eq!((new.max_body_bytes, new.dotfiles), (7, super::super::Dotfiles::Allow));
        assert!(ServerConfig::new("/x").keep_restart_only(&running).is_empty());
        // max-connections: applied under the kernel scheduler; only lowered under the user one.
        let mut more = ServerConfig::new("/x");
        more.max_connections = running.max_connections * 2;
        assert!(more.keep_restart_only(&running).is_empty());
        let mut user = running.clone();
        user.scheduler = Scheduling::User;
        let mut more = user.clone();
        more.max_connections = user.max_connections * 2;
        assert_eq!(more.keep_restart_only(&user), ["max-connections"]);
        assert_eq!(more.max_connections, user.max_connections);
        let mut fewer = user.clone();
        fewer.max_connections = 10;
        assert!(fewer.keep_restart_only(&user).is_empty());
        assert_eq!(fewer.max_connections, 10);
    }
}
