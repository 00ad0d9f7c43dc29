//! The client side of a session's connections: opens the control connection (measuring the
//! round trip on its authentication exchange) while the first joining connections are dialled
//! beside it, sizes socket buffers and the starting number of streams from that round trip
//! and the host's TCP limits, joins further streams in parallel (at the start and while the
//! transfer runs), grows them while throughput grows, and records when each stream ran out of
//! data (the tail).

use crate::config::TransferOptions;
use crate::error::TransferError;
use crate::net::{self, Conn, Dialed};
use crate::report::PathReport;
use crate::tune::{self, Adapter, StartPlan, Step, TcpLimits};
use crossbeam_channel::{bounded, Receiver, Sender};
use sprat_proto::auth::TokenKey;
use sprat_proto::{Message, Operation};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// An open session: what it needs to join more streams and what it measured.
pub struct Session {
    addr: String,
    key: Option<TokenKey>,
    id: [u8; 16],
    pub root_is_dir: bool,
    pub rtt: Duration,
    pub plan: StartPlan,
    /// Streams are chosen and adapted by sprat (no `--streams`).
    pub auto: bool,
    /// Connections dialled while the session opened, for the first joins.
    dialled: Mutex<Vec<JoinHandle<Result<Dialed, TransferError>>>>,
    /// Dropped once the planned streams have joined (or failed to); see [`Session::commit`].
    planned_joining: Mutex<Option<Sender<()>>>,
    planned_joined: Receiver<()>,
}

/// Opens a session (`Open` on a control connection) and plans its streams. Returns the
/// session and the control connection; the transfer starts on it at once and joins the other
/// planned streams ([`Session::join_planned`]) while the first data already flows.
pub fn open(
    addr: &str,
    key: Option<&TokenKey>,
    op: Operation,
    path: &[u8],
    options: &TransferOptions,
) -> Result<(Session, Conn), TransferError> {
    let limits = TcpLimits::read();
    // Buffers do not depend on the round trip, so the control connection gets them too.
    let (_, buffer) = limits.buffers(options.tcp_buffer);
    // The streams every session will have are dialled beside the control connection: their
    // connect and greeting overlap its opening, and they join as soon as it is open.
    let ahead = options
        .streams
        .unwrap_or(tune::MIN_AUTO_STREAMS)
        .saturating_sub(1);
    let dialled = (0..ahead)
        .map(|_| {
            let addr = addr.to_string();
            std::thread::spawn(move || net::dial(&addr, buffer))
        })
        .collect();
    let open = Message::Open {
        op,
        path: path.to_vec(),
    };
    let mut control = net::connect_with(addr, key, &open, buffer)?;
    let (id, root_is_dir) = match control.recv_control()? {
        Message::Opened {
            session,
            root_is_dir,
        } => (session, root_is_dir),
        other => return Err(control.protocol(format!("expected Opened, got {other:?}"))),
    };
    let rtt = control.rtt.unwrap_or_default();
    let plan = tune::start_plan(&limits, rtt, options.streams, options.tcp_buffer);
    let (planned_joining, planned_joined) = bounded(0);
    let session = Session {
        addr: addr.to_string(),
        key: key.cloned(),
        id,
        root_is_dir,
        rtt,
        plan,
        auto: options.streams.is_none(),
        dialled: Mutex::new(dialled),
        planned_joining: Mutex::new(Some(planned_joining)),
        planned_joined,
    };
    Ok((session, control))
}

impl Session {
    /// Joins the streams planned beyond the control connection.
    pub fn join_planned(&self) -> Result<Vec<Conn>, TransferError> {
        let joined = self.join(self.plan.streams.saturating_sub(1));
        self.planned_joining
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        joined
    }

    /// Sends `Commit` on `control` (a handle on the control connection) as soon as its own
    /// stream has ended, while the other streams finish: the server's totals then come back
    /// without a round trip of their own. Waits for the planned streams to have joined first:
    /// the server forgets the session once it answers, and a join after that would fail.
    pub fn commit(&self, control: &mut Conn) -> Result<(), TransferError> {
        let _ = self.planned_joined.recv();
        control.send(&Message::Commit)
    }

