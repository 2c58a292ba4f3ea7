//! Planning: pure host arithmetic from a [`Case`] and its kernel's [`Manifest`] to a [`Plan`].
//!
//! A plan holds, per named tensor, its role, element type, shape (the manifest's shape
//! expressions evaluated for the case's dims), the element strides of each logical dimension,
//! the exact byte span the tensor covers, and the alignment residues (`ptr % 16`,
//! `stride_bytes % 16`) that decide whether vector loads are legal; and the values every
//! expression of the launch may name ([`Vars`]). Planning is where a case is checked against
//! what makes it well formed (its dims, the manifest's `requires`, every stride and span computed
//! without overflow); [`check_contract`] then judges it against what the kernel declared: a
//! finding outside the contract is the caller's bug, not the kernel's, so every later report says
//! which side of the contract a case was on.
//!
//! Nothing here touches the GPU; the arena and launch stages read their numbers from the plan.

mod contract;

pub use contract::{admits, check_contract, plan_and_judge, ContractVerdict};

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::core::case::{span_elements, strides, Case, Dtype, Scalar, TensorLayout, INT32_OFFSET_LIMIT, MAX_SPAN_BYTES};
use crate::core::error::CaseError;
use crate::core::manifest::expr::Env;
use crate::core::manifest::{coerce, Derive, Init, Manifest, Role, TensorVars, Vars};

/// The alignment vector loads need; residues are taken modulo this.
pub const VECTOR_ALIGN: u64 = 16;

/// Where one tensor lives and how it is aligned.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TensorPlan {
    /// The tensor's name.
    pub name: String,
    /// Its position in the manifest's roster (and the arena's allocation index).
    pub index: usize,
    /// What the kernel does with it.
    pub role: Role,
    /// Its element type.
    pub dtype: Dtype,
    /// Logical shape.
    pub shape: Vec<u64>,
    /// The dim each logical dimension is, when its shape entry is a dim name.
    pub dim_names: Vec<Option<String>>,
    /// Element strides, per logical dimension (0 for a broadcast dimension).
    pub strides: Vec<u64>,
    /// Element size in bytes.
    pub elem_bytes: u32,
    /// Base byte offset from a 256-byte-aligned point.
    pub offset_bytes: u64,
    /// Bytes from the first to the last byte of the tensor, inclusive.
    pub span_bytes: u64,
    /// Logical elements.
    pub numel: u64,
    /// `base_ptr % 16`.
    pub base_residue: u64,
    /// `stride_bytes % 16` per logical dimension.
    pub stride_residues: Vec<u64>,
    /// Initial contents (outputs, in-outs, scratch; inputs are drawn).
    pub init: Init,
    /// The case's layout of this tensor.
    pub layout: TensorLayout,
    /// Whether the case chose this tensor's layout (its alignment is part of signatures).
    pub drawn: bool,
    /// Whether its bits may differ between two runs ([`crate::core::manifest::TensorSpec::order_dependent`]).
    pub order_dependent: bool,
    /// Whether its values are pairwise distinct ([`crate::core::manifest::TensorSpec::distinct`]).
    pub distinct: bool,
    /// Bytes past the span that the caller allocated too ([`crate::core::manifest::TensorSpec::capacity`]):
    /// a don't-care tail, neither judged nor a redzone.
    #[serde(default)]
    pub tail_bytes: u64,
}

impl TensorPlan {
    /// Whether its elements lie dense in row-major order from its base: logical index `k` at
    /// element offset `k` (a dimension of extent 1 may have any stride).
    pub fn is_dense_row_major(&self) -> bool {
        let mut next = 1u64;
        for (&n, &s) in self.shape.iter().zip(&self.strides).rev() {
            if n != 1 && s != next {
                return false;
            }
            next *= n;
        }
        true
    }

    /// Element offset of a logical index from the tensor's base.
    pub fn elem_offset(&self, idx: &[u64]) -> u64 {
        idx.iter().zip(&self.strides).map(|(i, s)| i * s).sum()
    }

    /// Byte offset of a logical index from the tensor's base.
    pub fn byte_offset(&self, idx: &[u64]) -> u64 {
        self.elem_offset(idx) * self.elem_bytes as u64
    }

