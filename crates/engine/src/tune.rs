//! Sizing TCP for a path: the host's kernel limits on socket buffers, the window one connection
//! can reach under them, how many streams fill a bandwidth-delay product, and the rule that
//! adds streams while throughput grows. No I/O except [`TcpLimits::read`].
//!
//! Linux facts this rests on: with receive autotuning (`tcp_moderate_rcvbuf`) a socket's
//! receive buffer grows up to `tcp_rmem[2]` and its send buffer up to `tcp_wmem[2]`; an
//! explicit `SO_RCVBUF`/`SO_SNDBUF` is capped at `net.core.rmem_max`/`wmem_max`, doubled by the
//! kernel for its bookkeeping, and turns autotuning off for that socket. About half of a
//! receive buffer is window (the rest is overhead), and a sender can have at most its send
//! buffer in flight. So one stream moves at most `window / RTT`.

use std::time::Duration;

/// The host's TCP buffer settings (`/proc/sys/net/...`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct TcpLimits {
    pub rmem_max: u64,
    pub wmem_max: u64,
    /// `net.ipv4.tcp_rmem`: min, default, max.
    pub tcp_rmem: [u64; 3],
    /// `net.ipv4.tcp_wmem`: min, default, max.
    pub tcp_wmem: [u64; 3],
    pub moderate_rcvbuf: bool,
    pub congestion_control: String,
    pub default_qdisc: String,
    pub slow_start_after_idle: bool,
}

impl Default for TcpLimits {
    /// Linux's own defaults, used for any setting that cannot be read.
    fn default() -> Self {
        TcpLimits {
            rmem_max: 212_992,
            wmem_max: 212_992,
            tcp_rmem: [4096, 131_072, 6_291_456],
            tcp_wmem: [4096, 16_384, 4_194_304],
            moderate_rcvbuf: true,
            congestion_control: "cubic".into(),
            default_qdisc: "pfifo_fast".into(),
            slow_start_after_idle: true,
        }
    }
}

/// Share of a receive buffer that the kernel offers as window.
const WINDOW_SHARE: f64 = 0.5;

