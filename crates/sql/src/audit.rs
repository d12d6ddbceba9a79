//! The audit of strata rows, fed one row at a time in key order.
//!
//! Rows sorted by `(path, depth)` come in pre-order: a row's whole subtree
//! follows it before anything beside it. So the audit keeps only the rows
//! on the current path (at most 65 at height 4) with the child rows each
//! one's bottom branches refer to. A row is reached when the row above it
//! on the stack refers to it; a referenced row that never arrives is
//! missing; anything else is unreachable. Memory stays bounded whatever
//! the tree's size.

use crate::hash::Hash;
use crate::key::{Key, MAX_LEVEL};
use crate::layout::LayoutKind;
use crate::lift::{LIFT_BATCH, Lift, lift_tagged};
use crate::node::ComputedNode;
use crate::position::Position;
use crate::strata::{Row, RowKey, Slot, StratumHeight, last_byte_mask};
use ms_smt::audit::{AuditReport, Location, PinAudit, Problem};
use ms_smt::store::Pin;
use ms_smt::{Meter, ProgressOperation, ProgressSink};

/// Receives a namespace's stored rows from a SQL store's scan (for
/// [`AuditStore::audit`](crate::store::AuditStore::audit)): the current
/// tree's, then each pinned tree's.
pub trait RowSink: Send {
    /// The namespace's root record and row height; called once, first.
    fn begin(&mut self, root: ComputedNode, height: StratumHeight);
    /// One stored row. Rows arrive in key order: path bytes, then depth.
    fn row(&mut self, key: RowKey, body: &[u8]);
    /// The rows that follow (again in key order) are the tree `pin` holds:
    /// every row a read at its version sees. Called after the current
    /// tree's rows, once per pin, oldest version first.
    fn pinned(&mut self, pin: &Pin);
}

/// A child row a row refers to.
#[derive(Debug)]
struct Child {
    key: RowKey,
    recorded: ComputedNode,
    /// Its sibling is empty: in a compacted tree it must not be a lone
    /// compacted leaf.
    lone: bool,
    seen: bool,
}

/// How a row on the stack relates to the tree.
#[derive(Debug, PartialEq, Eq)]
enum Standing {
    /// Reached and decoded: its children are known.
    Checked,
    /// Reached but undecodable: its children cannot be checked against it.
    Unknown,
    /// Not reached: everything under it is unreachable too.
    Orphan,
}

#[derive(Debug)]
struct Frame {
    key: RowKey,
    standing: Standing,
    children: Vec<Child>,
}

/// The streaming row audit; feed it through [`RowSink`], then
/// [`finish`](RowAudit::finish).
#[derive(Debug)]
pub struct RowAudit {
    layout: LayoutKind,
    height: StratumHeight,
    /// The walk under way: of the current tree, or of `pin`'s.
    report: AuditReport,
    stack: Vec<Frame>,
    root_seen: bool,
    pin: Option<Pin>,
    /// The current tree's report, once its walk is over.
    current: Option<AuditReport>,
    /// The pinned trees' reports, as their walks end.
    pins: Vec<PinAudit>,
    /// Compacted leaves whose stored hash is still to be checked: they
    /// are lifted in batches, on the lanes.
    pending: Vec<((Location, Hash), Lift)>,
    /// Rows fed so far, reported as [`ProgressOperation::Audit`].
    meter: Meter,
}

impl RowAudit {
    /// An audit of a tree written with `layout`.
    pub fn new(layout: LayoutKind) -> Self {
        RowAudit {
            layout,
            height: StratumHeight::default(),
            report: AuditReport::new(ComputedNode::empty_root()),
            stack: Vec::new(),
            root_seen: false,
            pin: None,
            current: None,
            pins: Vec::new(),
            pending: Vec::new(),
            meter: Meter::off(ProgressOperation::Audit),
        }
    }

    /// This audit, reporting the rows fed to `progress` (the total is
    /// unknown until [`finish`](Self::finish)).
    pub fn with_progress(self, progress: &ProgressSink) -> Self {
        RowAudit {
            meter: progress.meter(ProgressOperation::Audit, None),
            ..self
        }
    }

    /// Lifts the pending compacted leaves together and reports each whose
    /// stored hash differs.
    fn check_lifted(&mut self) {
        // An audit's scan runs at the default lanes.
        let lanes = ms_smt::Tuning::default().hash_lanes();
        for ((at, stored), lift) in lift_tagged(std::mem::take(&mut self.pending), lanes) {
            if lift.hash != stored {
                self.report.found(Problem::LeafHash {
                    at,
                    stored,
                    computed: lift.hash,
                });
            }
        }
    }

    /// The report, once every row was fed.
    pub fn finish(mut self) -> AuditReport {
        self.end_walk();
        std::mem::replace(&mut self.meter, Meter::off(ProgressOperation::Audit)).finish();
        let mut report = self
            .current
            .unwrap_or_else(|| AuditReport::new(ComputedNode::empty_root()));
        report.pinned = self.pins;
        report
    }