    /// The element offset of the tensor's last element: the largest index a kernel computes
    /// (0 for an empty tensor).
    pub fn max_element_offset(&self) -> u64 {
        (self.span_bytes / self.elem_bytes as u64).saturating_sub(1)
    }

    /// Whether some element offset reaches 2³¹, where 32-bit signed index arithmetic wraps.
    pub fn reaches_past_int32(&self) -> bool {
        self.max_element_offset() >= INT32_OFFSET_LIMIT
    }

    /// Whether the tensor's elements fill its span with no gaps.
    ///
    /// Counted over stored elements: a broadcast dimension (stride 0) repeats its elements
    /// instead of adding any, so `numel` would overcount them and could match a span that has
    /// gaps.
    pub fn is_gapless(&self) -> bool {
        self.stored_elements() * self.elem_bytes as u64 == self.span_bytes
    }

    /// Distinct elements in memory: `numel` without the repeats along broadcast dimensions.
    pub fn stored_elements(&self) -> u64 {
        if self.numel == 0 {
            return 0;
        }
        self.shape.iter().zip(&self.strides).map(|(&n, &s)| if s == 0 { 1 } else { n }).product()
    }

    /// The tensor's rank.
    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// Whether the base and every stride that can be stepped over (dimensions of extent > 1
    /// that are not broadcast, except the innermost logical dimension when its stride is 1) are
    /// multiples of `align` bytes.
    pub fn aligned_to(&self, align: u64) -> bool {
        let last = self.rank().saturating_sub(1);
        self.offset_bytes.is_multiple_of(align)
            && (0..self.rank()).all(|i| {
                (i == last && self.strides[i] == 1)
                    || self.shape[i] == 1
                    || self.strides[i] == 0
                    || (self.strides[i] * self.elem_bytes as u64).is_multiple_of(align)
            })
    }

    /// The smallest power-of-two alignment (≤ 16) the base and relevant strides all honour.
    pub fn alignment(&self) -> u64 {
        [16, 8, 4, 2, 1].into_iter().find(|&a| self.aligned_to(a)).unwrap_or(1)
    }

    /// The logical index of position `linear` in the tensor's logical (row-major) order.
    pub fn logical_index(&self, linear: u64) -> Vec<u64> {
        logical_index(&self.shape, linear)
    }

    /// A logical index written with the dims' names where known: `[batch=0, seq_q=3, 1]`.
    pub fn describe_index(&self, idx: &[u64]) -> String {
        let parts: Vec<String> = idx
            .iter()
            .enumerate()
            .map(|(i, v)| match self.dim_names.get(i).and_then(|d| d.as_deref()) {
                Some(d) => format!("{d}={v}"),
                None => v.to_string(),
            })
            .collect();
        format!("[{}]", parts.join(", "))
    }

    /// This tensor's values for expressions.
    pub fn vars(&self) -> TensorVars {
        TensorVars {
            name: self.name.clone(),
            shape: self.shape.clone(),
            strides: self.strides.clone(),
            dim_names: self.dim_names.clone(),
            offset_bytes: self.offset_bytes,
            elem_bytes: self.elem_bytes,
        }
    }
}

/// The logical index of position `linear` in row-major order of `shape`.
pub fn logical_index(shape: &[u64], linear: u64) -> Vec<u64> {
    let mut rest = linear;
    let mut idx = vec![0u64; shape.len()];
    for i in (0..shape.len()).rev() {
        let n = shape[i].max(1);
        idx[i] = rest % n;
        rest /= n;
    }
    idx
}

/// The full plan of a case: one [`TensorPlan`] per tensor, in roster order, and the values
/// expressions see.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// Per-tensor plans, in the manifest's roster order.
    pub tensors: Vec<TensorPlan>,
    /// Dims, scalars, params, defines and tensors, for the launch's expressions.
    pub vars: Vars,
}