fn sysctl(name: &str) -> Option<String> {
    let path = format!("/proc/sys/{}", name.replace('.', "/"));
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

fn triple(text: &str) -> Option<[u64; 3]> {
    let v: Vec<u64> = text
        .split_whitespace()
        .filter_map(|t| t.parse().ok())
        .collect();
    (v.len() == 3).then(|| [v[0], v[1], v[2]])
}

impl TcpLimits {
    /// Reads the running kernel's settings; unreadable ones keep Linux's defaults.
    pub fn read() -> TcpLimits {
        let d = TcpLimits::default();
        let num = |n: &str, dflt: u64| sysctl(n).and_then(|s| s.parse().ok()).unwrap_or(dflt);
        let flag = |n: &str, dflt: bool| sysctl(n).map(|s| s != "0").unwrap_or(dflt);
        TcpLimits {
            rmem_max: num("net.core.rmem_max", d.rmem_max),
            wmem_max: num("net.core.wmem_max", d.wmem_max),
            tcp_rmem: sysctl("net.ipv4.tcp_rmem")
                .and_then(|s| triple(&s))
                .unwrap_or(d.tcp_rmem),
            tcp_wmem: sysctl("net.ipv4.tcp_wmem")
                .and_then(|s| triple(&s))
                .unwrap_or(d.tcp_wmem),
            moderate_rcvbuf: flag("net.ipv4.tcp_moderate_rcvbuf", d.moderate_rcvbuf),
            congestion_control: sysctl("net.ipv4.tcp_congestion_control")
                .unwrap_or(d.congestion_control),
            default_qdisc: sysctl("net.core.default_qdisc").unwrap_or(d.default_qdisc),
            slow_start_after_idle: flag(
                "net.ipv4.tcp_slow_start_after_idle",
                d.slow_start_after_idle,
            ),
        }
    }

    /// The largest window of one connection left to the kernel's autotuning.
    pub fn autotuned_window(&self) -> u64 {
        let rcv = if self.moderate_rcvbuf {
            self.tcp_rmem[2]
        } else {
            self.tcp_rmem[1]
        };
        ((rcv as f64 * WINDOW_SHARE) as u64).min(self.tcp_wmem[2])
    }

    /// The window of a connection whose buffers are set to `bytes` explicitly (the kernel caps
    /// the request at `*mem_max` and doubles it).
    pub fn explicit_window(&self, bytes: u64) -> u64 {
        let rcv = bytes.min(self.rmem_max) * 2;
        let snd = bytes.min(self.wmem_max) * 2;
        ((rcv as f64 * WINDOW_SHARE) as u64).min(snd)
    }

    /// The window and the buffer request (`None`: autotuning) of a connection: `requested`
    /// bytes if the user gave a size, else the best this host allows.
    pub fn buffers(&self, requested: Option<u64>) -> (u64, Option<u64>) {
        match requested {
            Some(b) => (self.explicit_window(b), Some(b)),
            None => self.best_window(),
        }
    }

    /// The largest window any setting reaches on this host, and the buffer request that gets
    /// it (`None`: leave the buffers to autotuning).
    pub fn best_window(&self) -> (u64, Option<u64>) {
        let auto = self.autotuned_window();
        let max_request = self.rmem_max.min(self.wmem_max);
        let explicit = self.explicit_window(max_request);
        if explicit > auto {
            (explicit, Some(max_request))
        } else {
            (auto, None)
        }
    }
}

/// Bytes in flight needed to keep `rate` busy over `rtt`.
pub fn bdp(rtt: Duration, rate_bytes_per_s: f64) -> u64 {
    (rtt.as_secs_f64() * rate_bytes_per_s).ceil() as u64
}

/// Streams of `window` bytes each that together hold `bdp` (at least 1).
pub fn streams_for(bdp: u64, window: u64) -> usize {
    (bdp.div_ceil(window.max(1)) as usize).max(1)
}

/// Fewest streams an automatic session starts with: enough to overlap one stream's reads,
/// network and writes with another's on a path without latency.
pub const MIN_AUTO_STREAMS: usize = 4;
/// Most streams an automatic session grows to.
pub const MAX_AUTO_STREAMS: usize = 32;
/// The link rate an automatic session first sizes its streams for; it adds streams from there
/// while throughput grows.
pub const INITIAL_RATE_GUESS: f64 = 125e6;

/// How long a client waits for the server's hello before it takes the path for a long one
/// (a round trip over twice this) and starts [`WIDE_START_STREAMS`] at once: on loopback and
/// a LAN the hello comes within a millisecond.
pub const HELLO_GRACE: Duration = Duration::from_millis(20);
/// Streams an automatic session starts on a long path before it knows the round trip. Slow
/// start leaves the link idle for about log2(BDP / (streams x 14.5 KB)) round trips, less
/// what those round trips carry: at 100 ms and 1 Gbit/s, 0.49 s with 14 streams, 0.36 s with
/// 32. The adapter retires what the path does not need.
pub const WIDE_START_STREAMS: usize = MAX_AUTO_STREAMS;

/// Shortest round trip on which a transfer's first batches are shaped for slow start (see
/// `pipeline::plan` and `session::opening`): on loopback and a LAN a round trip of slow start
/// costs too little to pay for more, smaller batches.
pub const SLOW_START_FROM_RTT: Duration = Duration::from_millis(1);

/// The round trip of a transfer's path once its session measured it, shared by every clone
/// of the transfer's options: the planner reads it as it sizes the first batches.
#[derive(Debug, Clone, Default)]
pub struct PathRtt(std::sync::Arc<std::sync::atomic::AtomicU64>);

impl PathRtt {
    /// Records a measured round trip; the longest recorded counts (a push over several
    /// servers: the first batches are shaped for the longest path among them).
    pub fn set(&self, rtt: Duration) {
        let nanos = u64::try_from(rtt.as_nanos()).unwrap_or(u64::MAX - 1);
        self.0.fetch_max(
            nanos.saturating_add(1),
            std::sync::atomic::Ordering::Relaxed,
        );
    }

    /// The measured round trip, if one was recorded.
    pub fn get(&self) -> Option<Duration> {
        match self.0.load(std::sync::atomic::Ordering::Relaxed) {
            0 => None,
            n => Some(Duration::from_nanos(n - 1)),
        }
    }

    /// Whether the path is known to be short (below [`SLOW_START_FROM_RTT`]).
    pub fn is_short(&self) -> bool {
        self.get().is_some_and(|rtt| rtt < SLOW_START_FROM_RTT)
    }
}

/// TCP's initial congestion window (10 segments, RFC 6928): what a new connection may send
/// in its first round trip before slow start doubles it each round trip.
pub const INITIAL_CWND: u64 = 10 * 1448;
/// Round trips of slow start an automatic session accepts before its streams together can
/// hold the bandwidth-delay product: each stream starts at [`INITIAL_CWND`], so reaching a
/// large BDP sooner takes more streams (their initial windows add up). Measured through
/// `sprat relay` at 100 ms, 1 Gbit/s, 100k x 4 KiB: 4 streams 4.54 s, 8: 4.45 s, 14 (this
/// rule): 4.40 s, 20: 4.38 s, 32: 4.52 s (many streams fill the bottleneck queue and end late).
pub const RAMP_ROUND_TRIPS: u32 = 6;

/// Streams whose windows, starting at [`INITIAL_CWND`] and doubling every round trip, hold
/// `bdp` after [`RAMP_ROUND_TRIPS`] round trips.
pub fn streams_for_ramp(bdp: u64) -> usize {
    streams_for(bdp, INITIAL_CWND << RAMP_ROUND_TRIPS)
}

/// The settings a session starts with.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct StartPlan {
    pub streams: usize,
    /// The per-stream window these streams can reach.
    pub window: u64,
    /// Buffer size to request explicitly, or `None` for kernel autotuning.
    pub tcp_buffer: Option<u64>,
}

