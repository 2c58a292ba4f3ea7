//! The case stream of a campaign: case number `i` of a seed, always the same case.
//!
//! [`generated_case`] turns `(seed, index)` into fuzzer-style bytes from a ChaCha stream and
//! decodes them like a libFuzzer input; [`campaign_case`] adds the scheduled cases past 2³¹
//! elements; [`CaseStream`] binds either to one kernel, one shard and one side of the contract,
//! which is what `fuzz`, the gate's fuzz and sanitizer steps, `sweep` and `bench` draw from.

use rand_chacha::rand_core::{RngCore, SeedableRng};

use super::steer::{features, steers, Triggers, MAX_DRAWS};
use crate::core::case::Case;
use crate::core::generate::{decode_case, past_int32_variant, DecodeContext, PastInt32, PAST_INT32_ONE_IN};
use crate::core::manifest::Manifest;
use crate::core::shard::Shard;

/// The case a fuzz campaign draws as number `index`: fuzzer-style bytes from a ChaCha stream,
/// decoded like libFuzzer inputs, so a `(seed, index)` pair always gives the same case.
pub fn generated_case(ctx: &DecodeContext, seed: u64, index: u64) -> Case {
    redrawn_case(ctx, seed, index, 0)
}

/// Draw `draw` of case `index`: draw 0 is [`generated_case`], later draws decode the next bytes
/// of the same stream (a steered case's alternatives, the `steer` module).
pub fn redrawn_case(ctx: &DecodeContext, seed: u64, index: u64, draw: u32) -> Case {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(index);
    // 128 bytes are 32 words of the stream.
    rng.set_word_pos(u128::from(draw) * 32);
    let mut bytes = [0u8; 128];
    rng.fill_bytes(&mut bytes);
    decode_case(&mut arbitrary::Unstructured::new(&bytes), ctx).expect("decoding never fails")
}

/// Campaign case `index % PAST_INT32_EVERY == PAST_INT32_AT` has one tensor pushed past 2³¹
/// elements ([`crate::core::generate::offsets_past_int32`]) where the kernel's contract allows it,
/// each eligible tensor in turn, with a stride of 2³¹ or more ([`PastInt32::WideStride`]); case
/// `index % PAST_INT32_EVERY == PAST_INT32_NARROW_AT` likewise with a stride that fits 32 bits
/// ([`PastInt32::NarrowStride`]). Before those, the first [`PAST_INT32_FIRST_BLOCK`] cases push
/// every eligible tensor once ([`past_int32_slot`]).
pub const PAST_INT32_AT: u64 = 64;
/// See [`PAST_INT32_AT`].
pub const PAST_INT32_NARROW_AT: u64 = 320;
/// How often [`campaign_case`] schedules a case past 2³¹ elements of each form after the first
/// block: as often as the decoder draws one by chance.
pub const PAST_INT32_EVERY: u64 = PAST_INT32_ONE_IN as u64;
/// Every tensor that can be pushed past 2³¹ elements is pushed within this many cases of a
/// campaign (up to 192 such tensors, one case each from #[`PAST_INT32_AT`]): a kernel that
/// indexes only its fifth tensor in 32 bits must not wait thousands of cases for its turn.
pub const PAST_INT32_FIRST_BLOCK: u64 = 256;
/// Cases between two pushed cases of the first block (fewer when the kernel has more than 12
/// eligible tensors): every pushed case allocates 4 to 8 GiB, so they are spread out.
const PAST_INT32_SPACING: u64 = 16;

