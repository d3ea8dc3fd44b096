//! An HTTP/2 connection under the user-space scheduler: a group of the core scheduler
//! (`UplinkScheduler::open_group`), each stream a member ranked with every response on
//! the uplink.
//!
//! The connection's driver opens a [`GroupReg`] (charging the connection's control
//! packets, as an HTTP/1.1 connection's first response does) and registers a [`Member`]
//! per stream with a body. When its codec has written everything it was given and its
//! socket is writable it [`GroupReg::offer`]s the connection; a grant then arrives in the
//! group's one slot for one member ([`GroupReg::take_grant`], woken by
//! [`GrantSignal::wait`]), the driver hands that stream's chunk to the codec and
//! [`Member::report`]s (a stream that ended within its grant may pass the rest of the turn
//! on to the connection's next best, [`GroupReg::grant_in_group`]): what the grant carried, whether the connection takes bytes again
//! at once, whether the stream's window is open, and the frames the codec wrote besides
//! DATA (headers, window updates, settings) since the last report, charged to the pacer
//! as control bytes. Dropping a member finishes it (an unreported grant is given back);
//! dropping the group closes it.

use std::io;
use std::sync::atomic::Ordering::{Acquire, Relaxed};
use std::sync::Arc;

use shortfirst_core::bands::Band;
use shortfirst_core::uplink_sched::{ConnId, GroupId};

use super::{Slot, UserScheduler};
use crate::metrics::BAND_SLOTS;

/// One connection's group (see the module docs); closed when dropped.
pub(crate) struct GroupReg {
    sched: Arc<UserScheduler>,
    id: GroupId,
    slot: Arc<Slot>,
}

/// Wakes the connection's driver when a grant arrives in its group's slot.
#[derive(Clone)]
pub(crate) struct GrantSignal(Arc<Slot>);

impl GrantSignal {
    /// Returns once a grant may have arrived (check [`GroupReg::take_grant`]).
    pub(crate) async fn wait(&self) {
        self.0.notify.notified().await;
    }
}

/// One stream registered with the scheduler; finished when dropped.
pub(crate) struct Member {
    sched: Arc<UserScheduler>,
    id: ConnId,
    slot: Arc<Slot>,
}

/// The outcome of a member's grant.
pub(crate) struct MemberReport {
    /// Bytes of the grant the stream's chunk took (≤ the grant).
    pub written_bytes: u64,
    pub granted_bytes: u64,
    /// The band of the stream's remaining bytes (granted bytes are counted by band).
    pub band: Band,
    /// The connection takes bytes again at once (nothing was handed to the codec).
    pub group_writable: bool,
    /// The stream's flow-control window is open.
    pub window_open: bool,
    /// Bytes of frames other than DATA written since the last report.
    pub control_bytes: u64,
}

impl UserScheduler {
    /// A connection that carries streams opens; its control packets are charged now.
    pub(crate) fn open_group(self: &Arc<Self>) -> io::Result<GroupReg> {
        let now_ns = self.now_ns();
        let mut st = self.lock();
        let id = st.core.open_group().map_err(|e| io::Error::other(e.to_string()))?;
        st.core.charge_connection(now_ns);
        self.dispatch(&mut st, now_ns);
        Ok(GroupReg { sched: self.clone(), id, slot: Arc::new(Slot::new()) })
    }
}

impl GroupReg {
    /// A stream's response of `size_bytes` (on the wire) starts, its window open.
    pub(crate) fn register(&self, size_bytes: u64) -> io::Result<Member> {
        let mut st = self.sched.lock();
        let id = st.core.register_in(self.id, size_bytes).map_err(|e| io::Error::other(e.to_string()))?;
        if st.slots.len() <= id.index() {
            st.slots.resize(id.index() + 1, None);
        }
        st.slots[id.index()] = Some(self.slot.clone());
        Ok(Member { sched: self.sched.clone(), id, slot: self.slot.clone() })
    }

    /// The connection can take bytes: its codec wrote all it was given, its socket is writable.
    pub(crate) fn offer(&self) {
        let mut st = self.sched.lock();
        st.core.set_group_writable(self.id, true);
        let now = self.sched.now_ns();
        self.sched.dispatch(&mut st, now);
    }

    /// The grant in the slot, if any: the member's slot index and the bytes.
    pub(crate) fn take_grant(&self) -> Option<(usize, u64)> {
        let bytes = self.slot.grant.swap(0, Acquire);
        (bytes > 0).then(|| (self.slot.who.load(Relaxed) as usize, bytes))
    }

    /// The rest of a turn that carried `turn_bytes` on the wire
    /// (`UplinkScheduler::grant_in_group`): the member granted at once and its bytes.
    pub(crate) fn grant_in_group(&self, turn_bytes: u64) -> Option<(usize, u64)> {
        let mut st = self.sched.lock();
        let now = self.sched.now_ns();
        st.core.grant_in_group(now, self.id, turn_bytes).map(|g| (g.id.index(), g.bytes))
    }

    pub(crate) fn signal(&self) -> GrantSignal {
        GrantSignal(self.slot.clone())
    }
}

impl Drop for GroupReg {
    fn drop(&mut self) {
        let mut st = self.sched.lock();
        st.core.close_group(self.id);
        let now = self.sched.now_ns();
        self.sched.dispatch(&mut st, now);
    }
}

impl Member {
    /// Its slot index, as [`GroupReg::take_grant`] names the member granted.
    pub(crate) fn index(&self) -> usize {
        self.id.index()
    }

    /// The stream's flow-control window opened (or closed).
    pub(crate) fn set_window_open(&self, open: bool) {
        let mut st = self.sched.lock();
        st.core.set_writable(self.id, open);
        let now = self.sched.now_ns();
        self.sched.dispatch(&mut st, now);
    }

    /// Ends the member's grant (see [`MemberReport`]).
    pub(crate) fn report(&self, r: MemberReport) {
        let slot = usize::from(r.band.index()).min(BAND_SLOTS - 1);
        self.sched.granted_by_band[slot].fetch_add(r.granted_bytes, Relaxed);
        let mut st = self.sched.lock();
        let now = self.sched.now_ns();
        st.core.charge_handshake(now, r.control_bytes);
        st.core.report(now, self.id, r.written_bytes, 0, r.group_writable);
        if !r.window_open {
            st.core.set_writable(self.id, false);
        }
        self.sched.dispatch(&mut st, now);
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        let mut st = self.sched.lock();
        let now = self.sched.now_ns();
        // A grant delivered and not taken is the core's to refund (`finish`): not the driver's to use.
        if self.slot.who.load(Relaxed) == self.id.index() as u64 {
            self.slot.grant.store(0, Relaxed);
        }
        st.core.finish(now, self.id);
        st.slots[self.id.index()] = None;
        self.sched.dispatch(&mut st, now);
    }
}
