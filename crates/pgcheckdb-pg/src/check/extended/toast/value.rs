//! One TOAST value judged against its live pointers: the chunks `0..n-1` present once each,
//! each of the size its place requires, adding up to the pointer's `va_extinfo` size; and
//! chunks that no live row points at. [`ValueChecker`] takes one value's facts at a time, in
//! the order the merge streams them, and keeps what it found as [`ToastProblem`]s.

use serde_json::{json, Value};

use super::emit::{read_value, ChunkFact, ChunkForm, ChunkLife, PointerFact, ValueRecord};
use crate::check::extended::facts::{Family, Reader};

/// Pointers kept per value (more than one live row pointing at a value is already unusual).
const MAX_POINTERS: usize = 8;

/// Where a problem is reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// At a chunk of the TOAST relation: block, line pointer.
    Toast { block: u32, offset: u16 },
    /// At the pointer in the table: block, line pointer, attribute.
    Main {
        block: u32,
        offset: u16,
        attnum: u16,
    },
}

/// One `toast_value_invalid` problem before it is placed.
#[derive(Debug, Clone, PartialEq)]
pub struct ToastProblem {
    pub place: Place,
    pub message: String,
    pub detail: Value,
}

/// What one TOAST relation gave.
#[derive(Debug, Default)]
pub struct ToastOutcome {
    pub problems: Vec<ToastProblem>,
    /// Values with a live pointer.
    pub values_checked: u64,
    /// Chunks (and their values) that no live pointer names.
    pub unreferenced_chunks: u64,
    /// Of those, the certainly dead ones.
    pub unreferenced_dead: u64,
    pub unreferenced_values: u64,
    /// The first TOAST block holding such a chunk.
    pub first_unreferenced_block: Option<u32>,
    /// Values whose chunks were not all checked for presence (a TOAST page was damaged).
    pub presence_unchecked: u64,
}

/// The last chunk seen of the current value that was present (not certainly dead).
#[derive(Debug, Clone, Copy)]
struct Seen {
    seq: u32,
    certain: bool,
    block: u32,
    offset: u16,
}

/// Judges the values of one TOAST relation from its facts in sorted order.
#[derive(Debug)]
pub struct ValueChecker {
    max_chunk: u32,
    /// `database: schema.table`, for messages.
    table: String,
    /// A TOAST page was unusable: chunks may be missing from the facts.
    pub(super) damaged: bool,
    current: Option<u32>,
    pointers: Vec<PointerFact>,
    /// The next `chunk_seq` expected.
    next: u32,
    last: Option<Seen>,
    value_chunks: u64,
    value_dead: u64,
    value_first_block: Option<u32>,
    pub out: ToastOutcome,
}

impl ValueChecker {
    pub fn new(max_chunk: u32, table: &str) -> ValueChecker {
        ValueChecker {
            max_chunk: max_chunk.max(1),
            table: table.to_string(),
            damaged: false,
            current: None,
            pointers: Vec::new(),
            next: 0,
            last: None,
            value_chunks: 0,
            value_dead: 0,
            value_first_block: None,
            out: ToastOutcome::default(),
        }
    }

    /// Takes one record of the relation's unit (records of other checks are ignored).
    pub fn add(&mut self, record: &[u8]) {
        let Some((head, mut r)) = Reader::open(record) else {
            return;
        };
        match head.family {
            Family::ToastDamaged => self.damaged = true,
            Family::ToastValue => {
                if self.current != Some(head.blkno) {
                    self.finish_value();
                    self.current = Some(head.blkno);
                }
                match read_value(head.blkno, &mut r) {
                    Some(ValueRecord::Pointer(p)) => self.pointer(p),
                    Some(ValueRecord::Chunk(c)) => self.chunk(c),
                    None => {}
                }
            }
            _ => {}
        }
    }

    /// Ends the stream.
    pub fn finish(mut self) -> ToastOutcome {
        self.finish_value();
        self.out
    }

    fn pointer(&mut self, p: PointerFact) {
        if let Some(first) = self.pointers.first() {
            if first.extsize != p.extsize {
                let message = format!(
                    "{}: it says {} bytes, another live row's pointer (block {}, offset {}) says {}",
                    pointer_label(&self.table, &p),
                    p.extsize,
                    first.block,
                    first.offset,
                    first.extsize
                );
                let detail = json!({"other_block": first.block, "other_offset": first.offset, "other_va_extsize": first.extsize});
                self.problem_at_main(&p, message, detail);
            }
        }
        if self.pointers.len() < MAX_POINTERS {
            self.pointers.push(p);
        }
    }

    /// The pointer the chunks are judged by.
    fn expected(&self) -> Option<(PointerFact, u32)> {
        let p = *self.pointers.first()?;
        let n = p.extsize.div_ceil(self.max_chunk);
        Some((p, n))
    }