/// Streams and buffers for a path of round trip `rtt`. `streams` and `tcp_buffer` given by
/// the user win; otherwise there are enough streams for [`INITIAL_RATE_GUESS`], both once
/// their windows are fully open (the best window the host allows) and after a short slow
/// start ([`streams_for_ramp`]): on a long path most of a transfer of small files can
/// otherwise pass in slow start.
pub fn start_plan(
    limits: &TcpLimits,
    rtt: Duration,
    streams: Option<usize>,
    tcp_buffer: Option<u64>,
) -> StartPlan {
    let (window, buffer) = limits.buffers(tcp_buffer);
    let streams = streams.unwrap_or_else(|| {
        let bdp = bdp(rtt, INITIAL_RATE_GUESS);
        streams_for(bdp, window)
            .max(streams_for_ramp(bdp))
            .clamp(MIN_AUTO_STREAMS, MAX_AUTO_STREAMS)
    });
    StartPlan {
        streams,
        window,
        tcp_buffer: buffer,
    }
}

/// Streams an automatic session runs first on a path of round trip `rtt`: the
/// [`start_plan`]'s, or the [`WIDE_START_STREAMS`] a session starts at once when the server's
/// hello (two round trips after dialling) takes longer than [`HELLO_GRACE`].
pub fn streams_at_start(limits: &TcpLimits, rtt: Duration) -> usize {
    let planned = start_plan(limits, rtt, None, None).streams;
    if rtt * 2 > HELLO_GRACE {
        planned.max(WIDE_START_STREAMS)
    } else {
        planned
    }
}

/// How long the adapter waits and measures before each decision: long enough for new
/// streams to leave slow start (about log2(window / 10 segments) round trips) and for their
/// acknowledgements to come back.
pub fn adapt_interval(rtt: Duration) -> Duration {
    (rtt * 12).max(Duration::from_millis(400))
}

