//! The analyzer's bounds: how much state a connection, a finding and a ladder keep. Memory is
//! proportional to the connections open at once because of these (see `tests/memory.rs`).

/// Entries of a direction's unacknowledged list (each 24 bytes). The first
/// [`EXACT_UNACKED`] are single segments; beyond, a segment that continues the newest entry
/// within [`COALESCE_NS`] of its first transmission is merged into it, and past this many
/// entries the oldest is dropped (its retransmission is then timed from the newest data).
pub const MAX_UNACKED: usize = 256;
/// Unacknowledged segments listed one by one before contiguous ones are merged: every
/// retransmission of a connection with up to this many segments in flight is timed from its
/// own original.
pub const EXACT_UNACKED: usize = 64;
/// How close in time merged segments were sent: the most a retransmission's time lost can be
/// overstated by when its original was merged into an earlier one (RTOs are ≥ 200 ms).
pub const COALESCE_NS: u64 = 1_000_000;

/// Transactions kept in full for the connection drawn with `--conn` (its first ones).
pub const MAX_TX_KEPT: usize = 256;
/// Transactions kept for every other connection: the ones that lost the most time (a
/// connection that never closes keeps no more however many it makes; `tx_count` counts all).
pub const MAX_TX_WORST: usize = 16;

/// Ladder rows kept for `--conn`.
pub const MAX_LADDER_ROWS: usize = 100_000;

/// How many examples each finding keeps unless asked otherwise.
pub const DEFAULT_EXAMPLES: usize = 5;
