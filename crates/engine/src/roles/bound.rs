//! The most memory a server holds, whatever its clients send: the bound that
//! `sprat serve`'s limits add up to, per connection, per session and for the whole server
//! (docs/architecture.md, "What a client can make a server hold", says the same in words).
//!
//! What a client sends is either charged to the server's budget for clients' data
//! (`crate::budget`: received batches from their frame header until they are written, a
//! pulling client's index of its destination, the directories a push remembers until its
//! commit; `--max-client-memory`, one client address at most half), or bounded per connection
//! or per session by a protocol or server limit below. Sessions are at most as many as
//! connections (each has its control connection), connections at most `--max-connections`.
//!
//! Not counted: what the kernel holds (socket buffers), and the listings of the export's
//! directories a pull's scanner holds (up to 64 directories' entries: they depend on the
//! exported tree, which the operator chose, not on what clients send).

use super::server::ServerConfig;
use crate::config::TransferOptions;
use sprat_proto::batch::MAX_ENTRIES;
use sprat_proto::frame::MAX_CONTROL_PAYLOAD;
use sprat_proto::message::{MAX_ACK_FAILURES, MAX_MESSAGE_TEXT};
use sprat_proto::namespace::MAX_ENTRIES_PER_FRAME;
use sprat_proto::path::MAX_PATH;

/// What a server running with some configuration holds at most, in bytes, by part.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryBound {
    /// The process before any client: code, libraries, the allocator's arenas, the main
    /// thread; and the spare batch buffers it keeps between batches (`crate::spare`).
    pub base: u64,
    /// The budget for clients' data (see `crate::budget`), and the eighth more a batch's
    /// spare buffer may hold beyond the length it is charged (`crate::spare`).
    pub clients: u64,
    /// Each authenticated connection: one control frame being read (at most 1 MiB) and
    /// decoded (at most 65,536 entries of a listing or an index, each about 80 bytes and its
    /// path's allocation), the acknowledgements queued for it (`ACKS_QUEUED` batch outcomes,
    /// each listing at most 128 failures of a path and a text of at most 4 KiB each), and its
    /// threads' stacks.
    pub per_connection: u64,
    /// Each push session: each of its `write_threads` writers decoding one batch (at most
    /// 65,536 entries of 96 bytes; the payload itself is the budget's) and the outcome it
    /// builds.
    pub per_push_session: u64,
    /// Each pull session: its source pipeline, whose sizes the server chooses (its readers'
    /// batches, the batches ready for the streams, the plans queued for the readers).
    pub per_pull_session: u64,
    /// How many connections (and so sessions) at most.
    pub connections: u64,
}

/// Bytes of the process before any client (measured: about 12 MiB resident for a debug
/// build on Linux x86-64; twice that for margin).
const BASE: u64 = 32 << 20;
/// Bytes of one thread's stack that a connection's thread may touch (the stacks are 2 MiB of
/// address space each, of which little is ever resident).
const STACK: u64 = 256 << 10;
/// Bytes of one decoded listing or index entry beyond its path: the entry itself (80 bytes)
/// and its path's allocation.
const DECODED_ENTRY: u64 = 128;
/// Bytes of one listed failure beyond its path and text: the tuple, two allocations.
const FAILURE_OVERHEAD: u64 = 96;
/// Bytes of one decoded batch entry (`sprat_proto::Entry`, 96 bytes), with the vector's
/// slack.
const BATCH_ENTRY: u64 = 128;
/// Bytes of a batch's entry headers a reader holds beyond its data (generous: a batch of
/// `batch_files` entries of long paths).
const BATCH_HEADER_ALLOWANCE: u64 = 1 << 20;
/// Bytes of one planned entry waiting for a reader (its scan entry: path, attributes).
const PLANNED_ENTRY: u64 = 512;

impl MemoryBound {
    /// The bound for a server with `config`.
    pub fn of(config: &ServerConfig) -> MemoryBound {
        MemoryBound::with(
            &config.options,
            config.max_connections,
            config.max_client_memory,
        )
    }

    /// The bound for a server with transfer `options` (its writers' and its pulls' sizes),
    /// `max_connections` and `max_client_memory`.
    pub fn with(
        options: &TransferOptions,
        max_connections: usize,
        max_client_memory: u64,
    ) -> MemoryBound {
        let failure = MAX_PATH as u64 + MAX_MESSAGE_TEXT as u64 + FAILURE_OVERHEAD;
        let outcome = MAX_ACK_FAILURES as u64 * failure + 256;
        let control = MAX_CONTROL_PAYLOAD as u64 * 2 + MAX_ENTRIES_PER_FRAME as u64 * DECODED_ENTRY;
        // The reader, the acknowledger, and on a control connection the watchdog.
        // A spare buffer's fixed slack (`crate::spare`): on the batch a connection reads, and
        // on each batch its session's writers hold (queued two per writer, one being written).
        let slack = crate::spare::SLACK as u64;
        let per_connection =
            control + (super::server::ACKS_QUEUED as u64 + 2) * outcome + 3 * STACK + slack;
        let writers = options.write_threads.max(1) as u64;
        let per_push_session =
            writers * (MAX_ENTRIES as u64 * BATCH_ENTRY + outcome + STACK + 3 * slack);
        MemoryBound {
            base: BASE + crate::spare::IDLE_BYTES as u64,
            clients: max_client_memory + max_client_memory / 8,
            per_connection,
            per_push_session,
            per_pull_session: pull_session(options),
            connections: max_connections.max(1) as u64,
        }
    }

    /// The bound for a load of `connections` connections, `push` push sessions and `pull`
    /// pull sessions (one each of these sessions' connections among `connections`).
    pub fn for_load(&self, connections: u64, push: u64, pull: u64) -> u64 {
        self.base
            + self.clients
            + connections * self.per_connection
            + push * self.per_push_session
            + pull * self.per_pull_session
    }

    /// The bound of the whole server: every connection taken, each by a session of the
    /// costlier kind.
    pub fn whole_server(&self) -> u64 {
        let session = self.per_push_session.max(self.per_pull_session);
        self.base + self.clients + self.connections * (self.per_connection + session)
    }
}

/// What a pull session's source pipeline holds at most with the server's `options`.
fn pull_session(options: &TransferOptions) -> u64 {
    let largest = options.batch_size.max(options.chunk_size) + BATCH_HEADER_ALLOWANCE;
    let readers = options.read_threads.max(1) as u64;
    let batches = readers + options.ready_batches() as u64;
    let plans = 2 * readers * options.batch_files as u64 * PLANNED_ENTRY;
    batches * largest + plans + (readers + options.scan_threads as u64 + 2) * STACK
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_server_is_bounded_by_a_few_gibibytes() {
        let options = TransferOptions::default();
        let bound = MemoryBound::with(&options, 64, super::super::server::DEFAULT_CLIENT_MEMORY);
        eprintln!("{bound:?}, whole server {} MiB", bound.whole_server() >> 20);
        let mib = |b: u64| b >> 20;
        assert!(mib(bound.per_connection) < 32, "{bound:?}");
        assert!(mib(bound.per_push_session) < 64, "{bound:?}");
        assert!(mib(bound.per_pull_session) < 128, "{bound:?}");
        assert!(mib(bound.whole_server()) < 12 << 10, "{bound:?}");
        assert_eq!(bound.for_load(0, 0, 0), bound.base + bound.clients);
    }
}