/// The push campaign case `index` gets, if any, for a kernel with `eligible()` tensors that can
/// be pushed (asked only where the schedule may push, so most cases cost nothing): its form and
/// a turn counter (the caller pushes tensor `turn % count` of that form's eligible list). From case #[`PAST_INT32_AT`] to the end of the first block, one
/// case in 16 (more often past 12 such tensors) pushes the next tensor with a wide stride, then, while slots
/// remain, each with a narrow one; after the block, the periodic schedule of [`PAST_INT32_AT`].
pub fn past_int32_slot(index: u64, eligible: impl FnOnce() -> usize) -> Option<(PastInt32, u64)> {
    if index < PAST_INT32_FIRST_BLOCK {
        let j = index.checked_sub(PAST_INT32_AT)?;
        let n = eligible() as u64;
        if n == 0 {
            return None;
        }
        let room = PAST_INT32_FIRST_BLOCK - PAST_INT32_AT;
        let spacing = PAST_INT32_SPACING.min(room / n).max(1);
        if j % spacing != 0 || j / spacing >= 2 * n {
            return None;
        }
        let slot = j / spacing;
        let form = if slot < n { PastInt32::WideStride } else { PastInt32::NarrowStride };
        return Some((form, slot % n));
    }
    let form = match index % PAST_INT32_EVERY {
        PAST_INT32_AT => PastInt32::WideStride,
        PAST_INT32_NARROW_AT => PastInt32::NarrowStride,
        _ => return None,
    };
    (eligible() > 0).then_some((form, index / PAST_INT32_EVERY))
}

/// The case a fuzz campaign (`cudafuzz fuzz`, the gate's fuzz step) runs as number `index`:
/// [`generated_case`], except that cases past 2³¹ elements are scheduled ([`past_int32_slot`]:
/// every eligible tensor within the first [`PAST_INT32_FIRST_BLOCK`] cases, then two cases in
/// every [`PAST_INT32_EVERY`]) instead of being left to the decoder's 1-in-512 chance: a
/// campaign of a few hundred cases (one minute of a slow kernel) would otherwise miss 32-bit
/// index overflow about half the time.
pub fn campaign_case(ctx: &DecodeContext, seed: u64, index: u64) -> Case {
    campaign_redraw(ctx, seed, index, 0)
}

/// Draw `draw` of [`campaign_case`] `index` (see [`redrawn_case`]).
fn campaign_redraw(ctx: &DecodeContext, seed: u64, index: u64, draw: u32) -> Case {
    let case = redrawn_case(ctx, seed, index, draw);
    let count = |form| ctx.past_int32_tensors(form).len();
    let Some((form, turn)) = past_int32_slot(index, || count(PastInt32::WideStride).max(count(PastInt32::NarrowStride))) else { return case };
    let eligible = ctx.past_int32_tensors(form);
    if eligible.is_empty() || !ctx.allows_int32_overflow() {
        return case;
    }
    let t = &eligible[(turn % eligible.len() as u64) as usize];
    past_int32_variant(&case, &ctx.manifest, t, form).unwrap_or(case)
}

/// The cases of one campaign on one kernel: which seed, which shard, which side of the
/// contract, and whether cases past 2³¹ elements are scheduled ([`campaign_case`]) or left to
/// the decoder ([`generated_case`]).
#[derive(Clone, Debug)]
pub struct CaseStream<'a> {
    manifest: &'a Manifest,
    ctx: DecodeContext,
    seed: u64,
    outside_contract: bool,
    schedule_past_int32: bool,
    shard: Shard,
}

impl<'a> CaseStream<'a> {
    /// The stream of `cudafuzz fuzz`: [`campaign_case`]s inside `manifest`'s contract, or, with
    /// `outside_contract`, decoded from the whole case space and all run.
    pub fn campaign(manifest: &'a Manifest, seed: u64, outside_contract: bool) -> CaseStream<'a> {
        let ctx = if outside_contract { DecodeContext::new(manifest).unconstrained() } else { DecodeContext::new(manifest) };
        CaseStream { manifest, ctx, seed, outside_contract, schedule_past_int32: true, shard: Shard::ALL }
    }

    /// The plain [`generated_case`]s inside the contract (a sanitizer pass: the same cases as a
    /// campaign's, without the scheduled ones past 2³¹ elements, which a sanitizer cannot afford).
    pub fn generated(manifest: &'a Manifest, seed: u64) -> CaseStream<'a> {
        CaseStream { schedule_past_int32: false, ..CaseStream::campaign(manifest, seed, false) }
    }

    /// The same stream, dealt to `shard`: local case `i` is global case [`Shard::global`]`(i)`.
    pub fn sharded(self, shard: Shard) -> CaseStream<'a> {
        CaseStream { shard, ..self }
    }

    /// The kernel the cases are bound to.
    pub fn manifest(&self) -> &'a Manifest {
        self.manifest
    }