/// What the adapter wants done after a measurement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Open this many more streams.
    Add(usize),
    /// Retire this many of the most recently added streams.
    Retire(usize),
    /// Keep things as they are.
    Hold,
}

/// Hill climbing on the number of streams: grow by half while each growth raised throughput
/// by at least [`Adapter::GAIN`], give the last growth back when throughput fell, and stop
/// once a growth did not pay.
#[derive(Debug, Clone)]
pub struct Adapter {
    streams: usize,
    max: usize,
    best_rate: f64,
    last_added: usize,
    settled: bool,
}

impl Adapter {
    /// Relative throughput gain that justifies more streams.
    pub const GAIN: f64 = 1.10;
    /// Relative loss after a growth that makes the adapter give it back.
    pub const LOSS: f64 = 0.85;

    pub fn new(streams: usize, max: usize) -> Adapter {
        Adapter {
            streams,
            max: max.max(streams),
            best_rate: 0.0,
            last_added: 0,
            settled: false,
        }
    }

    pub fn streams(&self) -> usize {
        self.streams
    }

    pub fn settled(&self) -> bool {
        self.settled
    }

    /// Share of what the streams' windows allow (streams x window / RTT) that the throughput
    /// must reach before more streams can help: below it the windows are not the limit.
    pub const WINDOW_BOUND: f64 = 0.5;

