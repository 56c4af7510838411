//! The merge side of the TOAST check: one TOAST relation's facts arrive in order (damaged
//! marks, then per value id its live pointers and its chunks by `chunk_seq`), and
//! [`ValueChecker`] judges one value at a time. Relations are checked in parallel.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};

use super::emit::{read_value, ChunkFact, ChunkForm, ChunkLife, PointerFact, ValueRecord};
use super::ToastInfo;
use crate::extended::facts::{Family, Reader};
use crate::extended::report::block_finding;
use crate::extended::spill::Runs;
use crate::finding::{Finding, FindingKind as K, Severity};
use crate::verify::Plan;

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
    damaged: bool,
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

/// The forks with blocks the scan could not read whole (`read_error`, `partial_block`): their
/// pages gave no facts, so chunks on them would look missing.
pub fn unread_forks(plan: &Plan, findings: &[Finding]) -> HashSet<usize> {
    let files: HashSet<&str> = findings
        .iter()
        .filter(|f| matches!(f.kind, K::ReadError | K::PartialBlock))
        .map(|f| f.file.as_str())
        .collect();
    plan.dir
        .files
        .iter()
        .enumerate()
        .filter(|(_, f)| files.contains(f.rel_path().as_str()))
        .filter_map(|(i, _)| plan.fork_of_file.get(i).copied())
        .collect()
}

/// Checks every planned TOAST relation, `jobs` at a time; returns the findings and totals.
/// `unread` are forks whose pages were not all read ([`unread_forks`]).
pub fn check_toasts(
    plan: &Plan,
    toasts: &HashMap<usize, Arc<ToastInfo>>,
    runs: &Runs,
    unread: &HashSet<usize>,
    jobs: usize,
    errors: &Mutex<Vec<String>>,
) -> (Vec<Finding>, ToastTotals) {
    let mut forks: Vec<usize> = toasts.keys().copied().collect();
    forks.sort_unstable();
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<(usize, ToastOutcome)>> = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..jobs.min(forks.len()).max(1) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(&fork) = forks.get(i) else { break };
                let info = &toasts[&fork];
                let mut checker = ValueChecker::new(info.max_chunk, &info.main_name);
                checker.damaged = unread.contains(&fork);
                match runs.for_each_in_unit(fork as u32, |r| checker.add(r)) {
                    Ok(()) => lock(&results).push((fork, checker.finish())),
                    Err(e) => lock(errors).push(format!(
                        "could not read the TOAST facts of {}: {e}",
                        info.main_name
                    )),
                }
            });
        }
    });
    let mut results = results.into_inner().unwrap_or_else(|e| e.into_inner());
    results.sort_by_key(|r| r.0);
    let mut totals = ToastTotals::default();
    let mut findings = Vec::new();
    for (fork, outcome) in results {
        let info = &toasts[&fork];
        totals.relations += 1;
        totals.values += outcome.values_checked;
        totals.unreferenced_chunks += outcome.unreferenced_chunks;
        totals.presence_unchecked += outcome.presence_unchecked;
        findings.extend(place_outcome(plan, info, outcome));
    }
    (findings, totals)
}

