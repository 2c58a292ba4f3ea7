//! Decoding fuzzer bytes into a valid [`Case`] with `arbitrary`.
//!
//! Any byte string decodes (inputs that run out fall back to the smallest choices), so libFuzzer
//! can mutate bytes freely and every input still reaches the GPU. Choices are biased toward the
//! values that break kernels: sequence lengths one either side of a tile, head dims that are not
//! multiples of 8, and base offsets that are multiples of 2, 4 or 8 but not 16. Small changes to
//! the bytes make small changes to the case, which keeps libFuzzer's mutations meaningful.
//!
//! A [`DecodeContext`] that carries the kernel's declared [`Contract`] makes decoding
//! contract-aware: every choice is drawn from the contract's part of the case space (its dtypes,
//! head_dim range and multiple, sequence ranges, causal and GQA support, layout kind and minimum
//! alignment), still biased toward that part's edges (the range ends and one step inside them,
//! tile sizes ± 1), so a campaign spends its runs on cases the kernel claims to handle. Without a
//! contract (`--outside-contract`, the context-free `Arbitrary` impl) the whole case space is
//! drawn, exactly as before contracts were known to the decoder. Either way the mapping from bytes
//! to case is deterministic and total.

use std::collections::BTreeMap;

use arbitrary::{Result, Unstructured};

use crate::case::{Case, DataSpec, Dim, Dtype, Layouts, Placement, TensorId, TensorLayout, ValueDist, CASE_VERSION, MAX_DIM, MAX_HEAD_DIM, MAX_OFFSET_BYTES, MAX_PAD};
use crate::plan::{Contract, LayoutSupport};

/// Sequence lengths around common tile sizes (16, 32, 64, 80, 128, 256, 512, 1024) and the
/// shapes FlashAttention's own tests use.
pub const SEQ_BOUNDARY: &[u32] = &[
    1, 2, 3, 15, 16, 17, 31, 32, 33, 63, 64, 65, 79, 80, 81, 113, 127, 128, 129, 203, 255, 256,
    257, 511, 512, 513, 1023, 1024,
];
/// Head dims: multiples of 8 and the odd ones real bugs were found with (46, 59, 111).
pub const HEAD_DIM_BOUNDARY: &[u32] =
    &[1, 2, 8, 16, 32, 40, 46, 59, 63, 64, 65, 72, 80, 96, 111, 127, 128, 160, 192, 256];
/// Offsets that are 16-byte aligned.
pub const OFFSETS_ALIGNED: &[u32] = &[16, 32, 48, 64];
/// Offsets that are multiples of 2, 4 or 8 but not 16: the misaligned-vector-load class.
pub const OFFSETS_MISALIGNED: &[u32] = &[8, 4, 2, 6, 12, 24, 40, 10, 14];
/// Offsets that are not even 2-byte aligned: outside every f16 kernel's contract.
pub const OFFSETS_ODD: &[u32] = &[1, 3, 5, 7, 9];
/// Dimension orders worth trying first: BHSD, BSHD, then ones with d not innermost. The first
/// four keep d innermost (stride_d = 1).
pub const ORDERS: &[[Dim; 4]] = &[
    [Dim::B, Dim::H, Dim::S, Dim::D],
    [Dim::B, Dim::S, Dim::H, Dim::D],
    [Dim::H, Dim::B, Dim::S, Dim::D],
    [Dim::S, Dim::B, Dim::H, Dim::D],
    [Dim::B, Dim::H, Dim::D, Dim::S],
    [Dim::D, Dim::B, Dim::H, Dim::S],
];
/// How many of [`ORDERS`], from the first, keep the head dimension innermost.
const INNER_D_ORDERS: usize = 4;
/// One decoded case in this many (where the contract allows it) has a tensor whose element
/// offsets pass 2³¹ ([`offsets_past_int32`]). Such a case allocates 4–8 GiB on the GPU, but
/// the host holds only its elements and redzones (`arena::held_ranges`), so it costs about
/// what a small case costs; the odds are low because GPUs with less memory cannot run it.
/// `cudafuzz fuzz` also schedules one early in every campaign (`cli::campaign_case`).
pub const PAST_INT32_ONE_IN: u32 = 512;
/// Largest sequence length a decoded case draws outside the boundary table; a contract's
/// larger upper edge is left to `cudafuzz contract` probes (cases that long are slow to judge).
pub const MAX_DECODED_SEQ: u32 = 1024;
/// Largest head dim a decoded case draws outside the boundary table (likewise for contracts).
pub const MAX_DECODED_HEAD_DIM: u32 = 256;