    fn chunk(&mut self, c: ChunkFact) {
        let Some((p, n)) = self.expected() else {
            self.value_chunks += 1;
            self.value_dead += u64::from(c.life == ChunkLife::Dead);
            self.value_first_block.get_or_insert(c.block);
            return;
        };
        if c.life == ChunkLife::Dead {
            return;
        }
        let certain = c.life == ChunkLife::Certain;
        if c.seq >= n {
            if certain {
                let message = format!(
                    "{}: chunk {} is beyond its last chunk {}",
                    value_label(&self.table, &p, n),
                    c.seq as i32,
                    n.saturating_sub(1)
                );
                self.problem_at_chunk(&p, &c, message, json!({}));
            }
            return;
        }
        if c.seq > self.next {
            self.missing(&p, n, self.next, c.seq, Some(&c));
        }
        if let Some(last) = self.last.filter(|l| l.seq == c.seq) {
            if last.certain && certain {
                let message = format!(
                    "{}: two live chunks {}, this one and block {} offset {}",
                    value_label(&self.table, &p, n),
                    c.seq,
                    last.block,
                    last.offset
                );
                let detail = json!({"other_block": last.block, "other_offset": last.offset});
                self.problem_at_chunk(&p, &c, message, detail);
            }
            if last.certain {
                return; // the first live one is the one compared
            }
        }
        if certain {
            self.check_size(&p, n, &c);
        }
        self.next = self.next.max(c.seq + 1);
        self.last = Some(Seen {
            seq: c.seq,
            certain,
            block: c.block,
            offset: c.offset,
        });
    }

    fn check_size(&mut self, p: &PointerFact, n: u32, c: &ChunkFact) {
        let expected = if c.seq + 1 == n {
            p.extsize - (n - 1) * self.max_chunk
        } else {
            self.max_chunk
        };
        let problem = match c.form {
            ChunkForm::Compressed => Some("its chunk_data has a compressed varlena header".into()),
            ChunkForm::External => Some("its chunk_data is an external TOAST pointer".into()),
            ChunkForm::Plain if c.size != expected => {
                Some(format!("it holds {} bytes, expected {expected}", c.size))
            }
            ChunkForm::Plain => None,
        };
        if let Some(why) = problem {
            let message = format!("{}: chunk {}: {why}", value_label(&self.table, p, n), c.seq);
            let detail = json!({"chunk_size": c.size, "expected_size": expected});
            self.problem_at_chunk(p, c, message, detail);
        }
    }

    /// Chunks `from..to` are missing; `after` is the first present chunk past the gap.
    fn missing(&mut self, p: &PointerFact, n: u32, from: u32, to: u32, after: Option<&ChunkFact>) {
        if self.damaged {
            self.out.presence_unchecked += 1;
            return;
        }
        let which = if to - from == 1 {
            format!("chunk {from} is missing")
        } else {
            format!("chunks {from}..{} are missing", to - 1)
        };
        let message = format!("{}: {which}", value_label(&self.table, p, n));
        let detail = json!({"missing_from": from, "missing_to": to - 1});
        // Where the sequence breaks: after the last chunk present, else before the next one,
        // else (no chunk at all) at the pointer.
        let place = match (self.last, after) {
            (Some(l), _) => Some((l.block, l.offset)),
            (None, Some(c)) => Some((c.block, c.offset)),
            (None, None) => None,
        };
        match place {
            Some((block, offset)) => self.push(p, Place::Toast { block, offset }, message, detail),
            None => self.problem_at_main(p, message, detail),
        }
    }

    fn finish_value(&mut self) {
        if let Some((p, n)) = self.expected() {
            self.out.values_checked += 1;
            if self.next < n {
                self.missing(&p, n, self.next, n, None);
            }
        } else if self.value_chunks > 0 {
            self.out.unreferenced_values += 1;
            self.out.unreferenced_chunks += self.value_chunks;
            self.out.unreferenced_dead += self.value_dead;
            let first = self.out.first_unreferenced_block.get_or_insert(u32::MAX);
            *first = (*first).min(self.value_first_block.unwrap_or(u32::MAX));
        }
        self.pointers.clear();
        self.next = 0;
        self.last = None;
        self.value_chunks = 0;
        self.value_dead = 0;
        self.value_first_block = None;
    }

    fn problem_at_chunk(&mut self, p: &PointerFact, c: &ChunkFact, message: String, detail: Value) {
        let mut detail = detail;
        detail["chunk_seq"] = json!(c.seq as i32);
        let place = Place::Toast {
            block: c.block,
            offset: c.offset,
        };
        self.push(p, place, message, detail);
    }

    fn problem_at_main(&mut self, p: &PointerFact, message: String, detail: Value) {
        let place = Place::Main {
            block: p.block,
            offset: p.offset,
            attnum: p.attnum,
        };
        self.push(p, place, message, detail);
    }

    fn push(&mut self, p: &PointerFact, place: Place, message: String, mut detail: Value) {
        detail["va_valueid"] = json!(p.valueid);
        detail["va_extsize"] = json!(p.extsize);
        detail["va_rawsize"] = json!(p.rawsize);
        detail["main_block"] = json!(p.block);
        detail["main_offset"] = json!(p.offset);
        detail["main_attnum"] = json!(p.attnum);
        self.out.problems.push(ToastProblem {
            place,
            message,
            detail,
        });
    }
}

/// `TOAST value V of T, row at block B, offset O, attribute A`.
fn pointer_label(table: &str, p: &PointerFact) -> String {
    format!(
        "TOAST value {} of {table}, row at block {}, offset {}, attribute {}",
        p.valueid, p.block, p.offset, p.attnum
    )
}

/// [`pointer_label`] with the value's size in chunks.
fn value_label(table: &str, p: &PointerFact, n: u32) -> String {
    format!(
        "{} ({} bytes in {n} chunks)",
        pointer_label(table, p),
        p.extsize
    )
}

#[cfg(test)]
#[path = "value_tests.rs"]
mod tests;
