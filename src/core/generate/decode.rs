//! Decoding fuzzer bytes into a valid [`Case`] for one kernel, with `arbitrary`.
//!
//! Any byte string decodes (inputs that run out fall back to the smallest choices), so libFuzzer
//! can mutate bytes freely and every input still reaches the GPU. The manifest says what to draw:
//! its params, element types, dims (in declaration order, each biased toward its hints and range
//! edges, relations solved as it is drawn: [`super::relations`]), scalars (weighted choices),
//! input value classes, and for each tensor whose layout the caller chooses an order, padding,
//! base offset (every residue its alignment allows: offsets that are multiples of 2, 4 or 8 but
//! not 16 are the misaligned-vector-load class) and, where allowed, a broadcast dimension.
//! Small changes to the bytes make small changes to the case, which keeps libFuzzer's mutations
//! meaningful.
//!
//! A [`DecodeContext`] is constrained by default: every choice is drawn from the kernel's
//! declared contract (dims in range, contract relations kept, layout kinds, alignment, value
//! classes), so a campaign spends its runs on cases the kernel claims to handle.
//! [`DecodeContext::unconstrained`] drops the contract (`--outside-contract`) and keeps only what
//! makes a case well formed (`requires`, validity limits). Either way the mapping from bytes to
//! case is deterministic and total.

use arbitrary::{Result, Unstructured};

use crate::core::case::{Case, Scalar, TensorLayout, ValueClass, INT32_OFFSET_LIMIT, MAX_OFFSET_BYTES, MAX_PAD};
use crate::core::manifest::expr::Env;
use crate::core::manifest::{DimSpec, Hint, LayoutFreedom, Manifest, Role, ScalarSpec, ScalarType, TensorSpec};
use crate::core::plan::Plan;

use super::relations::{attach, dim_vars, int_of, Form, Relation};

/// Offsets that are 16-byte aligned.
pub const OFFSETS_ALIGNED: &[u32] = &[16, 32, 48, 64];
/// Offsets that are multiples of 2, 4 or 8 but not 16: the misaligned-vector-load class.
pub const OFFSETS_MISALIGNED: &[u32] = &[8, 4, 2, 6, 12, 24, 40, 10, 14];
/// Odd offsets, every odd residue mod 16 (what a 1-byte type allows; outside every 16-bit
/// kernel's contract).
pub const OFFSETS_ODD: &[u32] = &[1, 3, 5, 7, 9, 11, 13, 15];
/// Padding drawn per order position (zero twice as often).
pub const PADS: [u64; 6] = [0, 0, 1, 3, 8, 16];
/// Group sizes tried first for a dim that must be a multiple of another (GQA's heads_q).
const MULTIPLES: [u64; 4] = [1, 2, 4, 3];
/// One decoded case in this many (where the contract allows it) has a tensor whose element
/// offsets pass 2³¹ ([`offsets_past_int32`]). Such a case allocates 4–8 GiB on the GPU, but
/// the host holds only its elements and redzones (`arena::held_ranges`), so it costs about
/// what a small case costs; the odds are low because GPUs with less memory cannot run it.
/// Campaigns also schedule one early ([`crate::run::campaign::campaign_case`]).
pub const PAST_INT32_ONE_IN: u32 = 512;
/// Relative weights of the case-level value class (finite classes; specials only where
/// allowed).
const CLASS_WEIGHTS: [(ValueClass, u32); 9] = [
    (ValueClass::Normal, 6),
    (ValueClass::Uniform, 1),
    (ValueClass::Large, 2),
    (ValueClass::ConstantRows, 1),
    (ValueClass::Tiny, 1),
    (ValueClass::Huge, 2),
    (ValueClass::Zero, 1),
    (ValueClass::Nan, 1),
    (ValueClass::Inf, 1),
];

