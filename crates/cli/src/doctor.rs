//! `sprat doctor`: the host's TCP settings that decide long-distance throughput, what they
//! allow on a path of a given round trip and bandwidth (measured against a server, or given),
//! and what to change, in the spirit of published host-tuning guides (e.g. ESnet's).

use crate::args::DoctorArgs;
use serde::Serialize;
use sprat_engine::report::human_bytes;
use sprat_engine::tune::{self, TcpLimits};
use sprat_engine::Credentials;
use sprat_engine::Endpoint;
use sprat_engine::TransferError;
use std::time::Duration;

/// What one path needs and gets.
#[derive(Serialize)]
struct PathAdvice {
    rtt_ms: f64,
    rate_bytes_per_s: f64,
    bdp_bytes: u64,
    /// Largest window of one stream here.
    window_bytes: u64,
    /// Throughput one stream (rsync, scp, tar | nc) reaches at most.
    single_stream_bytes_per_s: f64,
    /// Streams of that window the BDP needs.
    streams_needed: usize,
    /// Streams sprat starts with on this path.
    sprat_starts_with: usize,
}

/// One suggested setting.
#[derive(Serialize)]
struct Change {
    setting: String,
    now: String,
    suggested: String,
    why: String,
}

#[derive(Serialize)]
struct Diagnosis {
    limits: TcpLimits,
    autotuned_window_bytes: u64,
    explicit_window_bytes: u64,
    sprat_buffers: String,
    /// RTTs measured against the server, in ms (empty when none was given).
    measured_rtt_ms: Vec<f64>,
    paths: Vec<PathAdvice>,
    changes: Vec<Change>,
    /// With --data: transfer nodes the path needs for that data set.
    #[serde(skip_serializing_if = "Option::is_none")]
    nodes: Option<Nodes>,
}

/// How many transfer nodes like this one a data set and a path need (`--data`).
#[derive(Serialize)]
struct Nodes {
    data: String,
    files: u64,
    bytes: u64,
    /// Seconds this host took to read the whole set, and the rates that makes.
    read_s: f64,
    read_bytes_per_s: f64,
    read_files_per_s: f64,
    /// The destination's write rate per node, when given.
    write_bytes_per_s: Option<f64>,
    link_bytes_per_s: f64,
    /// `max(N / R, N / W)` rounded up (`N`: the link).
    nodes: u64,
    /// The data set's time with that many nodes, at the slowest of link and storage.
    predicted_s: f64,
    /// With one node only.
    one_node_s: f64,
}

fn size_nodes(dir: &std::path::Path, link: f64, write: Option<f64>) -> anyhow::Result<Nodes> {
    let run = sprat_lab::bench::read_limit(dir, 16)
        .map_err(|e| anyhow::anyhow!("--data '{}': {e}", dir.display()))?;
    let read_s = run.seconds.max(1e-9);
    let read_rate = (run.bytes as f64 / read_s).max(1.0);
    let write_rate = write.unwrap_or(f64::INFINITY);
    let nodes = sprat_lab::model::nodes_for_link(link, read_rate, write_rate);
    let node_rate = read_rate.min(write_rate);
    let time = |n: u64| run.bytes as f64 / (n as f64 * node_rate).min(link);
    Ok(Nodes {
        data: dir.display().to_string(),
        files: run.files,
        bytes: run.bytes,
        read_s,
        read_bytes_per_s: read_rate,
        read_files_per_s: run.files as f64 / read_s,
        write_bytes_per_s: write,
        link_bytes_per_s: link,
        nodes,
        predicted_s: time(nodes),
        one_node_s: time(1),
    })
}

fn advise(limits: &TcpLimits, rtt: Duration, rate: f64) -> PathAdvice {
    let (window, _) = limits.best_window();
    let bdp = tune::bdp(rtt, rate);
    PathAdvice {
        rtt_ms: rtt.as_secs_f64() * 1e3,
        rate_bytes_per_s: rate,
        bdp_bytes: bdp,
        window_bytes: window,
        single_stream_bytes_per_s: (window as f64 / rtt.as_secs_f64().max(1e-6)).min(rate),
        streams_needed: tune::streams_for(bdp, window),
        sprat_starts_with: tune::streams_at_start(limits, rtt),
    }
}