impl Plan {
    /// Plans `case` for the kernel of `m`: every dim set and within its validity range, the
    /// requires holding, every shape, stride and span computed without overflow and within
    /// [`MAX_SPAN_BYTES`]. The first problem is returned, naming the field.
    pub fn new(case: &Case, m: &Manifest) -> Result<Plan, CaseError> {
        let bad = |field: String, problem: String| CaseError::Invalid { field, problem };
        case.validate()?;
        m.check_param_values(&case.params).map_err(|(field, problem)| bad(field, problem))?;
        let mut vars = Vars { defines: m.defines.clone(), params: m.default_params(), elem_bytes: case.dtype.size(), ..Vars::default() };
        for (k, &v) in &case.params {
            vars.params.insert(k.clone(), v);
        }
        if let Some(name) = case.dims.keys().find(|n| m.dim(n).is_none()) {
            let declared: Vec<&str> = m.dims.iter().map(|d| d.name.as_str()).collect();
            return Err(bad(format!("dims.{name}"), format!("{} has no dim `{name}` (its dims: {})", m.name, declared.join(", "))));
        }
        for d in &m.dims {
            let v = case.dims.get(&d.name).copied().ok_or_else(|| bad(format!("dims.{}", d.name), format!("the case does not set it; {} needs it", m.name)))?;
            let lo = d.range[0].min(1);
            if v < lo || v > d.max {
                let why = if v == 0 { format!("; {} may not be empty (its range starts at {})", d.name, d.range[0]) } else { String::new() };
                return Err(bad(format!("dims.{}", d.name), format!("{v} is outside {lo}..={}{why}", d.max)));
            }
            vars.dims.insert(d.name.clone(), v);
        }
        if let Some(name) = case.lengths.keys().find(|n| m.lengths_spec(n).is_none()) {
            return Err(bad(format!("lengths.{name}"), format!("{} has no list of lengths `{name}`", m.name)));
        }
        for l in &m.lengths {
            let field = format!("lengths.{}", l.name);
            let list = case.lengths.get(&l.name).ok_or_else(|| bad(field.clone(), format!("the case does not set it; {} needs it", m.name)))?;
            let count = vars.dims[&l.count];
            if list.len() as u64 != count {
                return Err(bad(field, format!("holds {} lengths, but {} = {count}", list.len(), l.count)));
            }
            if let Some(v) = list.iter().find(|&&v| v > crate::core::case::MAX_DIM) {
                return Err(bad(field, format!("{v} is more than {}", crate::core::case::MAX_DIM)));
            }
            vars.lengths.insert(l.name.clone(), list.clone());
        }
        if let Some(name) = case.scalars.keys().find(|n| m.scalar(n).is_none()) {
            return Err(bad(format!("scalars.{name}"), format!("{} has no scalar `{name}`", m.name)));
        }
        for s in &m.scalars {
            let v = match case.scalars.get(&s.name) {
                Some(v) => {
                    check_scalar_type(s, *v).map_err(|problem| bad(format!("scalars.{}", s.name), problem))?;
                    coerce(s.ty, *v)
                }
                None => m.default_scalar(s, &vars),
            };
            if let Scalar::Float(x) = v {
                if !x.is_finite() {
                    return Err(bad(format!("scalars.{}", s.name), format!("{x} is not a finite number")));
                }
            }
            vars.scalars.insert(s.name.clone(), v);
        }
        m.derive_params(&mut vars).map_err(|(field, problem)| bad(field, problem))?;
        // Built only when a relation or a shape expression needs it: most shapes name dims, and
        // an environment costs more than the rest of the plan.
        let env = std::cell::OnceCell::new();
        let env = || env.get_or_init(|| Env::new(&vars));
        for rel in &m.requires {
            match env().boolean(rel) {
                Ok(true) => {}
                Ok(false) => return Err(bad("dims".into(), format!("`{rel}` does not hold ({})", dims_text(&vars.dims)))),
                Err(f) => return Err(bad("dims".into(), format!("`{rel}`: {}", f.problem))),
            }
        }
        if let Some(name) = case.tensors.keys().find(|n| m.tensor(n).is_none()) {
            let declared: Vec<&str> = m.tensors.iter().map(|t| t.name.as_str()).collect();
            return Err(bad(format!("tensors.{name}"), format!("{} has no tensor `{name}` (its tensors: {})", m.name, declared.join(", "))));
        }
        let mut tensors = Vec::with_capacity(m.tensors.len());
        for index in 0..m.tensors.len() {
            tensors.push(plan_tensor(case, m, index, &vars, &env)?);
        }
        for (t, _) in m.tensors.iter().zip(&tensors).filter(|(_, tp)| tp.dtype.is_float()) {
            let Some([lo, hi]) = &t.range else { continue };
            let (lo, hi) = (env().float(lo), env().float(hi));
            let ok = matches!((&lo, &hi), (Ok(a), Ok(b)) if a.is_finite() && b.is_finite() && a <= b);
            if !ok {
                let show = |r: &Result<f64, _>| r.as_ref().map_or_else(|f: &crate::core::manifest::expr::ExprFailure| f.problem.clone(), |x| x.to_string());
                return Err(bad(
                    format!("tensors.{}.range", t.name),
                    format!("[{}, {}] is not a finite range with min <= max for this case", show(&lo), show(&hi)),
                ));
            }
        }
        for (t, tp) in m.tensors.iter().zip(&tensors) {
            if let Some(d) = &t.derive {
                derived_fits(t, d, tp, &vars, env()).map_err(|problem| bad(format!("tensors.{}", t.name), problem))?;
            }
        }
        for (t, tp) in m.tensors.iter().zip(&tensors).filter(|(t, _)| t.distinct) {
            let (lo, hi) = match &t.range {
                Some([lo, hi]) => match (env().int(lo), env().int(hi)) {
                    (Ok(lo), Ok(hi)) => (lo, hi),
                    _ => continue, // the generator reports a range that does not evaluate
                },
                None => tp.dtype.default_int_range(),
            };
            let span = (hi as i128 - lo as i128 + 1).max(0) as u128;
            if span < tp.numel as u128 {
                return Err(bad(
                    format!("tensors.{}", t.name),
                    format!("{} distinct values do not fit its range [{lo}, {hi}] ({span} values); the contract must keep the range at least as large as the tensor", tp.numel),
                ));
            }
        }
        vars.tensors = tensors.iter().map(TensorPlan::vars).collect();
        Ok(Plan { tensors, vars })
    }