/// What a decoder needs to know about the kernel: its name, the choices its manifest offers and,
/// for contract-aware decoding, its declared contract.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DecodeContext {
    /// Kernel name or manifest path written into the case.
    pub kernel: String,
    /// Tunable parameters and the values each may take.
    pub params: Vec<(String, Vec<i64>)>,
    /// Dtypes the kernel can be compiled for; empty means all.
    pub dtypes: Vec<Dtype>,
    /// The kernel's declared contract. When set, every decoded case lies inside it (for any
    /// satisfiable contract whose alignment fits the case limits); `None` draws from the whole
    /// case space, outside-contract cases included.
    pub contract: Option<Contract>,
}

impl DecodeContext {
    /// The same context without its contract: decoding then explores the whole case space.
    pub fn unconstrained(&self) -> DecodeContext {
        DecodeContext { contract: None, ..self.clone() }
    }

    /// Whether cases with element offsets past 2³¹ may be drawn: always without a contract,
    /// otherwise as [`Contract::allows_int32_overflow`] says.
    pub fn allows_int32_overflow(&self) -> bool {
        self.contract.as_ref().is_none_or(Contract::allows_int32_overflow)
    }
}

/// Decodes a case; never panics, and the result always passes [`Case::validate`]. With a
/// contract in `ctx`, the case also lies inside it.
pub fn decode_case(u: &mut Unstructured<'_>, ctx: &DecodeContext) -> Result<Case> {
    let space = Space::new(ctx);
    let mut params = BTreeMap::new();
    for (name, values) in &ctx.params {
        if !values.is_empty() {
            params.insert(name.clone(), *u.choose(values)?);
        }
    }
    let dtype = *u.choose(&space.dtypes)?;
    let heads_kv = u.int_in_range(1..=4u32)?;
    let group = *u.choose(&[1u32, 2, 4, 3])?;
    let group = if space.gqa { group } else { 1 };
    let batch = u.int_in_range(1..=3u32)?;
    let seq_q = space.seq_q.draw(u)?;
    let seq_k = space.seq_k.draw(u)?;
    let head_dim = space.head_dim.draw(u)?;
    let causal = u.arbitrary::<bool>()? && space.causal;
    let scale = match u.int_in_range(0..=7u8)? {
        6 => 1.0,
        7 => 0.5,
        _ => 1.0 / (head_dim as f32).sqrt(),
    };
    let data = DataSpec {
        seed: u.arbitrary::<u32>()? as u64,
        dist: match u.int_in_range(0..=9u8)? {
            0..=5 => ValueDist::Normal,
            6 => ValueDist::Uniform,
            7 | 8 => ValueDist::LargeLogits,
            _ => ValueDist::ConstantRows,
        },
    };
    let align = space.align(dtype);
    let layouts = Layouts {
        q: space.layout(u, align, dtype)?,
        k: space.layout(u, align, dtype)?,
        v: space.layout(u, align, dtype)?,
        o: space.layout(u, align, dtype)?,
    };
    let placement = if u.int_in_range(0..=3u8)? == 3 { Placement::Exact } else { Placement::Guarded };
    let mut case = Case {
        version: CASE_VERSION,
        kernel: ctx.kernel.clone(),
        params,
        dtype,
        batch,
        heads_q: heads_kv * group,
        heads_kv,
        seq_q,
        seq_k,
        head_dim,
        causal,
        scale,
        data,
        layouts,
        placement,
    };
    if space.constrained && space.layouts != LayoutSupport::Contiguous {
        for t in TensorId::ALL {
            align_pitch(&mut case, t, align);
        }
    }
    // Drawn last, so every draw above decodes as it did before this class existed, and an
    // input that has run out (each later draw at its low end) never asks for it.
    if ctx.allows_int32_overflow() && u.int_in_range(1..=PAST_INT32_ONE_IN)? == PAST_INT32_ONE_IN {
        push_past_int32(u, &mut case)?;
    }
    if case.validate().is_err() {
        shrink_to_valid(&mut case);
    }
    Ok(case)
}