/// Settings to change so that one stream could hold `bdp` (capped at 1 GiB).
fn changes(limits: &TcpLimits, bdp: u64) -> Vec<Change> {
    let want = bdp.min(1 << 30);
    let mut out = Vec::new();
    if want <= limits.best_window().0 {
        // One stream already holds the BDP: only pacing is left to suggest.
        return qdisc_change(limits).into_iter().collect();
    }
    // (setting, its min/default/max, the max it needs, why)
    let autotuned = [
        (
            "net.ipv4.tcp_rmem",
            limits.tcp_rmem,
            2 * want,
            format!(
                "autotuning may grow a receive buffer to the third value; about half of it is \
                 window, and one stream needs {} of window",
                human_bytes(want)
            ),
        ),
        (
            "net.ipv4.tcp_wmem",
            limits.tcp_wmem,
            want,
            format!(
                "a sender keeps unacknowledged data in its send buffer: today every stream's \
                 window stops at {}",
                human_bytes(limits.tcp_wmem[2])
            ),
        ),
    ];
    let triple = |t: [u64; 3]| format!("{} {} {}", t[0], t[1], t[2]);
    for (setting, now, needed, why) in autotuned {
        if now[2] < needed {
            let mut t = now;
            t[2] = 2 * want;
            out.push(Change {
                setting: setting.into(),
                now: triple(now),
                suggested: triple(t),
                why,
            });
        }
    }
    for (name, now) in [
        ("net.core.rmem_max", limits.rmem_max),
        ("net.core.wmem_max", limits.wmem_max),
    ] {
        if now < 2 * want {
            out.push(Change {
                setting: name.into(),
                now: now.to_string(),
                suggested: (2 * want).to_string(),
                why: "caps buffers a program sets explicitly (sprat --tcp-buffer, GridFTP \
                      -tcp-bs, iperf3 -w)"
                    .into(),
            });
        }
    }
    if !limits.moderate_rcvbuf {
        out.push(Change {
            setting: "net.ipv4.tcp_moderate_rcvbuf".into(),
            now: "0".into(),
            suggested: "1".into(),
            why: "receive buffers stay at their default size without autotuning".into(),
        });
    }
    out.extend(qdisc_change(limits));
    out
}

fn qdisc_change(limits: &TcpLimits) -> Option<Change> {
    (limits.default_qdisc != "fq").then(|| Change {
        setting: "net.core.default_qdisc".into(),
        now: limits.default_qdisc.clone(),
        suggested: "fq".into(),
        why: "fair queueing paces every stream, so many parallel streams do not burst into a \
              shallow switch buffer"
            .into(),
    })
}

fn measure(url: &std::ffi::OsStr, key: &Credentials) -> anyhow::Result<Vec<Duration>> {
    let Endpoint::Remote { addr, .. } = Endpoint::parse(url)? else {
        return Err(TransferError::Usage(format!(
            "'{}' is not a server URL (sprat://HOST:PORT/)",
            url.to_string_lossy()
        ))
        .into());
    };
    Ok(sprat_engine::remote::probe_rtt(&addr, key, 5)?)
}

pub fn run(a: DoctorArgs, key: Credentials) -> anyhow::Result<i32> {
    let limits = TcpLimits::read();
    let measured = match &a.url {
        Some(url) => measure(url, &key)?,
        None => Vec::new(),
    };
    let rtts: Vec<Duration> = if let Some(rtt) = a.rtt {
        vec![rtt]
    } else if let Some(min) = measured.iter().min() {
        vec![*min]
    } else {
        [1, 10, 30, 100].map(Duration::from_millis).to_vec()
    };
    let paths: Vec<PathAdvice> = rtts
        .iter()
        .map(|r| advise(&limits, *r, a.rate.bytes_per_s()))
        .collect();
    let worst_bdp = paths.iter().map(|p| p.bdp_bytes).max().unwrap_or(0);
    let nodes = match &a.data {
        Some(dir) => {
            let link = a.rate.bytes_per_s();
            if link <= 0.0 {
                anyhow::bail!(TransferError::Usage(
                    "--data needs the path's --rate (above 0)".into()
                ));
            }
            let write = a.write_rate.map(|r| r.bytes_per_s()).filter(|&w| w > 0.0);
            Some(size_nodes(dir, link, write)?)
        }
        None => None,
    };
    let (_, explicit) = limits.best_window();
    let d = Diagnosis {
        autotuned_window_bytes: limits.autotuned_window(),
        explicit_window_bytes: limits.explicit_window(limits.rmem_max.min(limits.wmem_max)),
        sprat_buffers: match explicit {
            Some(b) => format!("explicit {} per socket", human_bytes(b)),
            None => "kernel autotuning".into(),
        },
        measured_rtt_ms: measured.iter().map(|r| r.as_secs_f64() * 1e3).collect(),
        changes: changes(&limits, worst_bdp),
        limits,
        paths,
        nodes,
    };
    if a.json {
        crate::print_quietly(&format!("{}\n", serde_json::to_string_pretty(&d)?))?;
    } else {
        crate::print_quietly(&render(&d))?;
    }
    Ok(0)
}

