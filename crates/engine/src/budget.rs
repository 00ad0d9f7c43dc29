//! A byte budget shared by threads: the memory a server lets its clients' data take at once
//! (received batches waiting to be written, pulling clients' indexes of their destinations,
//! the directories and large files a push session must remember until its commit).
//!
//! Every byte held is a [`Charge`], given back when the charge is dropped. One client address
//! may hold at most half of the budget, so that one client (or one host's many connections)
//! cannot take the memory every other client needs. What cannot wait (a record a session must
//! keep) asks with [`Budget::try_charge`] and is refused when there is no room; what can wait
//! (a batch not read from its socket yet) waits in [`Budget::charge`], which leaves the bytes
//! in the kernel's socket buffers and so slows its sender down (TCP flow control).
//!
//! Not an allocator: the charges are the sizes callers declare, taken before they allocate.

use crate::sync::{lock, unpoisoned};
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// A budget of bytes, in all and per client address.
#[derive(Debug)]
pub struct Budget {
    limit: u64,
    per_address: u64,
    held: Mutex<Held>,
    freed: Condvar,
}

#[derive(Debug, Default)]
struct Held {
    all: u64,
    by_addr: HashMap<IpAddr, u64>,
}

/// Why bytes could not be charged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// More than one address may ever hold: no wait would help.
    TooLarge { bytes: u64, per_address: u64 },
    /// Not now: the budget (or this address's share) is taken.
    Full,
    /// The waiter gave up (its connection was closed meanwhile).
    GaveUp,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refused::TooLarge { bytes, per_address } => write!(
                f,
                "{bytes} bytes at once is more than the {per_address} bytes one client may \
                 hold in this server's memory (sprat serve --max-client-memory)"
            ),
            Refused::Full => write!(
                f,
                "the server's memory for clients' data is used up (sprat serve \
                 --max-client-memory); try again later"
            ),
            Refused::GaveUp => write!(f, "gave up waiting for memory"),
        }
    }
}

/// How often a waiting [`Budget::charge`] asks whether to give up.
const GIVE_UP_TICK: Duration = Duration::from_millis(100);

impl Budget {
    /// A budget of `limit` bytes, of which one address may hold half.
    pub fn new(limit: u64) -> Arc<Budget> {
        Arc::new(Budget {
            limit,
            per_address: limit / 2,
            held: Mutex::default(),
            freed: Condvar::new(),
        })
    }

    /// Bytes lent now.
    #[cfg(test)]
    fn held(&self) -> u64 {
        lock(&self.held).all
    }

    fn fits(&self, held: &Held, ip: Option<IpAddr>, bytes: u64) -> bool {
        let mine = ip
            .and_then(|ip| held.by_addr.get(&ip))
            .copied()
            .unwrap_or(0);
        held.all + bytes <= self.limit && mine + bytes <= self.per_address
    }

    fn take(self: &Arc<Self>, held: &mut Held, ip: Option<IpAddr>, bytes: u64) -> Charge {
        held.all += bytes;
        if let Some(ip) = ip {
            *held.by_addr.entry(ip).or_default() += bytes;
        }
        Charge {
            budget: Some(self.clone()),
            ip,
            bytes,
        }
    }

    /// `bytes` for a client at `ip`, at once or [`Refused`].
    pub fn try_charge(self: &Arc<Self>, ip: Option<IpAddr>, bytes: u64) -> Result<Charge, Refused> {
        self.too_large(bytes)?;
        let mut held = lock(&self.held);
        if !self.fits(&held, ip, bytes) {
            return Err(Refused::Full);
        }
        Ok(self.take(&mut held, ip, bytes))
    }

    /// `bytes` for a client at `ip`, waiting while the budget or the address's share is
    /// taken, until `give_up` says to stop waiting (asked a few times a second).
    pub fn charge(
        self: &Arc<Self>,
        ip: Option<IpAddr>,
        bytes: u64,
        give_up: &dyn Fn() -> bool,
    ) -> Result<Charge, Refused> {
        self.too_large(bytes)?;
        let mut held = lock(&self.held);
        while !self.fits(&held, ip, bytes) {
            if give_up() {
                return Err(Refused::GaveUp);
            }
            held = unpoisoned(self.freed.wait_timeout(held, GIVE_UP_TICK)).0;
        }
        Ok(self.take(&mut held, ip, bytes))
    }