/// Decoding with no kernel context: any dtype, no parameters, an empty kernel name, no contract.
/// Fuzz targets that know their kernel call [`decode_case`] with its [`DecodeContext`] instead,
/// so that the parameters and dtypes drawn are ones the kernel was compiled for.
impl<'a> arbitrary::Arbitrary<'a> for Case {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        decode_case(u, &DecodeContext::default())
    }
}

/// The choices one decode draws from: the whole case space, or a contract's part of it.
struct Space {
    /// Whether a contract shaped the choices.
    constrained: bool,
    /// Dtypes to choose from; never empty.
    dtypes: Vec<Dtype>,
    seq_q: Choices,
    seq_k: Choices,
    head_dim: Choices,
    causal: bool,
    gqa: bool,
    layouts: LayoutSupport,
    /// The contract's minimum alignment in bytes (1 without a contract).
    min_align: u32,
}

impl Space {
    fn new(ctx: &DecodeContext) -> Space {
        let compiled = if ctx.dtypes.is_empty() { Dtype::ALL.to_vec() } else { ctx.dtypes.clone() };
        let Some(c) = &ctx.contract else {
            return Space {
                constrained: false,
                dtypes: compiled,
                seq_q: Choices::table(SEQ_BOUNDARY, MAX_DECODED_SEQ),
                seq_k: Choices::table(SEQ_BOUNDARY, MAX_DECODED_SEQ),
                head_dim: Choices::table(HEAD_DIM_BOUNDARY, MAX_DECODED_HEAD_DIM),
                causal: true,
                gqa: true,
                layouts: LayoutSupport::Strided,
                min_align: 1,
            };
        };
        let tiles = tile_sizes(&ctx.params);
        let mut dtypes: Vec<Dtype> = compiled.iter().copied().filter(|d| c.dtypes.contains(d)).collect();
        if dtypes.is_empty() {
            dtypes = if c.dtypes.is_empty() { compiled } else { c.dtypes.clone() };
        }
        Space {
            constrained: true,
            dtypes,
            seq_q: Choices::within(SEQ_BOUNDARY, c.seq_q, 1, MAX_DECODED_SEQ, MAX_DIM, &tiles),
            seq_k: Choices::within(SEQ_BOUNDARY, c.seq_k, 1, MAX_DECODED_SEQ, MAX_DIM, &tiles),
            head_dim: Choices::within(HEAD_DIM_BOUNDARY, c.head_dim, c.head_dim_multiple, MAX_DECODED_HEAD_DIM, MAX_HEAD_DIM, &[]),
            causal: c.causal,
            gqa: c.gqa,
            layouts: c.layouts,
            min_align: c.min_align.max(1),
        }
    }

    /// The alignment every base and stepped stride must honour: the contract's, and never less
    /// than the element size; 1 (anything) without a contract.
    fn align(&self, dtype: Dtype) -> u32 {
        if self.constrained {
            self.min_align.max(dtype.size())
        } else {
            1
        }
    }

    /// One tensor's layout: half the time dense BHSD, otherwise an order from [`ORDERS`] that
    /// the layout support allows, with padding; the base offset a multiple of `align`.
    fn layout(&self, u: &mut Unstructured<'_>, align: u32, dtype: Dtype) -> Result<TensorLayout> {
        let kind = u.int_in_range(0..=7u8)?;
        let offset_bytes = offset(u, align)?;
        if kind < 4 || self.layouts == LayoutSupport::Contiguous {
            return Ok(TensorLayout { order: ORDERS[0], pad: [0; 4], offset_bytes });
        }
        // A unit stride on a dimension other than d is one element: too little for an
        // alignment above the element size, so such contracts keep d innermost.
        let inner_d = self.layouts == LayoutSupport::InnerContiguous || align > dtype.size();
        let orders = if inner_d { &ORDERS[..INNER_D_ORDERS] } else { ORDERS };
        let order = *u.choose(orders)?;
        let mut pad = [0u32; 4];
        for p in pad.iter_mut().skip(1) {
            *p = *u.choose(&[0u32, 0, 1, 3, 8, 16])?;
        }
        Ok(TensorLayout { order, pad, offset_bytes })
    }
}

/// Values one dimension is drawn from: three times in four a boundary value, otherwise any
/// value in `lo..=hi` that is a multiple of `multiple`.
struct Choices {
    boundary: Vec<u32>,
    lo: u32,
    hi: u32,
    multiple: u32,
}

