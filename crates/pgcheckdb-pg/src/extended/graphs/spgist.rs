//! The SP-GiST graph at the extended level: SP-GiST inner tuples' child pages.
//! (Not built yet: no facts are written and nothing is concluded.)

use super::{GraphCheck, GraphInfo, GraphProblem, Sink};

/// Writes the graph facts of one sound SP-GiST page.
pub fn emit(_page: &[u8], _blkno: u32, _sink: &mut Sink<'_>) {}

/// The cross-page check of one SP-GiST index.
pub struct Check {}

impl Check {
    pub fn new(_info: &GraphInfo) -> Check {
        Check {}
    }
}

impl GraphCheck for Check {
    fn record(&mut self, _blkno: u32, _body: &[u8]) {}

    fn damaged(&mut self, _blkno: u32) {}

    fn new_page(&mut self, _blkno: u32) {}

    fn finish(self: Box<Self>) -> Vec<GraphProblem> {
        Vec::new()
    }
}
