//! Runs kept instead of lists: the last used block of each fork, all-zero pages before it
//! (`interior_zero_pages`) and unreadable blocks (`read_error`), so that memory does not grow
//! with the number of blocks.

use std::io;

/// The highest used (not new) block of each fork a worker scanned, as `(fork, block)` pairs in
/// scan order: one pair per stretch of one fork, no hash table per worker. After
/// [`LastUsed::settle`] they are sorted with one pair per fork.
#[derive(Debug, Default)]
pub(super) struct LastUsed {
    pub(super) entries: Vec<(usize, u64)>,
}

impl LastUsed {
    pub(super) fn note(&mut self, fork: usize, blkno: u64) {
        match self.entries.last_mut() {
            Some(e) if e.0 == fork => e.1 = e.1.max(blkno),
            _ => self.entries.push((fork, blkno)),
        }
    }

    pub(super) fn absorb(&mut self, other: LastUsed) {
        self.entries.extend(other.entries);
    }

    /// Sorts by fork and keeps the highest block of each.
    pub(super) fn settle(&mut self) {
        self.entries.sort_unstable();
        self.entries.dedup_by(|later, kept| {
            let same = later.0 == kept.0;
            if same {
                kept.1 = kept.1.max(later.1);
            }
            same
        });
    }

    /// The highest used block of `fork` (after [`Self::settle`]).
    pub(super) fn get(&self, fork: usize) -> Option<u64> {
        self.entries
            .binary_search_by_key(&fork, |e| e.0)
            .ok()
            .map(|i| self.entries[i].1)
    }
}

/// A run of consecutive absolute blocks `first..=last` of one fork.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct BlockRun {
    pub(super) fork: usize,
    pub(super) first: u64,
    pub(super) last: u64,
}

/// The interior all-zero pages of one fork: how many, and the first few block numbers.
pub(super) struct InteriorZeros {
    pub(super) count: u64,
    pub(super) shown: Vec<u64>,
}

impl InteriorZeros {
    /// Block numbers listed in a finding's detail.
    const SHOWN: usize = 20;

    /// The new pages of `runs` (one fork, sorted) before the last used block `last_used`,
    /// leaving out the blocks of `spare` (a hash index's bucket pages allocated ahead of use).
    pub(super) fn of(
        runs: &[BlockRun],
        last_used: u64,
        spare: Option<std::ops::RangeInclusive<u64>>,
    ) -> InteriorZeros {
        let mut out = InteriorZeros {
            count: 0,
            shown: Vec::new(),
        };
        for r in runs.iter().filter(|r| r.first < last_used) {
            let last = r.last.min(last_used - 1);
            for (first, last) in without(r.first, last, spare.as_ref()) {
                out.count += last - first + 1;
                let room = Self::SHOWN - out.shown.len();
                out.shown.extend((first..=last).take(room));
            }
        }
        out
    }
}

/// The parts of `first..=last` outside `spare`: none, one or two ranges.
pub(super) fn without(
    first: u64,
    last: u64,
    spare: Option<&std::ops::RangeInclusive<u64>>,
) -> Vec<(u64, u64)> {
    let Some(spare) = spare.filter(|s| !s.is_empty()) else {
        return vec![(first, last)];
    };
    let (s0, s1) = (*spare.start(), *spare.end());
    if s1 < first || s0 > last {
        return vec![(first, last)];
    }
    let mut parts = Vec::new();
    if first < s0 {
        parts.push((first, s0 - 1));
    }
    if s1 < last {
        parts.push((s1 + 1, last));
    }
    parts
}

/// A run of unreadable blocks `first..=last` of one file that failed with the same error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ReadErrorRun {
    pub(super) file: usize,
    pub(super) first: u64,
    pub(super) last: u64,
    pub(super) os_error: Option<i32>,
    pub(super) error: String,
}

/// Unreadable blocks, gathered into runs: a failing disk area gives one finding per run,
/// not one per block.
#[derive(Debug, Default)]
pub(super) struct ReadErrorRuns {
    pub(super) runs: Vec<ReadErrorRun>,
}

