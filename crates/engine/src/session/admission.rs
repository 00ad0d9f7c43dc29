//! Who gets a place on a server: connections still authenticating, and authenticated ones
//! (sessions' streams, namespace requests, the streams of third-party copies the server makes
//! for its clients), each counted in all and per client address.
//!
//! Every place is held by a guard that gives it back when dropped, whatever way its holder
//! ends (returns, fails, panics, or never starts because its thread could not be spawned):
//! a place is never lost, so a server never fills up with places nobody holds.
//! Not for what a connection does once admitted (see `roles::server`).

use crate::sync::{lock, unpoisoned};
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Places counted in all and by client address, within limits.
#[derive(Debug, Default)]
struct Count {
    all: usize,
    by_addr: HashMap<IpAddr, usize>,
}

impl Count {
    fn of(&self, ip: Option<IpAddr>) -> usize {
        ip.and_then(|ip| self.by_addr.get(&ip))
            .copied()
            .unwrap_or(0)
    }

    fn add(&mut self, ip: Option<IpAddr>, n: usize) {
        self.all += n;
        if let Some(ip) = ip {
            *self.by_addr.entry(ip).or_default() += n;
        }
    }

    fn remove(&mut self, ip: Option<IpAddr>, n: usize) {
        self.all -= n.min(self.all);
        if let Some(ip) = ip {
            if let Some(held) = self.by_addr.get_mut(&ip) {
                *held -= n.min(*held);
                if *held == 0 {
                    self.by_addr.remove(&ip);
                }
            }
        }
    }
}

/// Most connections authenticating at once.
pub(crate) const MAX_HANDSHAKING: usize = 1024;
/// Most connections authenticating at once from one client address (a client opens up to 64
/// streams at once, and several clients may share a host or a NAT).
pub(crate) const MAX_HANDSHAKING_PER_ADDRESS: usize = 256;

/// One connection authenticating: where from, and its socket, to close it for a newcomer.
#[derive(Debug)]
struct Authenticating {
    ip: Option<IpAddr>,
    socket: Option<std::net::TcpStream>,
}

/// The connections authenticating, counted and by order of arrival.
#[derive(Debug, Default)]
struct HandshakeTable {
    count: Count,
    next: u64,
    open: std::collections::BTreeMap<u64, Authenticating>,
}

impl HandshakeTable {
    /// Closes the oldest connection authenticating (from `ip` only, when given) that it can
    /// close: its place is free at once (its thread sees the socket shut and ends). Where it
    /// came from, if there was one.
    fn evict_oldest(&mut self, ip: Option<Option<IpAddr>>) -> Option<Option<IpAddr>> {
        let oldest = self
            .open
            .iter()
            .find(|(_, a)| a.socket.is_some() && ip.is_none_or(|ip| a.ip == ip))
            .map(|(&id, _)| id);
        let a = oldest.and_then(|id| self.open.remove(&id))?;
        self.count.remove(a.ip, 1);
        if let Some(socket) = a.socket {
            let _ = socket.shutdown(std::net::Shutdown::Both);
        }
        Some(a.ip)
    }
}

/// The connections still authenticating, in all and by client address.
#[derive(Debug, Default, Clone)]
pub(crate) struct Handshakes(Arc<Mutex<HandshakeTable>>);

/// A connection closed in its handshake to make way for a newcomer (see
/// [`Handshakes::admit`]): where it came from, and the limit that was reached.
#[derive(Debug)]
pub(crate) struct Evicted {
    pub(crate) from: Option<IpAddr>,
    pub(crate) why: &'static str,
}

/// One connection's place among those authenticating, given back when dropped.
#[derive(Debug)]
pub(crate) struct HandshakeSlot {
    table: Arc<Mutex<HandshakeTable>>,
    id: u64,
}

