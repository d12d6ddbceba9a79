//! The coalescing writers: many small submissions from many tasks become
//! one read phase, one descent per tree and one durable commit per group.
//!
//! A single task owns the write side of a store's trees. Submissions queue
//! on a bounded channel; the task takes the first one, then everything
//! else already queued (up to [`WriterConfig::max_group_leaves`]), and
//! writes the group, whatever trees its submissions name
//! ([`ForestWriter`]), parents included; a [`Writer`] is the one-tree case
//! of the same task. While a group commits, the next one gathers, so the
//! group size follows the load: one leaf when nobody else is waiting (no
//! added wait by default, and the commit runs on the writer's own task),
//! hundreds when hundreds of tasks submit at once (then a group planned
//! during a commit takes about half of what waits, so planning and
//! committing stay even).
//!
//! * `config`: how groups form, and what the writer counts;
//! * `handle`: the public handles and their tickets;
//! * `submission`: a queued submission, its receipts and errors;
//! * `task`: the task's loop (gather, seal, pipeline);
//! * `group`: planning, committing and re-writing a group;
//! * `answer`: answering a group's submissions.

mod answer;
mod config;
mod group;
mod handle;
mod submission;
mod task;

pub use config::{
    DEFAULT_MAX_GROUP_LEAVES, DEFAULT_QUEUE_BOUND, DEFAULT_RECOVERY_WAIT, WriterConfig, WriterStats,
};
pub use handle::{ForestTicket, ForestWriter, Ticket, Writer};
pub use submission::{ForestReceipt, Receipt, SubmitError, TreeRoot};