impl ReadErrorRuns {
    /// Adds one unreadable block; blocks arrive in order within a work unit.
    pub(super) fn push(&mut self, file: usize, blkno: u64, err: &io::Error) {
        let os_error = err.raw_os_error();
        match self.runs.last_mut() {
            Some(r) if r.file == file && r.last + 1 == blkno && r.os_error == os_error => {
                r.last = blkno
            }
            _ => self.runs.push(ReadErrorRun {
                file,
                first: blkno,
                last: blkno,
                os_error,
                error: err.to_string(),
            }),
        }
    }

    pub(super) fn absorb(&mut self, other: ReadErrorRuns) {
        self.runs.extend(other.runs);
    }

    /// The runs sorted by file and block, adjacent runs of different workers joined.
    pub(super) fn into_runs(mut self) -> Vec<ReadErrorRun> {
        self.runs.sort_by_key(|r| (r.file, r.first));
        let mut out: Vec<ReadErrorRun> = Vec::with_capacity(self.runs.len());
        for r in self.runs {
            match out.last_mut() {
                Some(prev)
                    if prev.file == r.file
                        && prev.last + 1 == r.first
                        && prev.os_error == r.os_error =>
                {
                    prev.last = r.last
                }
                _ => out.push(r),
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io;

    fn eio() -> io::Error {
        io::Error::from_raw_os_error(libc::EIO)
    }

    #[test]
    fn unreadable_blocks_become_runs_across_workers() {
        // Two workers each saw half of a failing area of file 0 (blocks 100..=299), one also a
        // lone bad block 400 and an EACCES block right after the area.
        let mut a = ReadErrorRuns::default();
        let mut b = ReadErrorRuns::default();
        for blkno in 100..200 {
            a.push(0, blkno, &eio());
        }
        a.push(0, 400, &eio());
        for blkno in 200..300 {
            b.push(0, blkno, &eio());
        }
        b.push(0, 300, &io::Error::from_raw_os_error(libc::EACCES));
        b.push(1, 301, &eio());
        b.absorb(a);
        let runs = b.into_runs();
        let shape: Vec<(usize, u64, u64, Option<i32>)> = runs
            .iter()
            .map(|r| (r.file, r.first, r.last, r.os_error))
            .collect();
        assert_eq!(
            shape,
            vec![
                (0, 100, 299, Some(libc::EIO)),
                (0, 300, 300, Some(libc::EACCES)),
                (0, 400, 400, Some(libc::EIO)),
                (1, 301, 301, Some(libc::EIO)),
            ]
        );
    }

    #[test]
    fn last_used_blocks_of_all_workers_settle_to_the_highest_per_fork() {
        let mut a = LastUsed::default();
        for (fork, blk) in [(3, 5), (3, 9), (7, 1), (3, 2)] {
            a.note(fork, blk);
        }
        let mut b = LastUsed::default();
        b.note(7, 4);
        b.note(1, 0);
        a.absorb(b);
        a.settle();
        assert_eq!(a.entries, vec![(1, 0), (3, 9), (7, 4)]);
        assert_eq!(a.get(3), Some(9));
        assert_eq!(a.get(2), None);
    }

    #[test]
    fn interior_zero_runs_are_clipped_and_counted_without_a_list() {
        let runs = [
            BlockRun {
                fork: 0,
                first: 2,
                last: 4,
            },
            BlockRun {
                fork: 0,
                first: 10,
                last: 1 << 40,
            },
        ];
        let z = InteriorZeros::of(&runs, 1 << 30, None);
        assert_eq!(z.count, 3 + ((1 << 30) - 10));
        assert_eq!(z.shown.len(), InteriorZeros::SHOWN);
        assert_eq!(&z.shown[..4], &[2, 3, 4, 10]);
        assert_eq!(InteriorZeros::of(&runs, 2, None).count, 0);
    }

    #[test]
    fn spare_hash_bucket_blocks_are_cut_out_of_interior_runs() {
        assert_eq!(without(5, 9, None), vec![(5, 9)]);
        assert_eq!(without(5, 9, Some(&(7..=7))), vec![(5, 6), (8, 9)]);
        assert_eq!(without(5, 9, Some(&(1..=20))), vec![]);
        assert_eq!(without(5, 9, Some(&(9..=12))), vec![(5, 8)]);
        assert_eq!(without(5, 9, Some(&(10..=12))), vec![(5, 9)]);
    }
}