impl Handshakes {
    /// A place for a new connection from `ip` (`socket`: a handle to close it by, should a
    /// newcomer take its place). At a limit (in all, or of the address), the newcomer takes
    /// the place of the oldest connection authenticating (of that address): a real client's
    /// handshake takes a few round trips, so a stranger holding every place (no token needed)
    /// keeps it out only by opening that many connections within its handshake, not by
    /// holding idle ones, or by refusals it spins on. Refused only where no connection it
    /// may replace is left (one without a socket to close).
    /// With the place, the connection closed to make it, if one was: where it came from, and
    /// why.
    pub(crate) fn admit(
        &self,
        ip: Option<IpAddr>,
        socket: Option<std::net::TcpStream>,
    ) -> Result<(HandshakeSlot, Option<Evicted>), &'static str> {
        let mut table = lock(&self.0);
        let mut evicted = None;
        if table.count.all >= MAX_HANDSHAKING {
            const WHY: &str = "too many unauthenticated connections";
            let from = table.evict_oldest(None).ok_or(WHY)?;
            evicted = Some(Evicted { from, why: WHY });
        }
        if ip.is_some() && table.count.of(ip) >= MAX_HANDSHAKING_PER_ADDRESS {
            const WHY: &str = "too many unauthenticated connections from this address";
            let from = table.evict_oldest(Some(ip)).ok_or(WHY)?;
            evicted = Some(Evicted { from, why: WHY });
        }
        table.count.add(ip, 1);
        let id = table.next;
        table.next += 1;
        table.open.insert(id, Authenticating { ip, socket });
        let slot = HandshakeSlot {
            table: self.0.clone(),
            id,
        };
        Ok((slot, evicted))
    }

    /// Connections authenticating now (in all, and from `ip`).
    #[cfg(test)]
    fn held(&self, ip: Option<IpAddr>) -> (usize, usize) {
        let table = lock(&self.0);
        (table.count.all, table.count.of(ip))
    }
}

impl Drop for HandshakeSlot {
    fn drop(&mut self) {
        let mut table = lock(&self.table);
        // Not there: a newcomer took its place, and its count went then.
        if let Some(a) = table.open.remove(&self.id) {
            table.count.remove(a.ip, 1);
        }
    }
}

/// The places held, and a wake-up for those waiting for one.
#[derive(Debug, Default)]
struct Held {
    count: Mutex<Count>,
    freed: Condvar,
}

/// The authenticated connections a server serves, in all and by client address.
#[derive(Debug)]
pub(crate) struct Places {
    held: Arc<Held>,
    max: usize,
    per_address: usize,
}

/// Places among the authenticated connections, given back when dropped.
#[derive(Debug)]
pub(crate) struct Place {
    held: Arc<Held>,
    ip: Option<IpAddr>,
    n: usize,
}

impl Place {
    /// How many places this holds.
    pub(crate) fn len(&self) -> usize {
        self.n
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        lock(&self.held.count).remove(self.ip, self.n);
        self.held.freed.notify_all();
    }
}

/// What a place is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Use {
    /// A stream: joining a session, or one of a third-party copy's. Never the last places,
    /// even of a server or an address of one place (a join dialled beside its `Open` must not
    /// take the place the `Open` needs, then wait for a session that cannot open), nor the
    /// one after them, kept for a request (a push's listing of its destination, dialled beside
    /// its `Open` too, which its session waits for).
    Stream,
    /// Opening a session, or a namespace request (short, and a session may wait for it): any
    /// place.
    OpenOrRequest,
}

/// Places among `max` that streams may not take, besides the one after them kept for a
/// request: a refused join costs a session only that stream (the client sends what went on
/// it over its other streams), a refused `Open` or listing the whole attempt.
fn kept_from_streams(max: usize) -> usize {
    max.div_ceil(8).clamp(1, 8).min(max)
}

/// Why no place was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Full {
    /// Every place the request may take is held.
    Server,
    /// The client's address holds all the places one address may.
    Address,
}

impl Places {
    /// At most `max` places, `per_address` of them for one client address.
    pub(crate) fn new(max: usize, per_address: usize) -> Places {
        Places {
            held: Arc::default(),
            max,
            per_address: per_address.clamp(1, max.max(1)),
        }
    }

    pub(crate) fn max(&self) -> usize {
        self.max
    }

    pub(crate) fn per_address(&self) -> usize {
        self.per_address
    }