    /// Ends the walk under way: reports what never came, and files its
    /// report as the current tree's or its pin's.
    fn end_walk(&mut self) {
        while let Some(frame) = self.stack.pop() {
            self.close(frame);
        }
        self.check_lifted();
        let root = self.report.stored_root;
        if !self.root_seen && root != ComputedNode::empty_root() {
            self.report.found(Problem::Missing {
                at: Location::Row {
                    depth: 0,
                    path: Vec::new(),
                },
                expected: root,
            });
        }
        self.root_seen = false;
        let report = std::mem::replace(&mut self.report, AuditReport::new(root));
        match self.pin.take() {
            Some(pin) => self.pins.push(PinAudit { pin, report }),
            None => self.current = Some(report),
        }
    }

    /// Reports the children a finished row referred to that never came.
    fn close(&mut self, frame: Frame) {
        for child in frame.children.into_iter().filter(|c| !c.seen) {
            self.report.found(Problem::Missing {
                at: child.key.into(),
                expected: child.recorded,
            });
        }
    }

    /// What the row `key` must compute to (and whether its sibling is
    /// empty), or why it is not reached.
    fn place(&mut self, key: &RowKey) -> Result<Option<(ComputedNode, bool)>, ()> {
        let Some(top) = self.stack.last_mut() else {
            let root = self.report.stored_root;
            let is_root = key.depth == 0 && !self.root_seen;
            self.root_seen |= is_root;
            return if is_root && root != ComputedNode::empty_root() {
                Ok(Some((root, false)))
            } else {
                Err(())
            };
        };
        match top.standing {
            Standing::Orphan => Err(()),
            Standing::Unknown => Ok(None),
            Standing::Checked => {
                let child = top
                    .children
                    .iter_mut()
                    .find(|c| c.key == *key && !c.seen)
                    .ok_or(())?;
                child.seen = true;
                Ok(Some((child.recorded, child.lone)))
            }
        }
    }
}

impl RowSink for RowAudit {
    fn begin(&mut self, root: ComputedNode, height: StratumHeight) {
        self.report.stored_root = root;
        self.height = height;
    }

    fn pinned(&mut self, pin: &Pin) {
        self.end_walk();
        self.report = AuditReport::new(pin.root);
        self.pin = Some(pin.clone());
    }

    fn row(&mut self, key: RowKey, body: &[u8]) {
        self.meter.add(1);
        self.report.stored_items = self.report.stored_items.saturating_add(1);
        while let Some(top) = self.stack.last() {
            if is_above(&top.key, &key) {
                break;
            }
            if let Some(frame) = self.stack.pop() {
                self.close(frame);
            }
        }
        let placed = self.place(&key);
        let at = Location::from(key);
        if placed.is_err() {
            self.report.found(Problem::Unreachable { at: at.clone() });
        }
        let mut frame = Frame {
            key,
            standing: if placed.is_ok() {
                Standing::Checked
            } else {
                Standing::Orphan
            },
            children: Vec::new(),
        };
        match Row::decode(key.depth, self.height, body) {
            Err(error) => {
                self.report.found(Problem::Malformed {
                    at,
                    what: error.what(),
                });
                if frame.standing == Standing::Checked {
                    frame.standing = Standing::Unknown;
                }
            }
            Ok(row) => {
                let mut check = RowCheck {
                    row: &row,
                    layout: self.layout,
                    report: &mut self.report,
                    children: &mut frame.children,
                    pending: &mut self.pending,
                };
                let computed = check.slot(1, Position::new(key.depth, &row_path_key(&key)));
                if let (Some(c), Ok(Some((recorded, lone)))) = (computed, &placed) {
                    if c != *recorded {
                        self.report.found(if key.depth == 0 {
                            Problem::RootMismatch {
                                stored: *recorded,
                                computed: c,
                            }
                        } else {
                            Problem::ChildMismatch {
                                at: at.clone(),
                                recorded: *recorded,
                                computed: c,
                            }
                        });
                    }
                    if *lone
                        && self.layout == LayoutKind::Compacted
                        && matches!(row.slots.get(1), Some(Some(Slot::Compacted { .. })))
                    {
                        self.report.found(Problem::NonCanonical {
                            at,
                            what: "a compacted leaf whose sibling is empty (it belongs higher up)",
                        });
                    }
                }
            }
        }
        self.stack.push(frame);
        if self.pending.len() >= LIFT_BATCH {
            self.check_lifted();
        }
    }
}

/// True when `upper` is a proper ancestor row of `lower` (a shallower row
/// whose path is a prefix of `lower`'s).
fn is_above(upper: &RowKey, lower: &RowKey) -> bool {
    if upper.depth >= lower.depth {
        return false;
    }
    let whole = upper.depth / 8;
    let (Some(a), Some(b)) = (upper.path.get(..whole), lower.path.get(..whole)) else {
        return false;
    };
    if a != b {
        return false;
    }
    if upper.depth.is_multiple_of(8) {
        return true;
    }
    let mask = last_byte_mask(upper.depth);
    match (upper.path.get(whole), lower.path.get(whole)) {
        (Some(x), Some(y)) => x & mask == y & mask,
        _ => false,
    }
}

