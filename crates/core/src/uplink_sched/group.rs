//! Groups: responses sharing one connection, the streams of an HTTP/2 connection (see the
//! parent module's docs).
//!
//! Two levels keep a grant O(log n) however many streams a connection has: each group
//! keeps its members that could take bytes by themselves (admitted, window open, bytes
//! left, no grant) in a set of its own, under the same keys as the scheduler's; the best
//! of them stands for the group in the scheduler's `ready` set while the group is
//! writable and holds no grant. A key is a member's own (rank, tie, slot), so the
//! scheduler's best is the best member of any group that can send, and one group never
//! holds two grants: its connection's writer has only one stream's bytes at a time.
//!
//! Limits: at most `max_groups` groups; a group's set holds each of its members at most
//! once. A closed group stays until its last member finishes.

use std::collections::BTreeSet;

use super::{ConnId, Grant, Key, SchedError, UplinkScheduler};

/// An open group. Ids are reused after [`UplinkScheduler::close_group`]; the generation
/// tells a stale id from the new holder of its slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GroupId {
    index: u32,
    generation: u32,
}

impl GroupId {
    /// Dense index (below `max_groups`).
    pub fn index(self) -> usize {
        self.index as usize
    }
}

#[derive(Debug)]
pub(super) struct Group {
    generation: u32,
    /// Its connection takes bytes now (socket writable, writer empty).
    writable: bool,
    /// A member holds a grant.
    busy: bool,
    /// Members that could take bytes by themselves, by key.
    ready: BTreeSet<Key>,
    /// The key standing for the group in the scheduler's `ready`, if any.
    placed: Option<Key>,
    /// Members registered (admitted or not).
    members: usize,
    closed: bool,
}

impl UplinkScheduler {
    /// A connection that will carry several responses opens; not writable until
    /// [`UplinkScheduler::set_group_writable`] says so.
    pub fn open_group(&mut self) -> Result<GroupId, SchedError> {
        let index = match self.free_groups.pop() {
            Some(i) => i,
            None if self.groups.len() < self.config.max_groups => {
                self.groups.push(None);
                self.group_generations.push(0);
                (self.groups.len() - 1) as u32
            }
            None => {
                self.stats.full_refusals += 1;
                return Err(SchedError::GroupsFull { max: self.config.max_groups });
            }
        };
        let generation = self.group_generations[index as usize];
        self.groups[index as usize] = Some(Group {
            generation,
            writable: false,
            busy: false,
            ready: BTreeSet::new(),
            placed: None,
            members: 0,
            closed: false,
        });
        Ok(GroupId { index, generation })
    }

    fn group_live(&self, g: GroupId) -> bool {
        matches!(self.groups.get(g.index()), Some(Some(x)) if x.generation == g.generation && !x.closed)
    }

    fn group_mut(&mut self, index: u32) -> &mut Group {
        self.groups[index as usize].as_mut().expect("live group")
    }

    /// A response of `size_bytes` starts in `group` (a stream of its connection), its
    /// window open: ranked with every other response, granted only while its group is
    /// writable and holds no other grant.
    pub fn register_in(&mut self, group: GroupId, size_bytes: u64) -> Result<ConnId, SchedError> {
        if !self.group_live(group) {
            return Err(SchedError::GroupClosed);
        }
        self.group_mut(group.index).members += 1;
        let id = self.register_entry(size_bytes, Some(group.index));
        if id.is_err() {
            self.group_mut(group.index).members -= 1;
        }
        id
    }

    /// The group's connection can (or cannot) take bytes now. While a member holds a
    /// grant the group reports through [`UplinkScheduler::report`] instead. Back from a
    /// blocked spell, members that fell behind resume at the system's virtual time
    /// (fair ties), as a connection does.
    pub fn set_group_writable(&mut self, group: GroupId, writable: bool) {
        if !self.group_live(group) {
            debug_assert!(false, "stale group {group:?}");
            return;
        }
        let g = self.group_mut(group.index);
        if g.busy || g.writable == writable {
            return;
        }
        g.writable = writable;
        if writable && self.fair_ties {
            self.resume_members(group.index);
        }
        self.place_group(group.index);
    }

    /// Raises the fair tags of the group's ready members that fell behind the virtual time.
    fn resume_members(&mut self, g: u32) {
        let virtual_bytes = self.virtual_bytes;
        let mut lagging = std::mem::take(&mut self.scratch);
        lagging.clear();
        let group = self.groups[g as usize].as_ref().expect("live group");
        let conns = &self.conns;
        let behind = |&&(_, _, i): &&Key| conns[i as usize].as_ref().is_some_and(|c| c.fair_tag < virtual_bytes);
        lagging.extend(group.ready.iter().filter(behind).map(|&(_, _, i)| i));
        for &i in &lagging {
            self.conn_mut(i).fair_tag = virtual_bytes;
            self.place(i);
        }
        self.scratch = lagging;
    }

