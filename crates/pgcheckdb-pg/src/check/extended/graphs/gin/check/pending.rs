//! The pending list (fast update): from the metapage's head to its tail.

use serde_json::json;

use super::{describe, Check};
use crate::check::extended::graphs::gin::flags::*;
use crate::format::page::INVALID_BLOCK_NUMBER;

impl Check {
    /// The pending list: from the metapage's head through rightlinks, live pending-list pages
    /// up to the tail, whose rightlink ends the list.
    pub(super) fn check_pending_list(&mut self) {
        let Some((head, tail)) = self.meta else {
            return;
        };
        if head == INVALID_BLOCK_NUMBER {
            return;
        }
        let (mut from, mut cur) = (0u32, head);
        for _ in 0..=self.slots.len() {
            let f = match self.target(cur) {
                Err(wrong) => {
                    self.problem(
                        from,
                        format!("pending list leads to {wrong}"),
                        json!({"next": cur}),
                    );
                    return;
                }
                Ok(None) => return,
                Ok(Some(f)) => f,
            };
            if !f.is(GIN_LIST) || f.is(GIN_DELETED) {
                self.problem(
                    from,
                    format!("pending list leads to block {cur}, {}", describe(&f)),
                    json!({"next": cur, "next_flags": f.flags}),
                );
                return;
            }
            if cur == tail {
                if f.rightlink != INVALID_BLOCK_NUMBER {
                    self.problem(
                        cur,
                        format!(
                            "the pending list's tail has rightlink {}, not the list's end",
                            f.rightlink
                        ),
                        json!({"right": f.rightlink}),
                    );
                }
                return;
            }
            if f.rightlink == INVALID_BLOCK_NUMBER {
                self.problem(
                    cur,
                    format!("the pending list ends here, before its tail {tail}"),
                    json!({"tail": tail}),
                );
                return;
            }
            (from, cur) = (cur, f.rightlink);
        }
        self.problem(
            0,
            format!("the pending list from block {head} loops without reaching its tail {tail}"),
            json!({"head": head, "tail": tail}),
        );
    }
}