/// What a decoder needs to know about the kernel: its manifest, the name written into cases,
/// and whether to stay inside its declared contract.
#[derive(Clone, Debug)]
pub struct DecodeContext {
    /// The kernel's manifest.
    pub manifest: Manifest,
    /// Kernel name or manifest path written into the case.
    pub kernel: String,
    /// Whether every decoded case lies inside the contract (for any satisfiable contract).
    pub constrained: bool,
    relations: Vec<Relation>,
    /// The parts of `requires`, then of the contract's relations, that name scalars: split and
    /// parsed once here, kept by every decoded case.
    scalar_requires: Vec<String>,
    scalar_contract: Vec<String>,
}

impl DecodeContext {
    /// The constrained context of a kernel; cases name the manifest's path, so a seed replays
    /// the same kernel even when it is not a shipped one.
    pub fn new(m: &Manifest) -> DecodeContext {
        let order: Vec<String> = m.dims.iter().map(|d| d.name.clone()).collect();
        let mut relations = attach(&super::relations::dim_parts(&m.requires, m), &order, true);
        relations.extend(attach(&super::relations::dim_parts(&m.contract.relations, m), &order, false));
        DecodeContext {
            manifest: m.clone(),
            kernel: m.path.display().to_string(),
            constrained: true,
            relations,
            scalar_requires: super::relations::scalar_parts(&m.requires, m),
            scalar_contract: super::relations::scalar_parts(&m.contract.relations, m),
        }
    }

    /// The same context without the contract: decoding then explores the whole case space.
    pub fn unconstrained(&self) -> DecodeContext {
        DecodeContext { constrained: false, ..self.clone() }
    }

    /// Whether cases with element offsets past 2³¹ may be drawn: some tensor can hold one, and
    /// (constrained) the contract's `max_element_offset` does not forbid it.
    pub fn allows_int32_overflow(&self) -> bool {
        let limit_ok = !self.constrained || self.manifest.contract.max_element_offset.is_none_or(|m| m >= INT32_OFFSET_LIMIT);
        limit_ok && PastInt32::ALL.iter().any(|&f| !self.past_int32_tensors(f).is_empty())
    }

    /// The tensors a case past 2³¹ elements in `form` can be built on ([`offsets_past_int32`]).
    pub fn past_int32_tensors(&self, form: PastInt32) -> Vec<String> {
        past_int32_tensors(&self.manifest, self.constrained, form)
    }

    fn relations_of(&self, dim: &str) -> Vec<&Relation> {
        self.relations.iter().filter(|r| r.dim == dim && (r.required || self.constrained)).collect()
    }
}

