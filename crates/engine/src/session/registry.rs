//! The server's table of open sessions, by the id each client chose for its session.
//!
//! A client opens a session and joins its other connections at the same moment, so a `Join`
//! can arrive before the `Open` it refers to has been served: [`Registry::wait`] waits a
//! bounded time for the session to appear. Ids of recently ended sessions are remembered
//! (a bounded number), so that a late join to one fails at once instead of waiting.

use crate::sync::{lock, unpoisoned};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Ended session ids remembered.
const ENDED_REMEMBERED: usize = 1024;

/// A session id: 16 random bytes chosen by the client.
pub type SessionId = [u8; 16];

pub struct Registry<T> {
    table: Mutex<Table<T>>,
    changed: Condvar,
}

struct Table<T> {
    open: HashMap<SessionId, Arc<T>>,
    ended: VecDeque<SessionId>,
}

/// Why a session could not be registered.
#[derive(Debug, PartialEq, Eq)]
pub enum Taken {
    /// A session with this id is open.
    Open,
    /// A session with this id has ended.
    Ended,
}

impl<T> Default for Registry<T> {
    fn default() -> Self {
        Registry {
            table: Mutex::new(Table {
                open: HashMap::new(),
                ended: VecDeque::new(),
            }),
            changed: Condvar::new(),
        }
    }
}

impl<T> Registry<T> {
    fn table(&self) -> MutexGuard<'_, Table<T>> {
        lock(&self.table)
    }

    /// Registers `session` under `id` and wakes the joins waiting for it; refused if the id
    /// is in use or was used by a session that ended.
    pub fn insert(&self, id: SessionId, session: Arc<T>) -> Result<(), Taken> {
        let mut table = self.table();
        if table.open.contains_key(&id) {
            return Err(Taken::Open);
        }
        if table.ended.contains(&id) {
            return Err(Taken::Ended);
        }
        table.open.insert(id, session);
        drop(table);
        self.changed.notify_all();
        Ok(())
    }

    /// Ends the session `id` (open, or refused before it opened): it is forgotten, and joins
    /// waiting for it or arriving later fail at once.
    pub fn end(&self, id: &SessionId) {
        let mut table = self.table();
        table.open.remove(id);
        if !table.ended.contains(id) {
            if table.ended.len() == ENDED_REMEMBERED {
                table.ended.pop_front();
            }
            table.ended.push_back(*id);
        }
        drop(table);
        self.changed.notify_all();
    }

    /// Ends `id` unless a session of that id is open (the `Open` that named it was refused,
    /// or its session has ended already): joins waiting for it fail at once.
    pub fn abandon(&self, id: &SessionId) {
        if !self.table().open.contains_key(id) {
            self.end(id);
        }
    }

    /// The session `id`, waiting up to `patience` for it to be opened; `None` if it does not
    /// appear in that time or has already ended.
    pub fn wait(&self, id: &SessionId, patience: Duration) -> Option<Arc<T>> {
        let deadline = Instant::now() + patience;
        let mut table = self.table();
        loop {
            if let Some(s) = table.open.get(id) {
                return Some(s.clone());
            }
            if table.ended.contains(id) {
                return None;
            }
            let left = deadline.checked_duration_since(Instant::now())?;
            table = unpoisoned(self.changed.wait_timeout(table, left)).0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_join_waits_for_its_open_and_ended_ids_fail_at_once() {
        let registry = Arc::new(Registry::<u32>::default());
        let r = registry.clone();
        let opener = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            r.insert([1; 16], Arc::new(7))
        });
        let found = registry.wait(&[1; 16], Duration::from_secs(10));
        assert_eq!(found.as_deref(), Some(&7));
        assert_eq!(opener.join().ok(), Some(Ok(())));
        assert_eq!(registry.insert([1; 16], Arc::new(8)), Err(Taken::Open));

        registry.end(&[1; 16]);
        let asked = Instant::now();
        assert!(registry.wait(&[1; 16], Duration::from_secs(10)).is_none());
        assert!(asked.elapsed() < Duration::from_secs(5));
        assert_eq!(registry.insert([1; 16], Arc::new(9)), Err(Taken::Ended));

        let asked = Instant::now();
        assert!(registry
            .wait(&[2; 16], Duration::from_millis(100))
            .is_none());
        assert!(asked.elapsed() >= Duration::from_millis(100));

        // An `Open` that was refused ends its id: the joins waiting for it fail at once.
        let r = registry.clone();
        let refuser = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            r.end(&[3; 16]);
        });
        let asked = Instant::now();
        assert!(registry.wait(&[3; 16], Duration::from_secs(10)).is_none());
        assert!(asked.elapsed() < Duration::from_secs(5));
        refuser.join().unwrap();

        // An `Open` refused because its id is someone else's open session leaves that one be.
        registry.insert([4; 16], Arc::new(4)).unwrap();
        registry.abandon(&[4; 16]);
        let found = registry.wait(&[4; 16], Duration::from_secs(1));
        assert_eq!(found.as_deref(), Some(&4));
    }
}