    /// The connection closed: no member is granted again; the group's slot is freed
    /// with its last member (at once if it has none).
    pub fn close_group(&mut self, group: GroupId) {
        if !self.group_live(group) {
            debug_assert!(false, "stale group {group:?}");
            return;
        }
        let g = self.group_mut(group.index);
        g.closed = true;
        g.writable = false;
        if g.members == 0 {
            self.free_group(group.index);
        } else {
            self.place_group(group.index);
        }
    }

    fn free_group(&mut self, index: u32) {
        let g = self.groups[index as usize].take().expect("live group");
        debug_assert!(g.placed.is_none() && g.ready.is_empty() && g.members == 0, "{g:?}");
        self.group_generations[index as usize] = self.group_generations[index as usize].wrapping_add(1);
        self.free_groups.push(index);
    }

    /// A member's key changed from `old` to `new` (`None`: out of the group's set).
    pub(super) fn place_member(&mut self, g: u32, old: Option<Key>, new: Option<Key>) {
        let group = self.group_mut(g);
        if let Some(old) = old {
            group.ready.remove(&old);
        }
        if let Some(new) = new {
            group.ready.insert(new);
        }
        self.place_group(g);
    }

    /// Puts the group's best member in the scheduler's `ready`, or takes it out.
    fn place_group(&mut self, g: u32) {
        let group = self.groups[g as usize].as_mut().expect("live group");
        let want = if group.writable && !group.busy { group.ready.first().copied() } else { None };
        if want == group.placed {
            return;
        }
        if let Some(old) = group.placed {
            self.ready.remove(&old);
        }
        if let Some(key) = want {
            self.ready.insert(key);
        }
        group.placed = want;
    }

    /// `next_grant` took the group's `key` out of the scheduler's `ready`.
    pub(super) fn granted_member(&mut self, g: u32, key: Key) {
        let group = self.group_mut(g);
        debug_assert_eq!(group.placed, Some(key));
        group.ready.remove(&key);
        group.placed = None;
        group.busy = true;
    }

    /// The rest of a turn: after a member of `group` reported, the group's best member
    /// that could take bytes is granted at once, though its connection's writer still
    /// holds what the turn carried so far (`turn_bytes` of grants), so the connection
    /// writes them together. At most the quantum less `turn_bytes`, and only when the
    /// pacer has the budget [`UplinkScheduler::next_grant`] would ask for: a better
    /// response of another connection waits behind the whole turn, at most one quantum,
    /// as it waits behind one grant. `None` if the group is closed, holds a grant, has no
    /// such member, or the turn has used the quantum.
    pub fn grant_in_group(&mut self, now_ns: u64, group: GroupId, turn_bytes: u64) -> Option<Grant> {
        if !self.group_live(group) {
            return None;
        }
        let room = self.quantum_bytes.saturating_sub(turn_bytes);
        let g = self.groups[group.index()].as_ref().expect("live group");
        if g.busy || room == 0 {
            return None;
        }
        let &key @ (_, _, index) = g.ready.first()?;
        let remaining =
            self.conns[index as usize].as_ref().expect("a member in its group's set is live").app_remaining();
        let budget = self.pacer.budget_bytes(now_ns);
        if budget < remaining.min(self.pacer.release_bytes()) {
            return None;
        }
        let g = self.group_mut(group.index);
        g.ready.remove(&key);
        g.busy = true;
        if g.placed == Some(key) {
            g.placed = None;
            self.ready.remove(&key);
        }
        Some(self.grant(now_ns, index, budget.min(room).min(remaining)))
    }

    /// The member holding the group's grant reported; `writable`: the connection takes
    /// bytes again at once. The member is placed next (`report`), and the group with it.
    pub(super) fn group_reported(&mut self, g: u32, writable: bool) {
        let group = self.group_mut(g);
        group.busy = false;
        group.writable = writable && !group.closed;
    }

    /// A member finished: `key` its place in the group's set, `held` whether it held the
    /// group's grant.
    pub(super) fn member_gone(&mut self, g: u32, key: Option<Key>, held: bool) {
        let group = self.group_mut(g);
        if let Some(key) = key {
            group.ready.remove(&key);
        }
        if held {
            group.busy = false;
        }
        group.members -= 1;
        let free = group.closed && group.members == 0;
        self.place_group(g);
        if free {
            self.free_group(g);
        }
    }
}