/// Decodes a case; never panics, and the result always plans for the kernel. With a
/// constrained context the case also lies inside the contract, when the contract's relations
/// are of the solvable shapes (see [`super::relations`]).
pub fn decode_case(u: &mut Unstructured<'_>, ctx: &DecodeContext) -> Result<Case> {
    let m = &ctx.manifest;
    let mut case = Case::new(&ctx.kernel, m.dtypes[0]);
    for (name, values) in m.params.iter().filter(|(name, _)| !m.derived_params.contains_key(*name)) {
        case.params.insert(name.clone(), *u.choose(values)?);
    }
    case.dtype = *u.choose(&m.dtypes)?;
    for d in &m.dims {
        let v = draw_dim(u, ctx, d, &case)?;
        case.dims.insert(d.name.clone(), v);
        // A list follows its count dim at once, so the dims after it may relate to it
        // (`num_pages >= seqlens.pages(PAGE)`).
        for l in m.lengths.iter().filter(|l| l.count == d.name) {
            let list = super::lengths::draw_lengths(u, l, v, ctx.constrained)?;
            case.lengths.insert(l.name.clone(), list);
        }
    }
    for s in &m.scalars {
        let v = draw_scalar(u, ctx, s, &case)?;
        case.scalars.insert(s.name.clone(), v);
    }
    // Relations naming scalars hold once the scalars are drawn: `requires` always, the
    // contract's when constrained.
    if !ctx.scalar_requires.is_empty() || (ctx.constrained && !ctx.scalar_contract.is_empty()) {
        let contract: &[String] = if ctx.constrained { &ctx.scalar_contract } else { &[] };
        let rules: Vec<String> = ctx.scalar_requires.iter().chain(contract).cloned().collect();
        super::relations::satisfy_scalars(&mut case, m, &rules);
    }
    case.seed = u.arbitrary::<u32>()? as u64;
    draw_values(u, ctx, &mut case)?;
    for t in m.tensors.iter().filter(|t| t.layout_is_drawn()) {
        let mut l = draw_layout(u, ctx, t, t.dtype.resolve(case.dtype).size())?;
        l.values = case.layout(&t.name).values;
        case.tensors.insert(t.name.clone(), l);
    }
    case.placement = if u.int_in_range(0..=3u8)? == 3 { crate::core::case::Placement::Exact } else { crate::core::case::Placement::Guarded };
    if ctx.constrained {
        align_pitches(ctx, &mut case);
    }
    // Drawn last, so an input that has run out (each later draw at its low end) never asks for
    // it.
    // The decoder draws the wide form only (as it always has: old inputs decode as they did); a
    // kernel whose tensors take only the narrow one gets it from the campaign's schedule.
    let eligible = ctx.past_int32_tensors(PastInt32::WideStride);
    if ctx.allows_int32_overflow() && !eligible.is_empty() && u.int_in_range(1..=PAST_INT32_ONE_IN)? == PAST_INT32_ONE_IN {
        let t = u.choose(&eligible)?.clone();
        if let Some(pushed) = past_int32_variant(&case, m, &t, PastInt32::WideStride) {
            case = pushed;
        }
    }
    if Plan::new(&case, m).is_err() {
        shrink_to_valid(&mut case, m);
    }
    Ok(case)
}

/// One dim: assigned by an equality, or drawn three times in four from its boundary values
/// (hints, param tile sizes ± 1, range edges) and otherwise uniformly, then moved to the
/// nearest value that satisfies its relations.
fn draw_dim(u: &mut Unstructured<'_>, ctx: &DecodeContext, d: &DimSpec, case: &Case) -> Result<u64> {
    let m = &ctx.manifest;
    let rels = ctx.relations_of(&d.name);
    // Environments cost more than the rest of a draw: built only for a dim with relations.
    let env = std::cell::OnceCell::new();
    let env = || env.get_or_init(|| Env::new(&dim_vars(case, m)));
    // A dim is empty (0) only where its range starts there.
    let floor = d.range[0].min(1);
    let (mut lo, mut hi, step) = if ctx.constrained { (d.range[0], d.range[1], d.multiple.max(1)) } else { (floor, d.max, 1) };
    let cap = if ctx.constrained { d.cap.max(lo) } else { d.cap };
    for r in &rels {
        match &r.form {
            Form::Equal(e) => {
                if let Some(v) = int_of(env(), e).filter(|&v| v >= floor as i64 && v as u64 <= d.max) {
                    return Ok(v as u64);
                }
            }
            Form::AtMost(e, strict) => {
                if let Some(v) = int_of(env(), e) {
                    hi = hi.min((v - *strict as i64).max(floor as i64) as u64);
                }
            }
            Form::AtLeast(e, strict) => {
                if let Some(v) = int_of(env(), e) {
                    lo = lo.max((v + *strict as i64).max(floor as i64) as u64);
                }
            }
            _ => {}
        }
    }
    let first = lo.div_ceil(step).saturating_mul(step).max(floor);
    let top = hi.min(d.max);
    if first > top {
        // Unsatisfiable for these earlier dims: the smallest valid value (the case is then
        // outside the contract, or shrunk later if it is not well formed).
        return Ok(d.range[0].clamp(floor, d.max));
    }
    let last = first + (top.min(cap.max(first)) - first) / step * step;
    let multiple_of = rels.iter().find_map(|r| match &r.form {
        Form::MultipleOf(e) => int_of(env(), e).filter(|&v| v >= 1).map(|v| v as u64),
        _ => None,
    });
    let divides = rels.iter().find_map(|r| match &r.form {
        Form::Divides(e) => int_of(env(), e).filter(|&v| v >= 1).map(|v| v as u64),
        _ => None,
    });
    // One environment for every candidate: only this dim's value changes between them.
    let with_x = std::cell::RefCell::new(None);
    let ok = |x: u64| rels.is_empty() || satisfies(&rels, with_x.borrow_mut().get_or_insert_with(|| Env::new(&dim_vars(case, m))), &d.name, x);
    let x = if let Some(e) = multiple_of {
        let unit = lcm(e, step);
        let from_table = u.int_in_range(0..=3u8)? < 3;
        let k = if from_table { *u.choose(&MULTIPLES)? } else { u.int_in_range(1..=(last / unit).max(1))? };
        (k * unit).max(first.div_ceil(unit) * unit)
    } else if let Some(e) = divides {
        let divisors: Vec<u64> = (first.max(1)..=last.min(e)).filter(|&x| e % x == 0 && x % step == 0).collect();
        if divisors.is_empty() {
            first
        } else {
            *u.choose(&divisors)?
        }
    } else {
        let boundary: Vec<u64> = boundary(m, d, first, last, step).into_iter().filter(|&x| ok(x)).collect();
        let from_table = u.int_in_range(0..=3u8)? < 3;
        if from_table && !boundary.is_empty() {
            *u.choose(&boundary)?
        } else {
            first + step * u.int_in_range(0..=(last - first) / step)?
        }
    };
    Ok(nearest(x, first, top, step, ok))
}