    /// The plan of a tensor by name.
    pub fn tensor(&self, name: &str) -> Option<&TensorPlan> {
        self.tensors.iter().find(|t| t.name == name)
    }

    /// A dim's value.
    pub fn dim(&self, name: &str) -> u64 {
        self.vars.dims.get(name).copied().unwrap_or(0)
    }

    /// A scalar's value (coerced to its declared type).
    pub fn scalar(&self, name: &str) -> Option<Scalar> {
        self.vars.scalars.get(name).copied()
    }

    /// Whether some tensor reaches an element offset of 2³¹ or more.
    pub fn reaches_past_int32(&self) -> bool {
        self.tensors.iter().any(TensorPlan::reaches_past_int32)
    }

    /// Alignment (16, 8, 4, 2 or 1 bytes) of every tensor whose layout the case chose, in
    /// roster order: what a fault's signature records.
    pub fn alignments(&self) -> Vec<(String, u64)> {
        self.tensors.iter().filter(|t| t.drawn).map(|t| (t.name.clone(), t.alignment())).collect()
    }
}

fn dims_text(dims: &BTreeMap<String, u64>) -> String {
    dims.iter().map(|(k, v)| format!("{k} = {v}")).collect::<Vec<_>>().join(", ")
}

/// One tensor of the roster for a case.
fn plan_tensor<'e>(case: &Case, m: &Manifest, index: usize, vars: &Vars, env: &dyn Fn() -> &'e Env) -> Result<TensorPlan, CaseError> {
    let t = &m.tensors[index];
    let field = |f: &str| format!("tensors.{}.{f}", t.name);
    let bad = |f: &str, problem: String| CaseError::Invalid { field: field(f), problem };
    let mut shape = Vec::with_capacity(t.rank());
    for (i, e) in t.shape.iter().enumerate() {
        let v = match t.dim_name(i).and_then(|d| vars.dims.get(d)) {
            Some(&v) => v,
            None => env().size(e, u64::MAX, "extent").map_err(|f| bad(&format!("shape[{i}]"), format!("\"{e}\": {}", f.problem)))?,
        };
        // Empty where a dim it reads is empty (a dim whose range starts at 0), never otherwise.
        if v == 0 && !crate::core::manifest::expr::variables_in(e).iter().any(|n| vars.dims.get(n) == Some(&0)) {
            return Err(bad(&format!("shape[{i}]"), format!("\"{e}\" evaluates to 0 for this case")));
        }
        shape.push(v);
    }
    let layout = case.layout(&t.name);
    layout.validate(t.rank(), &format!("tensors.{}", t.name))?;
    if !layout.broadcast.is_empty() && t.role != Role::Input {
        return Err(bad("broadcast", format!("{} is {}, and only inputs may be broadcast", t.name, t.role.name())));
    }
    let dtype = t.dtype.resolve(case.dtype);
    let eb = dtype.size() as u64;
    let st = strides(&shape, &layout).ok_or_else(|| bad("pad", "a stride overflows 64 bits; use less padding".into()))?;
    // A kernel steps by stride × element size in bytes: past i64 that wraps (to 0, for a stride
    // of 2⁶² f32 elements) even where the span stays small (the dimension has extent 1).
    if let Some((i, s)) = st.iter().enumerate().find(|(_, &s)| s.checked_mul(eb).is_none_or(|b| b > i64::MAX as u64)) {
        let dim = t.dim_name(i).map(|d| format!(" ({d})")).unwrap_or_default();
        return Err(bad("pad", format!("the stride of dimension {i}{dim} is {s} elements of {eb} bytes, past a 64-bit signed byte offset; use less padding")));
    }
    let span_bytes =
        span_elements(&shape, &st).and_then(|n| n.checked_mul(eb)).ok_or_else(|| bad("pad", "the tensor's span overflows 64 bits; use less padding".into()))?;
    if span_bytes > MAX_SPAN_BYTES {
        return Err(bad("pad", format!("tensor spans {span_bytes} bytes, more than {MAX_SPAN_BYTES}")));
    }
    let numel = shape.iter().try_fold(1u64, |a, &n| a.checked_mul(n)).ok_or_else(|| bad("shape", "the element count overflows 64 bits".into()))?;
    let offset = layout.offset_bytes as u64;
    let tail_bytes = match &t.capacity {
        None => 0,
        Some(e) => {
            let cap = env().size(e, u64::MAX, "capacity").map_err(|f| bad("capacity", format!("\"{e}\": {}", f.problem)))?;
            let cap_bytes = cap
                .checked_mul(eb)
                .filter(|&b| b <= MAX_SPAN_BYTES)
                .ok_or_else(|| bad("capacity", format!("\"{e}\" = {cap} elements, more than {MAX_SPAN_BYTES} bytes")))?;
            if cap_bytes < span_bytes {
                return Err(bad(
                    "capacity",
                    format!(
                        "\"{e}\" = {cap} elements, fewer than the tensor's {numel}: the contract must keep the tensor within its buffer (add a `requires`)"
                    ),
                ));
            }
            cap_bytes - span_bytes
        }
    };
    Ok(TensorPlan {
        name: t.name.clone(),
        index,
        role: t.role,
        dtype,
        dim_names: (0..t.rank()).map(|i| t.dim_name(i).map(str::to_string)).collect(),
        stride_residues: st.iter().map(|s| (s * eb) % VECTOR_ALIGN).collect(),
        strides: st,
        shape,
        elem_bytes: eb as u32,
        offset_bytes: offset,
        span_bytes,
        numel,
        base_residue: offset % VECTOR_ALIGN,
        init: t.init,
        layout,
        drawn: t.layout_is_drawn(),
        order_dependent: t.order_dependent,
        distinct: t.distinct,
        tail_bytes,
    })
}