fn render(d: &Diagnosis) -> String {
    use std::fmt::Write;
    let l = &d.limits;
    let mut o = String::new();
    let mb = |b: f64| format!("{:.0} MB/s ({:.2} Gbit/s)", b / 1e6, b * 8e-9);
    let _ = writeln!(o, "host TCP settings");
    let _ = writeln!(o, "  net.core.rmem_max              {}", l.rmem_max);
    let _ = writeln!(o, "  net.core.wmem_max              {}", l.wmem_max);
    let _ = writeln!(o, "  net.ipv4.tcp_rmem              {:?}", l.tcp_rmem);
    let _ = writeln!(o, "  net.ipv4.tcp_wmem              {:?}", l.tcp_wmem);
    let _ = writeln!(
        o,
        "  net.ipv4.tcp_moderate_rcvbuf   {}",
        l.moderate_rcvbuf as u8
    );
    let _ = writeln!(
        o,
        "  net.ipv4.tcp_congestion_control {}",
        l.congestion_control
    );
    let _ = writeln!(o, "  net.core.default_qdisc         {}", l.default_qdisc);
    let _ = writeln!(
        o,
        "window per stream: up to {} autotuned, {} with explicit buffers; sprat uses {}",
        human_bytes(d.autotuned_window_bytes),
        human_bytes(d.explicit_window_bytes),
        d.sprat_buffers
    );
    if !d.measured_rtt_ms.is_empty() {
        let shown: Vec<String> = d
            .measured_rtt_ms
            .iter()
            .map(|r| format!("{r:.2}"))
            .collect();
        let _ = writeln!(
            o,
            "measured round trips to the server (ms): {}",
            shown.join(" ")
        );
    }
    for p in &d.paths {
        let _ = writeln!(
            o,
            "path RTT {:.1} ms at {}: BDP {}",
            p.rtt_ms,
            mb(p.rate_bytes_per_s),
            human_bytes(p.bdp_bytes)
        );
        let _ = writeln!(
            o,
            "  one stream (rsync, scp, tar | nc) reaches at most {}",
            mb(p.single_stream_bytes_per_s)
        );
        let _ = writeln!(
            o,
            "  the BDP needs {} stream(s) of {}; sprat starts with {} (it retires what the path \
             does not need) and adds streams while throughput grows (at most {})",
            p.streams_needed,
            human_bytes(p.window_bytes),
            p.sprat_starts_with,
            tune::MAX_AUTO_STREAMS
        );
    }
    if let Some(n) = &d.nodes {
        let _ = writeln!(
            o,
            "data set {}: {} files, {}; read here in {:.2} s: {}, {:.0} files/s",
            n.data,
            n.files,
            human_bytes(n.bytes),
            n.read_s,
            mb(n.read_bytes_per_s),
            n.read_files_per_s
        );
        let side = match n.write_bytes_per_s {
            Some(w) => format!("reading like this host and writing at {}", mb(w)),
            None => "reading like this host (the writing side not sized: --write-rate)".into(),
        };
        let _ = writeln!(
            o,
            "transfer nodes for {}: {} {side}; the set would take {:.1} s with them, {:.1} s with one",
            mb(n.link_bytes_per_s),
            n.nodes,
            n.predicted_s,
            n.one_node_s
        );
    }
    if d.changes.is_empty() {
        let _ = writeln!(o, "nothing to change for these paths");
    } else {
        let _ = writeln!(
            o,
            "suggested changes (as root: sysctl -w NAME=\"VALUE\", and in /etc/sysctl.d/ to keep them):"
        );
        for c in &d.changes {
            let _ = writeln!(
                o,
                "  {} = \"{}\"   (now \"{}\")",
                c.setting, c.suggested, c.now
            );
            let _ = writeln!(o, "      {}", c.why);
        }
    }
    o
}
