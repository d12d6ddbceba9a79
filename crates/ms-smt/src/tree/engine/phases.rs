//! A write's progress: its read phase, its descent and its commit, each
//! reported once, when first passed, however many attempts the write takes.

use crate::progress::{Meter, ProgressOperation, ProgressSink};

/// The progress phases of one write, in order.
const PHASES: [ProgressOperation; 3] = [
    ProgressOperation::InsertRead,
    ProgressOperation::InsertDescent,
    ProgressOperation::InsertCommit,
];

/// The phase a write has just passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Phase {
    /// Its read phase.
    Read = 1,
    /// Its descent (the plan).
    Descent = 2,
    /// Its commit: the write is done.
    Commit = 3,
}

/// A write's progress reporter.
pub(crate) struct WritePhases {
    sink: ProgressSink,
    total: u64,
    /// The phases passed so far.
    passed: usize,
    current: Option<Meter>,
}

impl WritePhases {
    /// Starts the read phase of a write of `leaves` leaves.
    pub fn new(sink: &ProgressSink, leaves: usize) -> Self {
        let total = leaves as u64;
        WritePhases {
            sink: sink.clone(),
            total,
            passed: 0,
            current: Some(sink.meter(PHASES[0], Some(total))),
        }
    }

    /// Marks every phase up to `phase` done and starts the next one.
    pub fn passed(&mut self, phase: Phase) {
        let phases = phase as usize;
        while self.passed < phases.min(PHASES.len()) {
            if let Some(meter) = self.current.take() {
                meter.finish();
            }
            self.passed = self.passed.saturating_add(1);
            self.current = PHASES
                .get(self.passed)
                .map(|op| self.sink.meter(*op, Some(self.total)));
        }
    }
}