    fn too_large(&self, bytes: u64) -> Result<(), Refused> {
        if bytes > self.per_address {
            return Err(Refused::TooLarge {
                bytes,
                per_address: self.per_address,
            });
        }
        Ok(())
    }

    fn give_back(&self, ip: Option<IpAddr>, bytes: u64) {
        if bytes == 0 {
            return;
        }
        let mut held = lock(&self.held);
        held.all -= bytes.min(held.all);
        if let Some(ip) = ip {
            if let Some(n) = held.by_addr.get_mut(&ip) {
                *n -= bytes.min(*n);
                if *n == 0 {
                    held.by_addr.remove(&ip);
                }
            }
        }
        drop(held);
        self.freed.notify_all();
    }
}

/// Bytes lent by a [`Budget`] (or none: [`Charge::none`]), given back when dropped.
#[derive(Debug, Default)]
pub struct Charge {
    budget: Option<Arc<Budget>>,
    ip: Option<IpAddr>,
    bytes: u64,
}

impl Charge {
    /// A charge of nothing, on no budget (a receiver without one).
    pub fn none() -> Charge {
        Charge::default()
    }

    /// A charge of nothing yet on `budget` for a client at `ip`, to grow with
    /// [`Charge::try_grow`].
    pub fn empty(budget: &Arc<Budget>, ip: Option<IpAddr>) -> Charge {
        Charge {
            budget: Some(budget.clone()),
            ip,
            bytes: 0,
        }
    }

    /// Bytes held.
    #[cfg(test)]
    fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Adds `bytes` more from the same budget and address, at once or [`Refused`]
    /// ([`Refused::TooLarge`] once the whole would be more than one address may hold; a
    /// charge of no budget grows without limit).
    pub fn try_grow(&mut self, bytes: u64) -> Result<(), Refused> {
        let Some(budget) = &self.budget else {
            self.bytes += bytes;
            return Ok(());
        };
        budget.too_large(self.bytes.saturating_add(bytes))?;
        let mut more = budget.try_charge(self.ip, bytes)?;
        // Held by this charge from now on.
        self.bytes += std::mem::take(&mut more.bytes);
        Ok(())
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        if let Some(budget) = &self.budget {
            budget.give_back(self.ip, self.bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    fn ip(n: u8) -> Option<IpAddr> {
        Some(IpAddr::from([127, 0, 0, n]))
    }

    #[test]
    fn charges_are_given_back_and_one_address_holds_at_most_half() {
        let budget = Budget::new(100);
        let a = budget.try_charge(ip(1), 50).unwrap();
        // Its share is full, the budget is not.
        assert_eq!(budget.try_charge(ip(1), 1).err(), Some(Refused::Full));
        let b = budget.try_charge(ip(2), 50).unwrap();
        assert_eq!(budget.try_charge(ip(3), 1).err(), Some(Refused::Full));
        assert!(matches!(
            budget.try_charge(ip(3), 51),
            Err(Refused::TooLarge { .. })
        ));
        assert_eq!(budget.held(), 100);
        drop((a, b));
        assert_eq!(budget.held(), 0);
        let mut c = Charge::empty(&budget, ip(1));
        c.try_grow(10).unwrap();
        c.try_grow(40).unwrap();
        assert!(matches!(c.try_grow(1), Err(Refused::TooLarge { .. })));
        assert_eq!(c.bytes(), 50);
        let other = budget.try_charge(ip(2), 45).unwrap();
        let mut d = Charge::empty(&budget, ip(3));
        assert_eq!(d.try_grow(6), Err(Refused::Full));
        drop((c, d, other));
        assert_eq!(budget.held(), 0);
    }

    #[test]
    fn a_waiting_charge_goes_on_once_bytes_are_given_back_or_gives_up() {
        let budget = Budget::new(100);
        let held = budget.try_charge(ip(1), 50).unwrap();
        let waiter = {
            let budget = budget.clone();
            std::thread::spawn(move || budget.charge(ip(1), 30, &|| false).map(|c| c.bytes()))
        };
        std::thread::sleep(Duration::from_millis(50));
        drop(held);
        assert_eq!(waiter.join().unwrap(), Ok(30));

        let _held = budget.try_charge(ip(1), 50).unwrap();
        let started = Instant::now();
        let gave_up = budget.charge(ip(1), 1, &|| started.elapsed() > Duration::from_millis(150));
        assert_eq!(gave_up.err(), Some(Refused::GaveUp));
    }
}