    /// The global case number of local case `local`.
    pub fn global(&self, local: u64) -> u64 {
        self.shard.global(local)
    }

    /// Local case `local`, bound to the kernel; `None` when it lies outside the contract and the
    /// stream keeps inside it.
    pub fn case(&self, local: u64) -> Option<Case> {
        let case = self.drawn(local);
        (self.outside_contract || crate::core::plan::admits(self.manifest, &case)).then_some(case)
    }

    /// Local case `local` as drawn and bound, whichever side of the contract it lies on.
    pub fn drawn(&self, local: u64) -> Case {
        self.redrawn(local, 0)
    }

    /// Draw `draw` of local case `local`, bound ([`redrawn_case`]).
    fn redrawn(&self, local: u64, draw: u32) -> Case {
        let global = self.global(local);
        let case =
            if self.schedule_past_int32 { campaign_redraw(&self.ctx, self.seed, global, draw) } else { redrawn_case(&self.ctx, self.seed, global, draw) };
        self.manifest.bind(case)
    }

    /// Local case `local` steered away from `triggers` (the `steer` module): the first draw that
    /// shows none of the triggers this case is steered around (else the one that shows the
    /// fewest, earliest first). Returns the case as [`CaseStream::case`] does, and
    /// whether a later draw replaced the first.
    pub fn steered(&self, local: u64, triggers: &Triggers) -> (Option<Case>, bool) {
        let steer = steers(self.seed, self.global(local));
        if triggers.is_empty() || !steer.any() {
            return (self.case(local), false);
        }
        let mut best: Option<(usize, u32, Case)> = None;
        for draw in 0..MAX_DRAWS {
            let case = self.redrawn(local, draw);
            let hits = triggers.hits(&features(self.manifest, &case), steer);
            if best.as_ref().is_none_or(|(fewest, ..)| hits < *fewest) {
                best = Some((hits, draw, case));
            }
            if hits == 0 {
                break;
            }
        }
        let (_, draw, case) = best.expect("MAX_DRAWS is at least 1");
        let inside = self.outside_contract || crate::core::plan::admits(self.manifest, &case);
        (inside.then_some(case), draw > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tensors the first block pushes with a wide stride, in case order.
    fn wide_turns(n: usize) -> Vec<u64> {
        (0..PAST_INT32_FIRST_BLOCK).filter_map(|i| past_int32_slot(i, || n)).filter(|(f, _)| *f == PastInt32::WideStride).map(|(_, t)| t).collect()
    }

    #[test]
    fn every_eligible_tensor_is_pushed_in_the_first_block_however_many() {
        assert_eq!(past_int32_slot(PAST_INT32_AT, || 0), None);
        assert_eq!(past_int32_slot(PAST_INT32_AT, || 1), Some((PastInt32::WideStride, 0)));
        for n in [1, 2, 4, 5, 12, 13, 40, 192] {
            let turns = wide_turns(n);
            assert_eq!(turns, (0..n as u64).collect::<Vec<_>>(), "{n} tensors");
        }
        // Four tensors: wide at 64, 80, 96, 112, narrow at 128 .. 176, nothing else before 256.
        let pushed: Vec<u64> = (0..PAST_INT32_FIRST_BLOCK).filter(|&i| past_int32_slot(i, || 4).is_some()).collect();
        assert_eq!(pushed, [64, 80, 96, 112, 128, 144, 160, 176]);
        assert_eq!(past_int32_slot(160, || 4), Some((PastInt32::NarrowStride, 2)));
        // After the block, the periodic schedule.
        assert_eq!(past_int32_slot(PAST_INT32_NARROW_AT, || 4), Some((PastInt32::NarrowStride, 0)));
        assert_eq!(past_int32_slot(PAST_INT32_AT + PAST_INT32_EVERY, || 4), Some((PastInt32::WideStride, 1)));
        assert_eq!(past_int32_slot(PAST_INT32_AT + PAST_INT32_EVERY + 1, || 4), None);
    }
}