impl Choices {
    /// The whole space: the boundary table and `1..=max`.
    fn table(boundary: &[u32], max: u32) -> Choices {
        Choices { boundary: boundary.to_vec(), lo: 1, hi: max, multiple: 1 }
    }

    /// A contract's range `[lo, hi]` and multiple, with its upper end capped at `cap` (but
    /// never below the range's first allowed value) and every value at most `valid_max`: the
    /// table's values inside, the range's edges and one step inside them, and each tile size
    /// ± 1. An unsatisfiable range (possible only in a hand-made context) falls back to the
    /// whole space capped at `cap`, which keeps decoding total.
    fn within(table: &[u32], [lo, hi]: [u32; 2], multiple: u32, cap: u32, valid_max: u32, tiles: &[u32]) -> Choices {
        let m = multiple.max(1);
        let first = lo.max(1).div_ceil(m).saturating_mul(m);
        let top = hi.min(valid_max);
        if first > top {
            return Choices::table(table, cap.min(valid_max));
        }
        let last = first + (top.min(cap.max(first)) - first) / m * m;
        let edges = [first, first + m, last.saturating_sub(m), last];
        let near_tiles = tiles.iter().flat_map(|&t| [t.saturating_sub(1), t, t.saturating_add(1)]);
        let mut boundary: Vec<u32> = table
            .iter()
            .copied()
            .chain(edges)
            .chain(near_tiles)
            .filter(|&x| x >= first && x <= last && x % m == 0)
            .collect();
        boundary.sort_unstable();
        boundary.dedup();
        Choices { boundary, lo: first, hi: last, multiple: m }
    }

    fn draw(&self, u: &mut Unstructured<'_>) -> Result<u32> {
        let from_table = u.int_in_range(0..=3u8)? < 3;
        if from_table && !self.boundary.is_empty() {
            Ok(*u.choose(&self.boundary)?)
        } else if self.multiple == 1 {
            u.int_in_range(self.lo..=self.hi)
        } else {
            Ok(self.lo + self.multiple * u.int_in_range(0..=(self.hi - self.lo) / self.multiple)?)
        }
    }
}

/// Tile sizes named by the kernel's params (`BLOCK_M`, `BLOCK_N`, ...): sequence lengths one
/// either side of them are where tail-tile bugs live.
fn tile_sizes(params: &[(String, Vec<i64>)]) -> Vec<u32> {
    params
        .iter()
        .filter(|(name, _)| name.starts_with("BLOCK"))
        .flat_map(|(_, values)| values.iter().filter_map(|&v| u32::try_from(v).ok()))
        .filter(|&v| v > 1)
        .collect()
}

/// Half the time offset 0, then 16-aligned, misaligned-by-2/4/8 and, rarely, odd offsets, so
/// that most cases stay inside a kernel's contract while every residue class still comes up.
/// Only multiples of `align` are drawn; a class with none left draws from the aligned class.
fn offset(u: &mut Unstructured<'_>, align: u32) -> Result<u32> {
    let class = match u.int_in_range(0..=19u8)? {
        0..=9 => return Ok(0),
        10..=13 => OFFSETS_ALIGNED,
        14..=18 => OFFSETS_MISALIGNED,
        _ => OFFSETS_ODD,
    };
    let allowed: Vec<u32> = class.iter().copied().filter(|o| o % align == 0).collect();
    if !allowed.is_empty() {
        return Ok(*u.choose(&allowed)?);
    }
    let aligned: Vec<u32> = OFFSETS_ALIGNED.iter().copied().filter(|o| o % align == 0 && *o <= MAX_OFFSET_BYTES).collect();
    if aligned.is_empty() {
        Ok(0)
    } else {
        Ok(*u.choose(&aligned)?)
    }
}

/// Only a contract whose sequence and head_dim ranges start near the case limits can make a
/// case too large to be valid (a tensor span over [`crate::case::MAX_SPAN_BYTES`]): batch and
/// heads 1 and no padding always fit, since one `seq × head_dim` matrix does.
fn shrink_to_valid(case: &mut Case) {
    case.batch = 1;
    case.heads_q = 1;
    case.heads_kv = 1;
    for t in TensorId::ALL {
        case.layouts.get_mut(t).pad = [0; 4];
    }
}

/// [`offsets_past_int32`] on a tensor the input picks.
fn push_past_int32(u: &mut Unstructured<'_>, case: &mut Case) -> Result<()> {
    offsets_past_int32(case, *u.choose(&TensorId::ALL)?);
    Ok(())
}