    /// Between 1 and `wanted` places for `ip` (as many as are free). Streams may not take
    /// the last few places, in all and of its address (see [`Use::Stream`]): a client dials
    /// its joins, and the listing of its destination, at the same moment as the connection
    /// that opens its session, and they must not crowd it out, nor keep a new client from
    /// starting.
    pub(crate) fn take(
        &self,
        ip: Option<IpAddr>,
        wanted: usize,
        r#for: Use,
    ) -> Result<Place, Full> {
        self.take_within(ip, wanted, r#for, Duration::ZERO)
    }

    /// [`Places::take`], waiting up to `patience` for a place to be given back when none is
    /// free: a client that closes one connection and opens the next at once (a push's
    /// listing, then its session) must not find its own place still held.
    pub(crate) fn take_within(
        &self,
        ip: Option<IpAddr>,
        wanted: usize,
        r#for: Use,
        patience: Duration,
    ) -> Result<Place, Full> {
        let until = Instant::now() + patience;
        let (max, per_address) = match r#for {
            Use::OpenOrRequest => (self.max, self.per_address),
            Use::Stream => (
                self.max.saturating_sub(kept_from_streams(self.max) + 1),
                self.per_address
                    .saturating_sub(kept_from_streams(self.per_address) + 1),
            ),
        };
        let mut count = lock(&self.held.count);
        loop {
            let free_server = max.saturating_sub(count.all);
            let free_address = match ip {
                Some(_) => per_address.saturating_sub(count.of(ip)),
                None => usize::MAX,
            };
            let n = wanted.max(1).min(free_server).min(free_address);
            if n > 0 {
                count.add(ip, n);
                return Ok(Place {
                    held: self.held.clone(),
                    ip,
                    n,
                });
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(if free_server == 0 {
                    Full::Server
                } else {
                    Full::Address
                });
            }
            count = unpoisoned(self.held.freed.wait_timeout(count, left)).0;
        }
    }

    /// Places held now, in all.
    pub(crate) fn held(&self) -> usize {
        lock(&self.held.count).all
    }