/// Whether `x` for dim `name` satisfies every relation attached to it; `env` holds the case's
/// other values.
fn satisfies(rels: &[&Relation], env: &mut Env, name: &str, x: u64) -> bool {
    if rels.is_empty() {
        return true;
    }
    env.set_int(name, x);
    rels.iter().all(|r| env.boolean(&r.text).unwrap_or(false))
}

/// `x` if it satisfies `ok`, else the nearest value in `[first, top]` on the step grid that
/// does (searching a bounded distance), else `x`.
fn nearest(x: u64, first: u64, top: u64, step: u64, ok: impl Fn(u64) -> bool) -> u64 {
    if ok(x) {
        return x;
    }
    for k in 1..=2048u64 {
        let up = x.checked_add(k * step).filter(|&v| v <= top);
        let down = x.checked_sub(k * step).filter(|&v| v >= first);
        if up.is_none() && down.is_none() {
            break;
        }
        if let Some(v) = down.filter(|&v| ok(v)) {
            return v;
        }
        if let Some(v) = up.filter(|&v| ok(v)) {
            return v;
        }
    }
    x
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

fn lcm(a: u64, b: u64) -> u64 {
    (a / gcd(a, b).max(1)).saturating_mul(b).max(1)
}

/// A dim's boundary values within `[first, last]` on the step grid: its hints (each param
/// hint's values ± 1) and the range edges and one step inside them.
fn boundary(m: &Manifest, d: &DimSpec, first: u64, last: u64, step: u64) -> Vec<u64> {
    let mut out = vec![first, first + step, last.saturating_sub(step), last];
    for h in &d.hints {
        match h {
            Hint::Value(v) => out.push(*v),
            Hint::Param(_) => {}
        }
    }
    let tiles = m.hint_values(&DimSpec { hints: d.hints.iter().filter(|h| matches!(h, Hint::Param(_))).cloned().collect(), ..d.clone() });
    for t in tiles.into_iter().filter(|&t| t > 1) {
        out.extend([t - 1, t, t + 1]);
    }
    out.retain(|&x| x >= first && x <= last && x % step == 0);
    out.sort_unstable();
    out.dedup();
    out
}

/// One scalar: a weighted choice, a value in its range, or (a flag without choices, or any
/// flag outside the contract) a coin flip.
fn draw_scalar(u: &mut Unstructured<'_>, ctx: &DecodeContext, s: &ScalarSpec, case: &Case) -> Result<Scalar> {
    let m = &ctx.manifest;
    if s.ty == ScalarType::Bool && (s.choices.is_empty() || !ctx.constrained) {
        return Ok(Scalar::Bool(u.arbitrary::<bool>()?));
    }
    let vars = dim_vars(case, m);
    if !s.choices.is_empty() {
        let weights: Vec<u32> = if s.weights.is_empty() { vec![1; s.choices.len()] } else { s.weights.clone() };
        let total: u32 = weights.iter().sum();
        let mut pick = u.int_in_range(0..=total.saturating_sub(1))?;
        let mut chosen = &s.choices[0];
        for (c, w) in s.choices.iter().zip(&weights) {
            if pick < *w {
                chosen = c;
                break;
            }
            pick -= w;
        }
        return Ok(m.choice_value(s, chosen, &vars).unwrap_or_else(|| m.default_scalar(s, &vars)));
    }
    let [lo, hi] = s.range.unwrap_or(if s.ty == ScalarType::Int { [0.0, 16.0] } else { [0.0, 1.0] });
    let v = match u.int_in_range(0..=3u8)? {
        0 => lo,
        1 => hi,
        _ if s.ty == ScalarType::Int => u.int_in_range(lo as i64..=hi as i64)? as f64,
        _ if lo > 0.0 => lo * (hi / lo).powf(u.int_in_range(0..=1000u32)? as f64 / 1000.0),
        _ => lo + (hi - lo) * (u.int_in_range(0..=1000u32)? as f64 / 1000.0),
    };
    Ok(crate::core::manifest::coerce(s.ty, if s.ty == ScalarType::Int { Scalar::Int(v as i64) } else { Scalar::Float(v) }))
}

/// The value classes of every drawn tensor: one class for the case (weighted, among the classes
/// some tensor allows), given to each tensor that allows it (others keep normal or their first
/// class); one case in eight mixes every finite class a tensor allows, element by element.
fn draw_values(u: &mut Unstructured<'_>, ctx: &DecodeContext, case: &mut Case) -> Result<()> {
    let m = &ctx.manifest;
    let drawn: Vec<&TensorSpec> = m.tensors.iter().filter(|t| t.role == Role::Input || t.init == crate::core::manifest::Init::Drawn).collect();
    let allowed = |t: &TensorSpec| -> Vec<ValueClass> {
        if ctx.constrained {
            t.values.clone()
        } else {
            ValueClass::ALL.into_iter().filter(|c| !c.is_opt_in()).collect()
        }
    };
    let union: Vec<(ValueClass, u32)> = CLASS_WEIGHTS.iter().copied().filter(|(c, _)| drawn.iter().any(|t| allowed(t).contains(c))).collect();
    if union.is_empty() {
        return Ok(());
    }
    let total: u32 = union.iter().map(|(_, w)| w).sum();
    let mut pick = u.int_in_range(0..=total - 1)?;
    let mut class = union[0].0;
    for (c, w) in &union {
        if pick < *w {
            class = *c;
            break;
        }
        pick -= w;
    }
    let mixed = u.int_in_range(0..=7u8)? == 7;
    for t in drawn {
        let a = allowed(t);
        let values = if mixed {
            let mix: Vec<ValueClass> = a.iter().copied().filter(|c| *c != ValueClass::ConstantRows).collect();
            if mix.is_empty() {
                a.clone()
            } else {
                mix
            }
        } else if a.contains(&class) {
            vec![class]
        } else if a.contains(&ValueClass::Normal) {
            vec![ValueClass::Normal]
        } else {
            vec![a[0]]
        };
        case.layout_mut(&t.name).values = values;
    }
    Ok(())
}

/// The alignment a tensor's base and stepped strides must honour: the contract's (never less
/// than the element size); 1 (anything) outside the contract.
fn align_of(ctx: &DecodeContext, t: &TensorSpec, elem: u32) -> u32 {
    if ctx.constrained {
        t.align.max(elem)
    } else {
        1
    }
}

/// The orders worth trying for a tensor of `rank`, outermost first: its own order, then ones
/// that keep the innermost dim innermost (the two innermost outer dims swapped, the two
/// outermost swapped, the innermost outer dim moved to the front), then (`inner` false) ones
/// that do not (the last two swapped, the last moved to the front). For rank 4 (BHSD): BHSD,
/// BSHD, HBSD, SBHD, BHDS, DBHS.
pub fn orders(rank: usize, inner: bool) -> Vec<Vec<usize>> {
    let id: Vec<usize> = (0..rank).collect();
    let mut out = vec![id.clone()];
    let swap = |i: usize, j: usize| {
        let mut o = id.clone();
        o.swap(i, j);
        o
    };
    let to_front = |i: usize| {
        let mut o = id.clone();
        let x = o.remove(i);
        o.insert(0, x);
        o
    };
    if rank >= 3 {
        out.push(swap(rank - 3, rank - 2));
        out.push(swap(0, 1));
        out.push(to_front(rank - 2));
    }
    if !inner && rank >= 2 {
        out.push(swap(rank - 2, rank - 1));
        out.push(to_front(rank - 1));
    }
    let mut seen = Vec::new();
    out.retain(|o| {
        let new = !seen.contains(o);
        seen.push(o.clone());
        new
    });
    out
}

/// One tensor's layout: half the time its own order unpadded, otherwise an order from
/// [`orders`] the layout kind allows, with padding; the base offset a multiple of the
/// alignment; a broadcast dimension one time in eight where allowed.
fn draw_layout(u: &mut Unstructured<'_>, ctx: &DecodeContext, t: &TensorSpec, elem: u32) -> Result<TensorLayout> {
    let align = align_of(ctx, t, elem);
    let kind = u.int_in_range(0..=7u8)?;
    let base_align = if ctx.constrained { t.base_alignment().max(align) } else { align };
    let offset_bytes = offset(u, base_align)?;
    let freedom = if ctx.constrained { t.layout } else { LayoutFreedom::Strided };
    let mut l = TensorLayout { offset_bytes, ..TensorLayout::dense() };
    if kind >= 4 && freedom != LayoutFreedom::Dense && t.rank() >= 2 {
        // A unit stride on a dimension other than the innermost is one element: too little for
        // an alignment above the element size, so such contracts keep the innermost dim last.
        let inner = freedom == LayoutFreedom::Inner || align > elem;
        let choices = orders(t.rank(), inner);
        let order = u.choose(&choices)?.clone();
        let mut pad = vec![0u64; t.rank()];
        for p in pad.iter_mut().skip(1) {
            *p = *u.choose(&PADS)?;
        }
        l.order = if order.iter().enumerate().all(|(i, &d)| i == d) { Vec::new() } else { order };
        l.pad = if pad.iter().all(|&p| p == 0) { Vec::new() } else { pad };
    }
    if t.role == Role::Input && (t.broadcast || !ctx.constrained) && t.rank() >= 2 && u.int_in_range(0..=7u8)? == 7 {
        l.broadcast = vec![u.int_in_range(0..=t.rank() - 2)?];
    }
    Ok(l)
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

/// Pads the innermost extent of every tensor whose alignment is above its element size so its
/// pitch, and with it every outer stride, is a multiple of that alignment.
fn align_pitches(ctx: &DecodeContext, case: &mut Case) {
    let m = &ctx.manifest;
    let Ok(plan) = Plan::new(case, m) else { return };
    for (t, tp) in m.tensors.iter().zip(&plan.tensors) {
        if !matches!(t.layout, LayoutFreedom::Inner | LayoutFreedom::Strided) || tp.rank() < 2 {
            continue;
        }
        let elem = tp.elem_bytes;
        let align = t.align;
        if align <= elem || align % elem != 0 {
            continue;
        }
        let per = (align / elem) as u64;
        let l = case.layout_mut(&t.name);
        let order = l.order_of(tp.rank());
        let inner = order[tp.rank() - 1];
        let mut pad = if l.pad.is_empty() { vec![0; tp.rank()] } else { l.pad.clone() };
        let extent = tp.shape[inner] + pad[tp.rank() - 1];
        let want = pad[tp.rank() - 1] + extent.next_multiple_of(per) - extent;
        if want <= MAX_PAD {
            pad[tp.rank() - 1] = want;
        }
        l.pad = if pad.iter().all(|&p| p == 0) { Vec::new() } else { pad };
    }
}

/// A case whose plan fails (a span past the limit, a relation the draws could not keep) made
/// small: every dim at the low end of its range, every layout unpadded.
fn shrink_to_valid(case: &mut Case, m: &Manifest) {
    for l in case.tensors.values_mut() {
        l.pad.clear();
    }
    if Plan::new(case, m).is_ok() {
        return;
    }
    let sample = m.sample_vars();
    case.dims = sample.dims;
    super::fit_lengths(case, m);
}

/// How a case passes 2³¹ elements ([`offsets_past_int32`]). Both keep a few logical elements in a
/// 4–8 GiB span; they differ in where 32-bit arithmetic wraps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PastInt32 {
    /// Two rows whose stride is itself 2³¹ or more: a stride held in 32 bits (an `int stride`
    /// parameter) wraps, as does `row * stride`.
    WideStride,
    /// Three rows whose stride is 2³⁰ or more but below 2³¹: the stride fits in 32 bits and only
    /// `row * stride` wraps, at row 2. This is how Triton wraps: it passes an integer argument
    /// below 2³¹ as a 32-bit value, so a `pid * stride` of the tutorials is 32-bit unless the
    /// stride itself is large.
    NarrowStride,
}

impl PastInt32 {
    /// Both forms, in the order campaigns schedule them.
    pub const ALL: [PastInt32; 2] = [PastInt32::WideStride, PastInt32::NarrowStride];

    /// The outermost dimension's extent.
    pub fn rows(self) -> u64 {
        match self {
            PastInt32::WideStride => 2,
            PastInt32::NarrowStride => 3,
        }
    }

    /// The outermost stride is the first multiple of the next stride at or past this.
    fn min_stride(self) -> u64 {
        INT32_OFFSET_LIMIT / (self.rows() - 1)
    }

    /// The form of a tensor already past 2³¹ elements: its largest (outermost) stride says.
    pub fn of(tp: &crate::core::plan::TensorPlan) -> PastInt32 {
        if tp.strides.iter().any(|&s| s >= INT32_OFFSET_LIMIT) {
            PastInt32::WideStride
        } else {
            PastInt32::NarrowStride
        }
    }
}

/// The tensors a case past 2³¹ elements in `form` can be built on: rank ≥ 2, a layout with free
/// strides, and an outermost dimension that is a dim able to take [`PastInt32::rows`].
pub fn past_int32_tensors(m: &Manifest, constrained: bool, form: PastInt32) -> Vec<String> {
    let rows = form.rows();
    m.tensors
        .iter()
        .filter(|t| t.rank() >= 2 && matches!(t.layout, LayoutFreedom::Inner | LayoutFreedom::Strided))
        .filter(|t| {
            t.dim_name(0)
                .and_then(|d| m.dim(d))
                .is_some_and(|d| d.max >= rows && (!constrained || (d.range[0] <= rows && d.range[1] >= rows && rows.is_multiple_of(d.multiple))))
        })
        .map(|t| t.name.clone())
        .collect()
}

/// Makes tensor `t`'s element offsets pass 2³¹ while it keeps its few logical elements: its
/// outermost dim becomes [`PastInt32::rows`], that dimension moves to the front of its order (the others keep
/// their order and padding, so an aligned row pitch stays aligned), and the next dimension is
/// padded until the outermost stride is the first multiple of that dimension's stride at or past
/// 2³¹ (`form`'s 2³⁰ for three rows). The last index of the outermost dimension then starts at
/// the first offset a signed 32-bit index wraps on; every stride stays a multiple of the ones it was built from, so a contract's
/// alignment still holds. A broadcast dimension has no stride to scale: the outermost one stops
/// being broadcast, and the padding goes to the next dimension that is not. Returns `false` when
/// the tensor cannot take it.
pub fn offsets_past_int32(case: &mut Case, m: &Manifest, t: &str, form: PastInt32) -> bool {
    let Some(spec) = m.tensor(t) else { return false };
    let Some(dim) = spec.dim_name(0) else { return false };
    case.dims.insert(dim.to_string(), form.rows());
    let Ok(plan) = Plan::new(case, m) else { return false };
    let tp = plan.tensor(t).expect("planned above");
    let rank = tp.rank();
    let layout = case.layout_mut(t);
    layout.broadcast.retain(|&d| d != 0);
    let order = layout.order_of(rank);
    let pads: Vec<u64> = (0..rank).map(|i| layout.pad_at(i)).collect();
    let kept: Vec<(usize, u64)> = order.iter().copied().zip(pads).filter(|&(d, _)| d != 0).collect();
    let mut new_order = vec![0];
    new_order.extend(kept.iter().map(|&(d, _)| d));
    let mut new_pad = vec![0];
    new_pad.extend(kept.iter().map(|&(_, p)| p));
    layout.order = new_order;
    layout.pad = new_pad;
    // Padding a broadcast position changes no stride, and the broadcast positions between the
    // outermost and this one add nothing to its stride: this one alone sets it.
    let Some(pos) = (1..rank).find(|&i| !layout.broadcast.contains(&layout.order[i])) else { return false };
    let next = layout.order[pos];
    let Some(st) = crate::core::case::strides(&tp.shape, layout) else { return false };
    let extent = form.min_stride().div_ceil(st[next].max(1));
    layout.pad[pos] = extent.saturating_sub(tp.shape[next]);
    true
}

/// A copy of `case` with [`offsets_past_int32`] in `form` applied to `t`, if that copy is a valid case
/// (it may not be: a tensor already near the span limit would pass it; an empty tensor has
/// nothing to push).
pub fn past_int32_variant(case: &Case, m: &Manifest, t: &str, form: PastInt32) -> Option<Case> {
    // An empty tensor (a dim that may be 0) has no element a wrapped index could reach.
    if Plan::new(case, m).ok().and_then(|p| p.tensor(t).map(|tp| tp.numel == 0)).unwrap_or(false) {
        return None;
    }
    let mut pushed = case.clone();
    if !offsets_past_int32(&mut pushed, m, t, form) || Plan::new(&pushed, m).is_err() {
        return None;
    }
    distinct_values(&mut pushed, m);
    Some(pushed)
}

/// Gives every tensor the kernel reads values that differ from element to element, where its
/// manifest allows such a class: a pushed case probes for a wrapped index, which reads another
/// element than the one meant, and zeros, constant rows, NaN or infinities would read the same
/// value there (a 32-bit-offset kernel passed its pushed case on zeros). The first such class
/// the manifest lists replaces a tensor's classes when none of them varies.
fn distinct_values(case: &mut Case, m: &Manifest) {
    use crate::core::case::ValueClass;
    let varies = |c: &ValueClass| !matches!(c, ValueClass::Zero | ValueClass::ConstantRows | ValueClass::Nan | ValueClass::Inf);
    for spec in m.tensors.iter().filter(|s| matches!(s.role, Role::Input | Role::InOut)) {
        let Some(varied) = spec.values.iter().find(|c| varies(c)) else { continue };
        // A tensor the case does not list has the default layout, whose values are normal.
        if let Some(layout) = case.tensors.get_mut(&spec.name).filter(|l| !l.values.iter().any(varies)) {
            layout.values = vec![*varied];
        }
    }
}

/// Whether some tensor of `case` reaches an element offset of 2³¹ or more.
pub fn reaches_past_int32(case: &Case, m: &Manifest) -> bool {
    Plan::new(case, m).is_ok_and(|p| p.reaches_past_int32())
}