/// A key whose first `depth` bits are the row's path (tree bit order).
fn row_path_key(key: &RowKey) -> Key {
    let mut out = [0u8; 32];
    for (o, b) in out.iter_mut().zip(key.path.iter()) {
        *o = b.reverse_bits();
    }
    Key(out)
}

/// The checks of one decoded row's slots.
struct RowCheck<'a> {
    row: &'a Row,
    layout: LayoutKind,
    report: &'a mut AuditReport,
    children: &'a mut Vec<Child>,
    pending: &'a mut Vec<((Location, Hash), Lift)>,
}

impl RowCheck<'_> {
    fn non_canonical(&mut self, pos: Position, what: &'static str) {
        self.report.found(Problem::NonCanonical {
            at: Location::Position(pos),
            what,
        });
    }

    fn is_compacted(&self, s: usize) -> bool {
        matches!(self.row.slots.get(s), Some(Some(Slot::Compacted { .. })))
    }

    /// What slot `s` (at `pos`) computes to, reporting what is wrong on the
    /// way; `None` when it cannot be computed.
    fn slot(&mut self, s: usize, pos: Position) -> Option<ComputedNode> {
        let level = pos.level();
        let Some(slot) = self.row.slots.get(s).and_then(Option::as_ref) else {
            return Some(ComputedNode::empty(level));
        };
        self.report.nodes = self.report.nodes.saturating_add(1);
        let at = Location::Position(pos);
        match slot {
            Slot::Inner | Slot::Bottom { .. } if level >= MAX_LEVEL => {
                self.non_canonical(pos, "a branch at the leaf level");
                None
            }
            Slot::Inner => {
                let l_slot = s.saturating_mul(2);
                let r_slot = l_slot.saturating_add(1);
                let l = self.slot(l_slot, pos.child(false));
                let r = self.slot(r_slot, pos.child(true));
                let empty = ComputedNode::empty(level.saturating_add(1));
                if self.layout == LayoutKind::Compacted {
                    for (lone, other, side) in [(l_slot, r, true), (r_slot, l, false)] {
                        if other == Some(empty) && self.is_compacted(lone) {
                            self.non_canonical(
                                pos.child(!side),
                                "a compacted leaf whose sibling is empty (it belongs higher up)",
                            );
                        }
                    }
                }
                self.branch(pos, l?, r?)
            }
            Slot::Bottom { left, right } => {
                let empty = ComputedNode::empty(level.saturating_add(1));
                for (side, child, other) in [(false, left, right), (true, right, left)] {
                    if *child != empty {
                        let child_pos = pos.child(side);
                        self.children.push(Child {
                            key: RowKey::on_path(child_pos.level(), child_pos.path()),
                            recorded: *child,
                            lone: *other == empty,
                            seen: false,
                        });
                    }
                }
                self.branch(pos, *left, *right)
            }
            Slot::Compacted { hash, key, leaf } => {
                self.report.leaves = self.report.leaves.saturating_add(1);
                if self.layout == LayoutKind::Full {
                    self.non_canonical(pos, "a compacted leaf in a full tree");
                }
                if leaf.is_empty() {
                    self.non_canonical(pos, "an empty leaf is stored");
                }
                if key.under_path(pos.path(), level) != *key {
                    self.report.found(Problem::MisplacedKey {
                        at: at.clone(),
                        key: *key,
                    });
                }
                let lift = Lift::new(leaf.hash(), leaf.sum(), *key, MAX_LEVEL, level);
                self.pending.push(((at, *hash), lift));
                Some(ComputedNode::new(*hash, leaf.sum()))
            }
            Slot::Leaf { hash, leaf } => {
                self.report.leaves = self.report.leaves.saturating_add(1);
                if self.layout == LayoutKind::Compacted {
                    self.non_canonical(pos, "a plain leaf in a compacted tree");
                }
                if leaf.is_empty() {
                    self.non_canonical(pos, "an empty leaf is stored");
                }
                let computed = leaf.hash();
                if computed != *hash {
                    self.report.found(Problem::LeafHash {
                        at,
                        stored: *hash,
                        computed,
                    });
                }
                Some(ComputedNode::new(*hash, leaf.sum()))
            }
        }
    }

    /// The branch at `pos` over `l` and `r`.
    fn branch(&mut self, pos: Position, l: ComputedNode, r: ComputedNode) -> Option<ComputedNode> {
        let empty = ComputedNode::empty(pos.level().saturating_add(1));
        if l == empty && r == empty {
            self.non_canonical(pos, "a branch with two empty children");
        }
        match crate::strata::branch(l, r) {
            Some((c, _)) => Some(c),
            None => {
                self.report.found(Problem::SumOverflow {
                    at: Location::Position(pos),
                });
                None
            }
        }
    }
}