/// Counters for the summary.
#[derive(Debug, Default, Clone, Copy)]
pub struct ToastTotals {
    pub relations: u64,
    pub values: u64,
    pub unreferenced_chunks: u64,
    pub presence_unchecked: u64,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The findings of one TOAST relation.
fn place_outcome(plan: &Plan, info: &ToastInfo, outcome: ToastOutcome) -> Vec<Finding> {
    let mut out = Vec::new();
    for p in outcome.problems {
        let (fork, block, offset, attnum) = match p.place {
            Place::Toast { block, offset } => (info.toast_fork, block, offset, None),
            Place::Main {
                block,
                offset,
                attnum,
            } => (info.main_fork, block, offset, Some(attnum)),
        };
        let mut detail = p.detail;
        detail["table"] = json!(info.main_name);
        let message = format!("{} of {}", p.message, info.main_name);
        let mut f = block_finding(
            plan,
            fork,
            block as u64,
            K::ToastValueInvalid,
            message,
            detail,
        );
        f.offset = Some(offset);
        f.attnum = attnum;
        out.push(f);
    }
    if outcome.unreferenced_chunks > 0 {
        let block = outcome.first_unreferenced_block.unwrap_or(0);
        let message = format!(
            "{} chunks ({} of them deleted) of {} TOAST values that no live row of {} points at (deleted values keep their chunks until VACUUM); the first at this block",
            outcome.unreferenced_chunks, outcome.unreferenced_dead, outcome.unreferenced_values, info.main_name
        );
        let detail = json!({
            "chunks": outcome.unreferenced_chunks,
            "deleted_chunks": outcome.unreferenced_dead,
            "values": outcome.unreferenced_values,
            "table": info.main_name,
        });
        let mut f = block_finding(
            plan,
            info.toast_fork,
            block as u64,
            K::ToastChunksUnreferenced,
            message,
            detail,
        );
        f.severity = Severity::Info;
        out.push(f);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::extended::facts::Writer;

    const MAX: u32 = 1996;

    fn pointer(valueid: u32, extsize: u32) -> Vec<u8> {
        let mut b = Vec::new();
        PointerFact {
            valueid,
            extsize,
            rawsize: extsize + 4,
            block: 5,
            offset: 2,
            attnum: 2,
        }
        .write(&mut b, 1);
        b
    }

    fn chunk(
        valueid: u32,
        seq: u32,
        size: u32,
        life: ChunkLife,
        block: u32,
        offset: u16,
    ) -> Vec<u8> {
        let mut b = Vec::new();
        ChunkFact {
            valueid,
            seq,
            life,
            form: ChunkForm::Plain,
            size,
            block,
            offset,
        }
        .write(&mut b, 1);
        b
    }

    /// Runs records through a checker in byte order, as the merge yields them.
    fn check(mut records: Vec<Vec<u8>>) -> ToastOutcome {
        records.sort();
        let mut c = ValueChecker::new(MAX, "db: public.t");
        for r in &records {
            c.add(r);
        }
        c.finish()
    }

    fn places(o: &ToastOutcome) -> Vec<Place> {
        o.problems.iter().map(|p| p.place).collect()
    }

    use ChunkLife::{Certain, Possible};

    #[test]
    fn a_whole_value_is_clean_and_gaps_are_found_where_the_sequence_breaks() {
        // 5000 bytes: 1996 + 1996 + 1008.
        let whole = vec![
            pointer(10, 5000),
            chunk(10, 0, MAX, Certain, 0, 1),
            chunk(10, 1, MAX, Certain, 0, 2),
            chunk(10, 2, 1008, Possible, 0, 3),
        ];
        let o = check(whole.clone());
        assert!(o.problems.is_empty(), "{:?}", o.problems);
        assert_eq!(o.values_checked, 1);
        // Chunk 1 gone: reported after chunk 0.
        let mut gap = whole.clone();
        gap.remove(2);
        let o = check(gap);
        assert_eq!(
            places(&o),
            vec![Place::Toast {
                block: 0,
                offset: 1
            }]
        );
        assert!(
            o.problems[0].message.contains("chunk 1 is missing"),
            "{}",
            o.problems[0].message
        );
        // Chunk 0 gone: at the next chunk. No chunk at all: at the pointer.
        let o = check(vec![whole[0].clone(), whole[2].clone(), whole[3].clone()]);
        assert_eq!(
            places(&o),
            vec![Place::Toast {
                block: 0,
                offset: 2
            }]
        );
        let o = check(vec![pointer(10, 5000)]);
        assert_eq!(
            places(&o),
            vec![Place::Main {
                block: 5,
                offset: 2,
                attnum: 2
            }]
        );
        // A damaged TOAST page: presence is not judged.
        let mut damaged = vec![pointer(10, 5000)];
        let mut mark = Vec::new();
        Writer::start(&mut mark, 1, Family::ToastDamaged, 3);
        damaged.push(mark);
        let o = check(damaged);
        assert!(o.problems.is_empty());
        assert_eq!(o.presence_unchecked, 1);
    }

    #[test]
    fn duplicates_sizes_and_extra_chunks_are_found_at_the_chunk() {
        let base = vec![
            pointer(10, 5000),
            chunk(10, 0, MAX, Certain, 0, 1),
            chunk(10, 1, MAX, Certain, 0, 2),
            chunk(10, 2, 1008, Certain, 1, 1),
        ];
        let mut dup = base.clone();
        dup.push(chunk(10, 1, MAX, Certain, 0, 3));
        let o = check(dup);
        assert_eq!(
            places(&o),
            vec![Place::Toast {
                block: 0,
                offset: 3
            }]
        );
        // A possibly live duplicate is not blamed.
        let mut dup = base.clone();
        dup.push(chunk(10, 1, MAX, Possible, 0, 3));
        assert!(check(dup).problems.is_empty());
        let mut short = base.clone();
        short[3] = chunk(10, 2, 1000, Certain, 1, 1);
        let o = check(short);
        assert_eq!(
            places(&o),
            vec![Place::Toast {
                block: 1,
                offset: 1
            }]
        );
        assert!(o.problems[0]
            .message
            .contains("holds 1000 bytes, expected 1008"));
        let mut extra = base.clone();
        extra.push(chunk(10, 3, 10, Certain, 1, 2));
        let o = check(extra);
        assert_eq!(
            places(&o),
            vec![Place::Toast {
                block: 1,
                offset: 2
            }]
        );
    }

    #[test]
    fn chunks_without_a_live_pointer_are_only_counted() {
        let o = check(vec![
            chunk(7, 0, MAX, Certain, 4, 1),
            chunk(7, 1, 20, ChunkLife::Dead, 4, 2),
            pointer(10, 20),
            chunk(10, 0, 20, Certain, 2, 1),
            chunk(12, 0, 20, Certain, 3, 1),
        ]);
        assert!(o.problems.is_empty(), "{:?}", o.problems);
        assert_eq!((o.unreferenced_chunks, o.unreferenced_values), (3, 2));
        assert_eq!(o.unreferenced_dead, 1);
        assert_eq!(o.first_unreferenced_block, Some(3));
        assert_eq!(o.values_checked, 1);
    }
}