    /// Joins `n` more connections to the session, in parallel: those dialled while the
    /// session opened first, then new ones.
    pub fn join(&self, n: usize) -> Result<Vec<Conn>, TransferError> {
        let mut dialled =
            std::mem::take(&mut *self.dialled.lock().unwrap_or_else(|p| p.into_inner()));
        dialled.truncate(n);
        let fresh = n - dialled.len();
        let join = |d: Result<Dialed, TransferError>| {
            let mut c = d?.authenticate(self.key.as_ref(), &Message::Join { session: self.id })?;
            match c.recv_control()? {
                Message::Joined => Ok(c),
                other => Err(c.protocol(format!("expected Joined, got {other:?}"))),
            }
        };
        fn thread_failed<T>() -> Result<T, TransferError> {
            Err(TransferError::Local("a connecting thread failed".into()))
        }
        let joined: Vec<Result<Conn, TransferError>> = std::thread::scope(|s| {
            let joins: Vec<_> = dialled
                .into_iter()
                .map(|h| s.spawn(move || join(h.join().unwrap_or_else(|_| thread_failed()))))
                .chain(
                    (0..fresh)
                        .map(|_| s.spawn(|| join(net::dial(&self.addr, self.plan.tcp_buffer)))),
                )
                .collect();
            joins
                .into_iter()
                .map(|j| j.join().unwrap_or_else(|_| thread_failed()))
                .collect()
        });
        joined.into_iter().collect()
    }

    /// Grows the session's streams while throughput grows (hill climbing, see
    /// [`tune::Adapter`]), until `finished` says the data ran out or the transfer failed.
    /// `progress` counts bytes delivered; `apply` starts streams on new connections or
    /// retires the newest ones. Returns the most streams open at once.
    pub fn adapt(
        &self,
        progress: &AtomicU64,
        finished: impl Fn() -> bool,
        mut apply: impl FnMut(Change),
    ) -> usize {
        let mut adapter = Adapter::new(self.plan.streams, tune::MAX_AUTO_STREAMS);
        let mut most = self.plan.streams;
        let interval = tune::adapt_interval(self.rtt);
        // Measure only the later part of each interval: new streams first leave slow start.
        let settle = interval.mul_f64(0.4);
        while !adapter.settled() {
            if !sleep_unless(settle, &finished) {
                break;
            }
            let (from, at) = (progress.load(Ordering::Relaxed), Instant::now());
            if !sleep_unless(interval - settle, &finished) {
                break;
            }
            let delivered = progress.load(Ordering::Relaxed).saturating_sub(from);
            let rate = delivered as f64 / at.elapsed().as_secs_f64().max(1e-6);
            let bound = (adapter.streams() as u64 * self.plan.window) as f64
                / self.rtt.as_secs_f64().max(1e-6);
            match adapter.observe(rate, bound) {
                Step::Add(n) => match self.join(n) {
                    Ok(conns) => {
                        apply(Change::Grow(conns));
                        most = most.max(adapter.streams());
                    }
                    // The transfer goes on with the streams it has.
                    Err(_) => break,
                },
                Step::Retire(n) => apply(Change::Retire(n)),
                Step::Hold => {}
            }
        }
        most
    }

    /// The report's account of the path: measurements, choices and the tail.
    pub fn report(&self, streams_max: usize, streams_end: usize, tail: &Tail) -> PathReport {
        let (tail_s, tail_idle_s) = tail.summary();
        PathReport {
            rtt_ms: self.rtt.as_secs_f64() * 1e3,
            auto_streams: self.auto,
            streams_start: self.plan.streams,
            streams_max,
            streams_end,
            tcp_buffer: self.plan.tcp_buffer,
            window_bytes: self.plan.window,
            covered_bytes_per_s: (streams_max as u64 * self.plan.window) as f64
                / self.rtt.as_secs_f64().max(1e-6),
            tail_s,
            tail_idle_s,
        }
    }
}

/// What [`Session::adapt`] asks of the transfer.
pub enum Change {
    /// Start streams on these newly joined connections.
    Grow(Vec<Conn>),
    /// End this many of the most recently started streams.
    Retire(usize),
}

/// Sleeps `d` in short slices; false as soon as `finished` holds.
fn sleep_unless(d: Duration, finished: &impl Fn() -> bool) -> bool {
    let until = Instant::now() + d;
    loop {
        if finished() {
            return false;
        }
        let now = Instant::now();
        if now >= until {
            return true;
        }
        std::thread::sleep((until - now).min(Duration::from_millis(10)));
    }
}

/// When each stream that carried data to the end ran out of it.
#[derive(Default)]
pub struct Tail {
    ends: Mutex<Vec<Instant>>,
}

impl Tail {
    pub fn record(&self) {
        self.ends
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Instant::now());
    }

    /// (last end - first end, mean of last end - each end), in seconds.
    pub fn summary(&self) -> (f64, f64) {
        let ends = self.ends.lock().unwrap_or_else(|p| p.into_inner());
        let (Some(first), Some(last)) = (ends.iter().min(), ends.iter().max()) else {
            return (0.0, 0.0);
        };
        let idle: f64 =
            ends.iter().map(|e| (*last - *e).as_secs_f64()).sum::<f64>() / ends.len() as f64;
        ((*last - *first).as_secs_f64(), idle)
    }
}
