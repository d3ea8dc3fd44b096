//! Open regular files kept per worker thread, so a file asked for again is not opened,
//! examined and closed for every request: over TLS those are three of a small response's
//! seven system calls, and the open (a confined path walk and a new open file) the costliest.
//!
//! Never staler than opening the file anew: an entry is used only after an `fstatat` of
//! the same name under the root finds the same file unchanged — the same device and inode
//! (not renamed over or replaced), size, modification and change times (not written,
//! truncated or re-permissioned). Anything else (a changed file, a name that now fails or
//! leads elsewhere) drops the entry and the request opens the name as if there were no
//! cache, with the root's confinement, so a symlink swapped in to leave the root is refused
//! there. A directory's `index.html`, sidecars and listings are not kept.
//!
//! Bounded: [`ENTRIES_PER_THREAD`] descriptors per thread (counted in the server's
//! descriptor limit); a thread at the bound drops one entry for each it adds. A root
//! opened again (a reload) gets a new id, so its names never hit the old root's entries,
//! which leave as others replace them.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::CStr;
use std::fs::{File, Metadata};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::sync::Arc;

/// Descriptors each worker thread keeps open at most.
pub const ENTRIES_PER_THREAD: usize = 64;

/// What must not have changed for a kept file to stand for its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Identity {
    dev: u64,
    ino: u64,
    size_bytes: u64,
    mtime_ns: i128,
    ctime_ns: i128,
}

impl Identity {
    fn of(meta: &Metadata) -> Identity {
        Identity {
            dev: meta.dev(),
            ino: meta.ino(),
            size_bytes: meta.size(),
            mtime_ns: ns(meta.mtime(), meta.mtime_nsec()),
            ctime_ns: ns(meta.ctime(), meta.ctime_nsec()),
        }
    }

    /// The file `name` names under `dir` now (following symlinks, as the open does), or
    /// None if it cannot be examined.
    fn at(dir: &OwnedFd, name: &CStr) -> Option<Identity> {
        // SAFETY: stat is plain integers; all-zero is valid.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: `dir` is an open directory, `name` NUL-terminated, `st` writable.
        if unsafe { libc::fstatat(dir.as_raw_fd(), name.as_ptr(), &mut st, 0) } != 0 {
            return None;
        }
        Some(Identity {
            dev: st.st_dev,
            ino: st.st_ino,
            size_bytes: u64::try_from(st.st_size).ok()?,
            mtime_ns: ns(st.st_mtime, st.st_mtime_nsec),
            ctime_ns: ns(st.st_ctime, st.st_ctime_nsec),
        })
    }
}

/// A time stamp's seconds and nanoseconds as nanoseconds.
fn ns(secs: i64, nsec: i64) -> i128 {
    i128::from(secs) * 1_000_000_000 + i128::from(nsec)
}

struct Entry {
    file: Arc<File>,
    meta: Metadata,
    identity: Identity,
}

/// A thread's entries, keyed by the root's id (8 bytes) then the NUL-terminated name, and
/// the buffer a key is built in.
#[derive(Default)]
struct Kept {
    entries: HashMap<Box<[u8]>, Entry>,
    key: Vec<u8>,
}

impl Kept {
    fn key(&mut self, root_id: u64, name_nul: &[u8]) {
        self.key.clear();
        self.key.extend_from_slice(&root_id.to_le_bytes());
        self.key.extend_from_slice(name_nul);
    }
}

thread_local! {
    static KEPT: RefCell<Kept> = RefCell::new(Kept::default());
}

/// The kept file for `name` under the root `dir` (id `root_id`) if this thread keeps one
/// and it is unchanged; a changed one is dropped. Costs one `fstatat` when an entry exists,
/// nothing otherwise.
pub(crate) fn get(root_id: u64, dir: &OwnedFd, name: &CStr) -> Option<(Arc<File>, Metadata)> {
    KEPT.with_borrow_mut(|kept| {
        kept.key(root_id, name.to_bytes_with_nul());
        let entry = kept.entries.get(kept.key.as_slice())?;
        if Identity::at(dir, name) == Some(entry.identity) {
            return Some((Arc::clone(&entry.file), entry.meta.clone()));
        }
        kept.entries.remove(kept.key.as_slice());
        None
    })
}

/// Keeps `file` (a regular file just opened for `name`, `meta` its metadata from that open).
pub(crate) fn put(root_id: u64, name: &CStr, file: &Arc<File>, meta: &Metadata) {
    KEPT.with_borrow_mut(|kept| {
        kept.key(root_id, name.to_bytes_with_nul());
        let Kept { entries, key } = kept;
        if entries.len() >= ENTRIES_PER_THREAD && !entries.contains_key(key.as_slice()) {
            let victim = entries.keys().next().cloned();
            if let Some(victim) = victim {
                entries.remove(&victim);
            }
        }
        let entry = Entry { file: Arc::clone(file), meta: meta.clone(), identity: Identity::of(meta) };
        entries.insert(key.as_slice().into(), entry);
        debug_assert!(entries.len() <= ENTRIES_PER_THREAD);
    });
}