/// Whether a derived tensor holds its values for this case: one length or prefix sum per entry,
/// a page table as wide as the longest sequence's pages, with pages enough in its range.
fn derived_fits(t: &crate::core::manifest::TensorSpec, d: &Derive, tp: &TensorPlan, vars: &Vars, env: &Env) -> Result<(), String> {
    let list = &vars.lengths[d.lengths()];
    let count = list.len() as u64;
    match d {
        Derive::Lengths(l) | Derive::CuSeqlens(l) => {
            let want = count + matches!(d, Derive::CuSeqlens(_)) as u64;
            if tp.numel != want {
                return Err(format!("holds {} values, but {l} needs {want} here; its shape must follow {l}'s count", tp.numel));
            }
            let total: u64 = list.iter().sum();
            if !tp.dtype.holds_int(total as i64) {
                return Err(format!("{l} sums to {total}, past what {} holds", tp.dtype));
            }
        }
        Derive::PageTable { lengths, page_size, pad } => {
            let page = env.int(page_size).map_err(|f| format!("page_size \"{page_size}\": {}", f.problem))?;
            if page < 1 {
                return Err(format!("page_size \"{page_size}\" is {page}; a page holds at least 1 token"));
            }
            let widest = list.iter().map(|l| l.div_ceil(page as u64)).max().unwrap_or(0);
            if tp.shape[0] != count || tp.shape[1] < widest {
                return Err(format!(
                    "is [{}, {}], but {lengths} needs [{count}, at least {widest}] (pages of {page}); shape it [count, \"cdiv({lengths}.max, {page_size})\"] or wider",
                    tp.shape[0], tp.shape[1]
                ));
            }
            if !tp.dtype.holds_int(*pad) {
                return Err(format!("pad {pad} does not fit {}", tp.dtype));
            }
            let [lo, hi] = t.range.as_ref().expect("the loader requires a page table's range");
            let (lo, hi) = match (env.int(lo), env.int(hi)) {
                (Ok(lo), Ok(hi)) => (lo, hi),
                _ => return Err(format!("its range [{lo}, {hi}] does not evaluate for this case")),
            };
            let needed = crate::core::manifest::lengths::pages(list, page as u64);
            if ((hi as i128 - lo as i128 + 1).max(0) as u128) < needed as u128 || !tp.dtype.holds_int(lo) || !tp.dtype.holds_int(hi) {
                return Err(format!(
                    "{lengths} occupies {needed} pages of {page}, more than its range [{lo}, {hi}] holds (or past {}); keep them apart with requires, e.g. \"num_pages >= {lengths}.pages({page_size})\"",
                    tp.dtype
                ));
            }
        }
    }
    Ok(())
}