    /// Takes the throughput (bytes/s) of the interval just ended and the most the current
    /// streams' windows allow (`window_bound`, bytes/s).
    pub fn observe(&mut self, rate: f64, window_bound: f64) -> Step {
        if self.settled {
            return Step::Hold;
        }
        if self.last_added == 0 && rate < window_bound * Self::WINDOW_BOUND {
            // Something else bounds the transfer (storage, CPU, slow start): wait and see.
            self.best_rate = self.best_rate.max(rate);
            return Step::Hold;
        }
        if self.last_added > 0 && rate < self.best_rate * Self::LOSS {
            let retire = self.last_added;
            self.streams -= retire;
            self.settled = true;
            return Step::Retire(retire);
        }
        if self.best_rate > 0.0 && rate < self.best_rate * Self::GAIN {
            // No gain: keep what we have (a first measurement always grows).
            if self.last_added > 0 {
                self.settled = true;
                return Step::Hold;
            }
        }
        self.best_rate = self.best_rate.max(rate);
        let add = (self.streams / 2).max(1).min(self.max - self.streams);
        if add == 0 {
            self.settled = true;
            return Step::Hold;
        }
        self.streams += add;
        self.last_added = add;
        Step::Add(add)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn this_kind_of_host() -> TcpLimits {
        TcpLimits {
            rmem_max: 4 << 20,
            wmem_max: 4 << 20,
            tcp_rmem: [4096, 131_072, 32 << 20],
            tcp_wmem: [4096, 16_384, 4 << 20],
            ..TcpLimits::default()
        }
    }

    #[test]
    fn autotuning_is_capped_by_the_send_buffer() {
        let l = this_kind_of_host();
        assert_eq!(l.autotuned_window(), 4 << 20);
        // Explicit 4 MiB buffers: 8 MiB receive buffer, half of it window.
        assert_eq!(l.explicit_window(64 << 20), 4 << 20);
        assert_eq!(l.best_window(), (4 << 20, None));
        // Linux defaults: autotuning reaches 3 MiB, explicit buffers only 208 KiB.
        let d = TcpLimits::default();
        assert_eq!(d.autotuned_window(), 3 << 20);
        assert_eq!(d.best_window().1, None);
        // A host with a large rmem_max but small tcp_rmem is better off with explicit buffers.
        let big = TcpLimits {
            rmem_max: 64 << 20,
            wmem_max: 64 << 20,
            ..TcpLimits::default()
        };
        assert_eq!(big.best_window(), (64 << 20, Some(64 << 20)));
    }

    #[test]
    fn streams_cover_the_bdp() {
        let l = this_kind_of_host();
        let streams = |rtt_us: u64, buffer: Option<u64>| {
            start_plan(&l, Duration::from_micros(rtt_us), None, buffer).streams
        };
        // Without latency, the minimum.
        assert_eq!(streams(200, None), MIN_AUTO_STREAMS);
        // 1 Gbit/s x 10 ms = 1.25 MB: one 4 MiB window holds it, and slow start gets there
        // in 6 round trips with 1.25 MB / (14,480 B x 2^6) = 1.3 streams: the minimum.
        assert_eq!(streams(10_000, None), MIN_AUTO_STREAMS);
        assert_eq!(streams(30_000, None), 5);
        // 12.5 MB at 100 ms: 13.5 initial windows' worth after 6 round trips.
        assert_eq!(streams(100_000, None), 14);
        // 125 MB at 1 s would take 135: capped.
        assert_eq!(streams(1_000_000, None), MAX_AUTO_STREAMS);
        assert_eq!(start_plan(&l, Duration::ZERO, None, None).tcp_buffer, None);
        // Small explicit buffers: 64 KiB windows, 20 of them for 1.25 MB.
        assert_eq!(streams(10_000, Some(64 << 10)), 20);
        // The user's choice wins.
        let p = start_plan(&l, Duration::from_millis(100), Some(2), Some(1 << 20));
        assert_eq!(
            (p.streams, p.tcp_buffer, p.window),
            (2, Some(1 << 20), 1 << 20)
        );
        assert_eq!(bdp(Duration::from_millis(30), 125e6), 3_750_000);
    }

    #[test]
    fn adapter_grows_while_throughput_grows_then_settles() {
        let mut a = Adapter::new(4, 32);
        let bound = 50e6;
        assert_eq!(a.observe(40e6, bound), Step::Add(2));
        assert_eq!(a.observe(60e6, bound), Step::Add(3));
        assert_eq!(a.observe(90e6, bound), Step::Add(4));
        // The link is full: no gain, keep 13 streams.
        assert_eq!(a.observe(92e6, bound), Step::Hold);
        assert!(a.settled());
        assert_eq!(a.streams(), 13);
        assert_eq!(a.observe(200e6, bound), Step::Hold);
    }

    #[test]
    fn adapter_adds_nothing_while_windows_are_not_the_limit() {
        // 4 streams of 4 MiB at 1 ms allow 16 GB/s; 300 MB/s is bounded elsewhere.
        let mut a = Adapter::new(4, 32);
        assert_eq!(a.observe(100e6, 16e9), Step::Hold);
        assert_eq!(a.observe(300e6, 16e9), Step::Hold);
        assert!(!a.settled());
        assert_eq!(a.streams(), 4);
        // The path gets longer (or faster): the windows bind, streams are added.
        assert_eq!(a.observe(300e6, 400e6), Step::Add(2));
    }

    #[test]
    fn adapter_gives_back_a_growth_that_hurt() {
        let mut a = Adapter::new(4, 32);
        assert_eq!(a.observe(100e6, 100e6), Step::Add(2));
        assert_eq!(a.observe(70e6, 150e6), Step::Retire(2));
        assert_eq!(a.streams(), 4);
    }

    #[test]
    fn adapter_stops_at_its_maximum() {
        let mut a = Adapter::new(4, 6);
        assert_eq!(a.observe(1e6, 1e6), Step::Add(2));
        assert_eq!(a.observe(2e6, 1.5e6), Step::Hold);
        assert_eq!(a.streams(), 6);
    }

    #[test]
    fn a_long_path_starts_wide_as_the_session_does() {
        let l = TcpLimits::default();
        assert_eq!(
            streams_at_start(&l, Duration::from_micros(50)),
            MIN_AUTO_STREAMS
        );
        assert_eq!(
            streams_at_start(&l, Duration::from_millis(50)),
            WIDE_START_STREAMS
        );
    }
}