/// Makes tensor `t`'s element offsets pass 2³¹ while it keeps its few logical elements: batch
/// becomes 2, the tensor's order starts with b (the other dimensions keep their order and
/// padding, so an aligned row pitch stays aligned), and the next dimension is padded until
/// `stride_b` is the first multiple of that dimension's stride at or past 2³¹. Batch 1 then
/// starts at the first offset a signed 32-bit index wraps on; every stride stays a multiple of
/// the ones it was built from, so a contract's alignment still holds. The tensor spans 4 GiB
/// (f16, bf16) or 8 GiB (f32) plus its last batch.
pub fn offsets_past_int32(case: &mut Case, t: TensorId) {
    case.batch = 2;
    let shape = case.shape(t);
    let layout = case.layouts.get_mut(t);
    let kept: Vec<(Dim, u32)> = layout.order.iter().copied().zip(layout.pad).filter(|&(d, _)| d != Dim::B).collect();
    layout.order = [Dim::B, kept[0].0, kept[1].0, kept[2].0];
    layout.pad = [0, kept[0].1, kept[1].1, kept[2].1];
    let next = layout.order[1];
    let next_stride = crate::plan::strides(&shape, layout)[next.index()];
    let extent = crate::case::INT32_OFFSET_LIMIT.div_ceil(next_stride);
    layout.pad[1] = extent.saturating_sub(shape[next.index()] as u64) as u32;
}

/// A copy of `case` with [`offsets_past_int32`] applied to `t`, if that copy is a valid case
/// (it may not be: a tensor already near the span limit would pass it).
pub fn past_int32_variant(case: &Case, t: TensorId) -> Option<Case> {
    let mut pushed = case.clone();
    offsets_past_int32(&mut pushed, t);
    pushed.validate().is_ok().then_some(pushed)
}

/// Whether some tensor of `case` reaches an element offset of 2³¹ or more.
pub fn reaches_past_int32(case: &Case) -> bool {
    crate::plan::Plan::new(case).tensors.iter().any(crate::plan::TensorPlan::reaches_past_int32)
}