/// Descriptors this thread keeps (for tests).
pub fn kept_on_this_thread() -> usize {
    KEPT.with_borrow(|kept| kept.entries.len())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::FileExt;
    use std::path::Path;

    use super::*;
    use crate::resolve::{Refusal, Resolved, Root};

    /// The file `name` resolves to, and its contents.
    fn serve(root: &Root, name: &str) -> Result<(Arc<File>, Vec<u8>), Refusal> {
        let mut scratch = Vec::new();
        match root.resolve(name.as_bytes(), false, &mut scratch)? {
            Resolved::File { file, meta, .. } => {
                // Read by position, as responses are: the descriptor is shared.
                let mut body = vec![0; meta.len() as usize + 1];
                let n = file.read_at(&mut body, 0).unwrap();
                assert_eq!(n as u64, meta.len(), "the metadata is the file's");
                body.truncate(n);
                Ok((file, body))
            }
            other => panic!("{name}: {other:?}"),
        }
    }

    fn write(dir: &Path, name: &str, body: &[u8]) {
        std::fs::write(dir.join(name), body).unwrap();
    }

    #[test]
    fn a_file_asked_for_again_is_the_one_kept_while_it_is_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "a.txt", b"one");
        let root = Root::open(dir.path(), true).unwrap();
        let (first, body) = serve(&root, "a.txt").unwrap();
        assert_eq!(body, b"one");
        assert_eq!(kept_on_this_thread(), 1);
        let (again, _) = serve(&root, "a.txt").unwrap();
        assert!(Arc::ptr_eq(&first, &again), "the kept descriptor");
        // Another root (a reload) does not use this root's entries.
        let other = Root::open(dir.path(), true).unwrap();
        assert!(!Arc::ptr_eq(&first, &serve(&other, "a.txt").unwrap().0));
    }

    #[test]
    fn a_changed_file_is_opened_anew() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "a.txt", b"one");
        let root = Root::open(dir.path(), true).unwrap();
        let (first, _) = serve(&root, "a.txt").unwrap();
        // Rewritten in place: the same inode, another size.
        write(dir.path(), "a.txt", b"longer");
        let (second, body) = serve(&root, "a.txt").unwrap();
        assert_eq!(body, b"longer");
        assert!(!Arc::ptr_eq(&first, &second));
        // Renamed over by a file of the same size (an atomic deploy).
        write(dir.path(), "new.txt", b"LONGER");
        std::fs::rename(dir.path().join("new.txt"), dir.path().join("a.txt")).unwrap();
        assert_eq!(serve(&root, "a.txt").unwrap().1, b"LONGER");
        // Removed: not found, and no longer kept.
        std::fs::remove_file(dir.path().join("a.txt")).unwrap();
        assert_eq!(serve(&root, "a.txt").unwrap_err(), Refusal::NotFound);
        assert_eq!(kept_on_this_thread(), 0);
    }

    #[test]
    fn a_symlink_swapped_in_to_leave_the_root_is_refused() {
        let outside = tempfile::tempdir().unwrap();
        write(outside.path(), "secret", b"secret");
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "a.txt", b"public");
        let root = Root::open(dir.path(), true).unwrap();
        serve(&root, "a.txt").unwrap();
        std::fs::remove_file(dir.path().join("a.txt")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret"), dir.path().join("a.txt")).unwrap();
        assert_eq!(serve(&root, "a.txt").unwrap_err(), Refusal::Forbidden);
    }

    #[test]
    fn a_thread_keeps_at_most_its_bound() {
        let dir = tempfile::tempdir().unwrap();
        let root = Root::open(dir.path(), true).unwrap();
        for i in 0..ENTRIES_PER_THREAD + 10 {
            write(dir.path(), &format!("f{i}"), b"x");
            serve(&root, &format!("f{i}")).unwrap();
            assert!(kept_on_this_thread() <= ENTRIES_PER_THREAD);
        }
        assert_eq!(kept_on_this_thread(), ENTRIES_PER_THREAD);
        // A directory's index.html is not kept.
        std::fs::create_dir(dir.path().join("d")).unwrap();
        write(&dir.path().join("d"), "index.html", b"i");
        let before = kept_on_this_thread();
        let mut scratch = Vec::new();
        assert!(matches!(root.resolve(b"d", true, &mut scratch), Ok(Resolved::File { index: true, .. })));
        assert_eq!(kept_on_this_thread(), before);
    }
}