    /// Waits until no place is held, or `until`; returns how many are held then.
    pub(crate) fn wait_none_held(&self, until: Instant) -> usize {
        let mut count = lock(&self.held.count);
        loop {
            let left = until.saturating_duration_since(Instant::now());
            if count.all == 0 || left.is_zero() {
                return count.all;
            }
            count = unpoisoned(self.held.freed.wait_timeout(count, left)).0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(n: u8) -> Option<IpAddr> {
        Some(IpAddr::from([127, 0, 0, n]))
    }

    #[test]
    fn a_handshake_slot_is_given_back_however_its_holder_ends() {
        let handshakes = Handshakes::default();
        // Returned normally.
        drop(handshakes.admit(ip(1), None).unwrap().0);
        assert_eq!(handshakes.held(ip(1)), (0, 0));
        // Its thread could not be started: the closure that owned it is dropped unrun.
        let slot = handshakes.admit(ip(1), None).unwrap().0;
        let never_run = move || drop(slot);
        drop(never_run);
        assert_eq!(handshakes.held(ip(1)), (0, 0));
        // Its thread panicked while it held it.
        let slot = handshakes.admit(ip(1), None).unwrap().0;
        let panicked = std::thread::spawn(move || {
            let _slot = slot;
            panic!("a connection's thread panicking in the handshake");
        })
        .join();
        assert!(panicked.is_err());
        assert_eq!(handshakes.held(ip(1)), (0, 0));
    }

    #[test]
    fn handshakes_are_bounded_in_all_and_per_address() {
        let handshakes = Handshakes::default();
        let mine: Vec<_> = (0..MAX_HANDSHAKING_PER_ADDRESS)
            .map(|_| handshakes.admit(ip(1), None).unwrap().0)
            .collect();
        assert!(handshakes.admit(ip(1), None).is_err());
        let others: Vec<_> = (MAX_HANDSHAKING_PER_ADDRESS..MAX_HANDSHAKING)
            .map(|i| handshakes.admit(ip(2 + (i % 200) as u8), None).unwrap().0)
            .collect();
        assert!(handshakes.admit(ip(250), None).is_err());
        drop((mine, others));
        assert_eq!(handshakes.held(ip(1)), (0, 0));
    }

    /// A stranger holding every place of an address does not keep newcomers out: a newcomer
    /// takes the place of the oldest (its socket is shut), whose own end does not give a place
    /// back twice (review 2026-11-29 of the server's confinement, F3).
    #[test]
    fn a_newcomer_takes_the_place_of_the_oldest_connection_authenticating() {
        let handshakes = Handshakes::default();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let idle = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (accepted, _) = listener.accept().unwrap();
        let first = handshakes.admit(ip(1), Some(accepted)).unwrap().0;
        let rest: Vec<_> = (1..MAX_HANDSHAKING_PER_ADDRESS)
            .map(|_| handshakes.admit(ip(1), None).unwrap().0)
            .collect();
        let newcomer = handshakes.admit(ip(1), None).unwrap().0;
        assert_eq!(handshakes.held(ip(1)).1, MAX_HANDSHAKING_PER_ADDRESS);
        // The oldest was closed: its peer reads the end of the stream.
        let mut buf = [0u8; 1];
        let read = std::io::Read::read(&mut &idle, &mut buf);
        assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
        drop(first);
        assert_eq!(handshakes.held(ip(1)).1, MAX_HANDSHAKING_PER_ADDRESS);
        drop((rest, newcomer));
        assert_eq!(handshakes.held(ip(1)), (0, 0));
    }

    #[test]
    fn places_are_bounded_in_all_and_per_address_and_given_back() {
        let places = Places::new(8, 6);
        let a = places.take(ip(1), 4, Use::OpenOrRequest).unwrap();
        let b = places.take(ip(1), 4, Use::OpenOrRequest).unwrap();
        // The address's share is 6: the second got 2 of the 4 it wanted.
        assert_eq!((a.len(), b.len()), (4, 2));
        assert_eq!(
            places.take(ip(1), 1, Use::OpenOrRequest).err(),
            Some(Full::Address)
        );
        // Another address gets the rest, but no stream the last two places.
        assert_eq!(places.take(ip(2), 4, Use::Stream).err(), Some(Full::Server));
        let c = places.take(ip(2), 4, Use::OpenOrRequest).unwrap();
        assert_eq!(c.len(), 2);
        assert_eq!(
            places.take(ip(3), 1, Use::OpenOrRequest).err(),
            Some(Full::Server)
        );
        drop((a, b, c));
        assert_eq!(places.held(), 0);
        // Nor of an address: joins dialled beside their `Open` cannot take its place, nor
        // that of the listing their session waits for.
        let joins = places.take(ip(1), 8, Use::Stream).unwrap();
        assert_eq!(joins.len(), 4);
        // The one after them is a request's (a listing its session waits for).
        let listing = places.take(ip(1), 1, Use::OpenOrRequest).unwrap();
        assert_eq!(
            places.take(ip(1), 1, Use::Stream).err(),
            Some(Full::Address)
        );
        assert!(places.take(ip(1), 1, Use::OpenOrRequest).is_ok());
        drop((joins, listing));
    }

    #[test]
    fn a_server_of_one_place_shares_it_with_requests_but_never_with_joins() {
        let places = Places::new(1, 1);
        // A join could hold the place and wait for its session, whose `Open` it kept out.
        assert_eq!(places.take(ip(1), 1, Use::Stream).err(), Some(Full::Server));
        // A request (a push's listing before its session) may have it.
        drop(places.take(ip(1), 1, Use::OpenOrRequest).unwrap());
        let open = places.take(ip(1), 1, Use::OpenOrRequest).unwrap();
        // A place given back while one waits is taken.
        let waiter = std::thread::scope(|s| {
            let waiting = s.spawn(|| {
                places.take_within(ip(1), 1, Use::OpenOrRequest, Duration::from_secs(10))
            });
            std::thread::sleep(Duration::from_millis(50));
            drop(open);
            waiting.join().unwrap()
        });
        let held = waiter.unwrap();
        assert_eq!(held.len(), 1);
        // And one that is not, after the patience only.
        let t = Instant::now();
        let refused = places.take_within(ip(2), 1, Use::OpenOrRequest, Duration::from_millis(100));
        assert_eq!(refused.err(), Some(Full::Server));
        assert!(t.elapsed() >= Duration::from_millis(100));
    }
}