/// Pads the innermost extent of `t` (up to [`MAX_PAD`]) so that its pitch, and with it every
/// outer stride, is a multiple of `align` bytes. A no-op when the element size already is.
fn align_pitch(case: &mut Case, t: TensorId, align: u32) {
    let elem = case.dtype.size();
    if align <= elem || align % elem != 0 {
        return;
    }
    let per = align / elem;
    let shape = case.shape(t);
    let layout = case.layouts.get_mut(t);
    let extent = shape[layout.order[3].index()] + layout.pad[3];
    let pad = layout.pad[3] + extent.next_multiple_of(per) - extent;
    if pad <= MAX_PAD {
        layout.pad[3] = pad;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Plan;

    #[test]
    fn the_arbitrary_impl_is_the_context_free_decoder() {
        let bytes = [9u8, 200, 17, 3, 250, 4, 4, 0, 128, 77, 1, 2, 3];
        let via_trait: Case = arbitrary::Arbitrary::arbitrary(&mut Unstructured::new(&bytes)).unwrap();
        let direct = decode_case(&mut Unstructured::new(&bytes), &DecodeContext::default()).unwrap();
        assert_eq!(via_trait, direct);
        via_trait.validate().unwrap();
    }

    #[test]
    fn empty_input_decodes_to_a_small_aligned_case() {
        let mut u = Unstructured::new(&[]);
        let case = decode_case(&mut u, &DecodeContext::default()).unwrap();
        case.validate().unwrap();
        assert_eq!((case.batch, case.heads_q, case.seq_q, case.seq_k), (1, 1, 1, 1));
        assert_eq!(case.layouts, Layouts::contiguous());
    }

    fn bytes(seed: u64, len: usize) -> Vec<u8> {
        (0..len).map(|i| (seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (i % 57)) as u8 ^ i as u8).collect()
    }

    #[test]
    fn every_byte_pattern_decodes_to_a_valid_case() {
        let ctx = DecodeContext {
            kernel: "k".into(),
            params: vec![("BLOCK_M".into(), vec![64, 128])],
            dtypes: vec![Dtype::F16, Dtype::Bf16],
            contract: None,
        };
        for seed in 0u64..2000 {
            let case = decode_case(&mut Unstructured::new(&bytes(seed, 64)), &ctx).unwrap();
            case.validate().unwrap_or_else(|e| panic!("{e}: {case:?}"));
            assert!(ctx.dtypes.contains(&case.dtype));
            assert!([64, 128].contains(&case.params["BLOCK_M"]));
        }
    }

    /// The decoder without a contract maps bytes to cases exactly as it did before it knew
    /// contracts (a case decoded by the earlier build, pinned field by field).
    #[test]
    fn unconstrained_decoding_is_unchanged() {
        let input: Vec<u8> = (0..128u32).map(|i| ((i * 37 + 11) % 256) as u8).collect();
        let c = decode_case(&mut Unstructured::new(&input), &DecodeContext::default()).unwrap();
        assert_eq!((c.dtype, c.batch, c.heads_q, c.heads_kv, c.seq_q, c.seq_k, c.head_dim, c.causal), (Dtype::F32, 3, 2, 1, 234, 511, 40, false));
        assert_eq!((c.scale, c.placement, c.data.seed, c.data.dist), (0.5, Placement::Guarded, 1530270188, ValueDist::LargeLogits));
        assert_eq!(c.layouts.q, TensorLayout { order: [Dim::D, Dim::B, Dim::H, Dim::S], pad: [0, 1, 3, 8], offset_bytes: 0 });
        assert_eq!(c.layouts.v, TensorLayout { order: [Dim::D, Dim::B, Dim::H, Dim::S], pad: [0, 0, 0, 1], offset_bytes: 0 });
        assert_eq!((&c.layouts.k, &c.layouts.o), (&TensorLayout::contiguous(), &TensorLayout::contiguous()));
    }

    /// fa_s512's declared contract: head_dim exactly 64, short sequences, 2-byte alignment.
    fn fa_s512_contract() -> Contract {
        Contract {
            dtypes: vec![Dtype::F16, Dtype::Bf16],
            layouts: LayoutSupport::InnerContiguous,
            head_dim: [64, 64],
            head_dim_multiple: 1,
            seq_q: [1, 512],
            seq_k: [1, 512],
            min_align: 2,
            causal: true,
            gqa: true,
            max_element_offset: None,
        }
    }

    fn constrained(contract: Contract) -> DecodeContext {
        DecodeContext { kernel: "k".into(), params: vec![("BLOCK_N".into(), vec![48])], dtypes: Vec::new(), contract: Some(contract) }
    }

    fn assert_inside(ctx: &DecodeContext, n: u64) -> Vec<Case> {
        let contract = ctx.contract.clone().unwrap();
        (0..n)
            .map(|seed| {
                let case = decode_case(&mut Unstructured::new(&bytes(seed, 128)), ctx).unwrap();
                case.validate().unwrap_or_else(|e| panic!("{e}: {case:?}"));
                let verdict = contract.check(&case, &Plan::new(&case));
                assert!(verdict.is_inside(), "{verdict:?}: {}", case.summary());
                case
            })
            .collect()
    }

    #[test]
    fn a_contract_keeps_every_case_inside_and_keeps_misaligned_offsets_it_allows() {
        let cases = assert_inside(&constrained(fa_s512_contract()), 3000);
        assert!(cases.iter().all(|c| c.head_dim == 64 && c.seq_q <= 512 && c.seq_k <= 512));
        // min_align 2 allows offsets 2, 4, 8 (mod 16): the class that breaks 16-byte loads.
        let residues: std::collections::BTreeSet<u32> = cases.iter().map(|c| c.layouts.q.offset_bytes % 16).collect();
        assert!(residues.is_superset(&[0, 2, 4, 8].into()), "{residues:?}");
        // The range's edges and the param tile ± 1 are drawn.
        for s in [1, 2, 47, 48, 49, 511, 512] {
            assert!(cases.iter().any(|c| c.seq_k == s), "seq_k {s} never drawn");
        }
        assert!(cases.iter().any(|c| c.causal) && cases.iter().any(|c| c.heads_q != c.heads_kv));
    }

    #[test]
    fn strict_contracts_shape_alignment_layout_multiples_causal_and_gqa() {
        let strict = Contract {
            dtypes: vec![Dtype::F32, Dtype::Bf16],
            layouts: LayoutSupport::Strided,
            head_dim: [24, 200],
            head_dim_multiple: 8,
            seq_q: [100, 4000],
            seq_k: [3, 9],
            min_align: 16,
            causal: false,
            gqa: false,
            max_element_offset: None,
        };
        let cases = assert_inside(&constrained(strict), 3000);
        assert!(cases.iter().all(|c| c.head_dim % 8 == 0 && !c.causal && c.heads_q == c.heads_kv));
        assert!(cases.iter().any(|c| c.head_dim == 24) && cases.iter().any(|c| c.head_dim == 200) && cases.iter().any(|c| c.head_dim == 32));
        assert!(cases.iter().any(|c| c.seq_q == 100) && cases.iter().any(|c| c.seq_q == 101) && cases.iter().any(|c| c.seq_q == 1024));
        assert!(cases.iter().any(|c| c.layouts.k.offset_bytes != 0), "aligned offsets still come up");
        let contiguous = Contract { layouts: LayoutSupport::Contiguous, min_align: 2, ..fa_s512_contract() };
        let cases = assert_inside(&constrained(contiguous), 500);
        assert!(cases.iter().all(|c| c.layouts.q.is_dense_bhsd()));
    }

    /// Hand-made contexts may hold contracts no manifest would load: decoding stays total.
    #[test]
    fn unsatisfiable_or_huge_contracts_still_decode_valid_cases() {
        let weird = [
            Contract { head_dim: [70, 60], seq_q: [0, 0], ..fa_s512_contract() },
            Contract { head_dim: [1024, 1024], seq_q: [1 << 20, 1 << 20], seq_k: [1 << 20, 1 << 20], ..fa_s512_contract() },
            Contract { head_dim: [1, 5000], head_dim_multiple: 0, min_align: 1 << 12, dtypes: Vec::new(), ..fa_s512_contract() },
            Contract { head_dim: [3, 3], head_dim_multiple: 7, min_align: 3, ..fa_s512_contract() },
        ];
        for contract in weird {
            let ctx = constrained(contract);
            for seed in 0..300 {
                let case = decode_case(&mut Unstructured::new(&bytes(seed, 128)), &ctx).unwrap();
                case.validate().unwrap_or_else(|e| panic!("{e}: {case:?}"));
            }
        }
    }

    #[test]
    fn element_offsets_past_int32_come_up_rarely_inside_the_contract_and_never_where_it_forbids() {
        let strided = Contract { layouts: LayoutSupport::Strided, seq_q: [1, 16384], seq_k: [1, 16384], head_dim: [1, 256], ..fa_s512_contract() };
        let n = 20 * PAST_INT32_ONE_IN as u64;
        let past: Vec<Case> = assert_inside(&constrained(strided.clone()), n).into_iter().filter(reaches_past_int32).collect();
        assert!((8..=40).contains(&past.len()), "{} of {n} cases pass 2^31", past.len());
        for c in &past {
            let plan = Plan::new(c);
            let big: Vec<_> = plan.tensors.iter().filter(|tp| tp.reaches_past_int32()).collect();
            assert_eq!(big.len(), 1, "{}", c.summary());
            // Batch 1 starts just past 2^31, and the tensor stays within 8 GiB.
            assert_eq!(c.batch, 2);
            assert!(big[0].strides[0] >= 1 << 31 && big[0].strides[0] < (1 << 31) + (1 << 23), "{}", c.summary());
            assert!(big[0].span_bytes <= 8 << 30, "{}", c.summary());
        }
        let thirty_two_bit = Contract { max_element_offset: Some((1 << 31) - 1), ..strided };
        assert!(!assert_inside(&constrained(thirty_two_bit), n).iter().any(reaches_past_int32));
        let contiguous = Contract { layouts: LayoutSupport::Contiguous, ..fa_s512_contract() };
        assert!(!assert_inside(&constrained(contiguous), 2000).iter().any(reaches_past_int32));
    }

    #[test]
    fn unconstrained_is_the_same_context_without_its_contract() {
        let ctx = constrained(fa_s512_contract());
        let free = ctx.unconstrained();
        assert_eq!((free.contract.is_none(), &free.kernel, &free.params), (true, &ctx.kernel, &ctx.params));
        let outside = (0..1000)
            .map(|seed| decode_case(&mut Unstructured::new(&bytes(seed, 128)), &free).unwrap())
            .filter(|c| !fa_s512_contract().check(c, &Plan::new(c)).is_inside())
            .count();
        assert!(outside > 900, "the unconstrained decoder explores outside: {outside} of 1000");
    }
}