/// Calls `f(linear, byte_offset)` for every logical element in row-major order. Offsets are
/// built incrementally: the innermost dimension is a plain loop, the outer ones an odometer.
pub fn for_each_offset(tp: &TensorPlan, mut f: impl FnMut(usize, usize)) {
    let rank = tp.rank();
    if tp.numel == 0 {
        return;
    }
    let eb = tp.elem_bytes as u64;
    let bytes: Vec<u64> = tp.strides.iter().map(|s| s * eb).collect();
    let (inner_n, inner_s) = (tp.shape[rank - 1], bytes[rank - 1]);
    let mut idx = vec![0u64; rank];
    let mut row = 0u64;
    let mut linear = 0usize;
    loop {
        let mut off = row;
        for _ in 0..inner_n {
            f(linear, off as usize);
            linear += 1;
            off += inner_s;
        }
        // Advance the odometer over the outer dimensions.
        let mut d = rank - 1;
        loop {
            if d == 0 {
                return;
            }
            d -= 1;
            idx[d] += 1;
            row += bytes[d];
            if idx[d] < tp.shape[d] {
                break;
            }
            row -= bytes[d] * idx[d];
            idx[d] = 0;
        }
    }
}

/// Refuses a case's scalar value its declared type cannot hold as written (a seed edited by
/// hand): a flag that is not `true`, `false`, 0 or 1, an integer with a fraction.
fn check_scalar_type(s: &crate::core::manifest::ScalarSpec, v: Scalar) -> Result<(), String> {
    use crate::core::manifest::ScalarType;
    match (s.ty, v) {
        (ScalarType::Bool, Scalar::Bool(_)) | (ScalarType::Bool, Scalar::Int(0 | 1)) => Ok(()),
        (ScalarType::Bool, other) => Err(format!("{other} is not a flag; use true or false")),
        (ScalarType::Int, Scalar::Float(x)) if x.fract() != 0.0 || !x.is_finite() => Err(format!("{x} is not an integer")),
        _ => Ok(()),
    }
}
