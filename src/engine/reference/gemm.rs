//! The built-in op `gemm` ([`GemmOp`]): `c = alpha · op(a) · op(b) + beta · c₀`, its geometry
//! ([`Gemm`], read from the tensors and scalars a manifest binds), its fp64 gold and
//! same-precision baseline ([`forward`], on the GPU `kernels/reference/gemm_f64`), and the
//! tolerance ([`dot_tolerance`]) that judges a kernel's `c`.
//!
//! # Semantics
//!
//! * `a` is the matrix as stored, in its shape's own index order: `[m, k]`, or `[k, m]` when
//!   `trans_a` is set (then `op(a) = aᵀ`); likewise `b` is `[k, n]`, or `[n, k]` with
//!   `trans_b`; `c` is `[m, n]`. Memory order is the case's strides, so a row-major operand with
//!   leading dimension `lda` is `a.stride(0) = lda`, and a column-major one is either the
//!   transposed shape with `trans_a` (a BLAS-style kernel's `transA`) or strides `(1, lda)`.
//! * `alpha` is needed; `beta`, `trans_a` and `trans_b` are optional (absent: no `c₀` term, not
//!   transposed). With `beta` bound, `c` is read and written (in-out); **`beta == 0` never reads
//!   `c₀`** (BLAS semantics: NaN in `c₀` must not reach the result).
//! * **Gold**: `Σₖ` in f64, sequential from `+0`, then `alpha · acc + beta · c₀` in f64.
//! * **Baseline**, what a real kernel computes: inputs as stored in the case's type, products and
//!   sums in f32 (sequential in `k`, no FMA), `alpha · acc + beta · c₀` in f32, the result
//!   rounded to the output's type.
//!
//! # Tolerance: a condition-derived bound
//!
//! A kernel accumulates in its own order (tiles, split-K, FMA), so the baseline's error is not a
//! bound on a correct kernel's: with one output element, the baseline may happen to be nearly
//! exact while another order is not. What holds for every order is the a priori bound of
//! floating-point dot products (Higham, *Accuracy and Stability of Numerical Algorithms*, §3.1):
//! `|ĉ − c| ≤ γₙ · cond`, `γₙ = n·u / (1 − n·u)` with `u` f32's unit roundoff, `n = k + 2` (the
//! sum, the `alpha` multiply, the `beta` term), and `cond = |alpha| Σₖ |a||b| + |beta| |c₀|`; the
//! final rounding into the output type adds `u_out · |c|`. So the floor of the FlashAttention-form
//! rule `2 · err_lowp + floor` is that bound's largest value over the output plus
//! `4 · u_out · max(1, max |c|)` (the rounding, with an absolute part for underflow into
//! subnormals); a correct fp32-accumulating kernel can never exceed it, and the planted bugs this
//! op's mutants carry (stale tiles, wrong rows, NaN reads) give errors of whole products, far
//! above it.

use crate::core::case::{Dtype, Scalar};
use crate::core::manifest::BuiltinOp;
use crate::engine::data::round_to;

use super::BindingError;
use super::{baseline_tolerance, peak, readable, Bound, GpuOutput, GpuReference, OpCase, OpReference, OpValues, RoleInputs, RoleValues, Rule, Tolerance};

/// The op's geometry for one case.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Gemm {
    /// Rows of `c` and `op(a)`.
    pub m: u64,
    /// Columns of `c` and `op(b)`.
    pub n: u64,
    /// The reduction length.
    pub k: u64,
    /// `a` is stored `[k, m]`.
    pub trans_a: bool,
    /// `b` is stored `[n, k]`.
    pub trans_b: bool,
    /// Scale of the product, as the kernel receives it (f32).
    pub alpha: f32,
    /// Scale of `c₀`, as the kernel receives it; 0 when unbound (no `c₀` term).
    pub beta: f32,
    /// The output's element type.
    pub dtype: Dtype,
}

impl Gemm {
    /// Whether `c₀` is read: `beta` bound and nonzero.
    pub fn reads_c(&self) -> bool {
        self.beta != 0.0
    }

    /// The geometry of an op case (the dims and scalars of `gemm_f64`'s manifest).
    pub fn from_case(c: &OpCase) -> Gemm {
        let flag = |name: &str| c.scalar(name) != 0.0;
        Gemm {
            m: c.dim("m"),
            n: c.dim("n"),
            k: c.dim("k"),
            trans_a: flag("trans_a"),
            trans_b: flag("trans_b"),
            alpha: c.scalar("alpha") as f32,
            beta: c.scalar("beta") as f32,
            dtype: c.dtype,
        }
    }

    /// The op case of this geometry.
    pub fn to_case(&self) -> OpCase {
        let dims = [("m", self.m), ("n", self.n), ("k", self.k)].map(|(k, v)| (k.to_string(), v)).into();
        let scalars = [
            ("alpha", Scalar::Float(self.alpha as f64)),
            ("beta", Scalar::Float(self.beta as f64)),
            ("trans_a", Scalar::Bool(self.trans_a)),
            ("trans_b", Scalar::Bool(self.trans_b)),
        ]
        .map(|(k, v)| (k.to_string(), v))
        .into();
        OpCase { dims, scalars, dtype: self.dtype }
    }
}

/// The geometry of a planned case from the bound tensors (`a`, `b`, `c`) and scalars (`alpha`;
/// optional `beta`, `trans_a`, `trans_b`); a message when a binding is missing, the shapes do
/// not agree (`op(a)` `[m, k]`, `op(b)` `[k, n]`, `c` `[m, n]`), or `c₀` is read (`beta != 0`)
/// but not drawn.
pub fn geometry(bd: &Bound<'_>) -> Result<Gemm, BindingError> {
    let (a, b, c) = (bd.need("a")?, bd.need("b")?, bd.need("c")?);
    let flag = |role: &str| bd.scalar(role).is_some_and(|v| v != 0.0);
    let (trans_a, trans_b) = (flag("trans_a"), flag("trans_b"));
    let (m, n) = (c.shape[0], c.shape[1]);
    let (am, k) = if trans_a { (a.shape[1], a.shape[0]) } else { (a.shape[0], a.shape[1]) };
    let (bk, bn) = if trans_b { (b.shape[1], b.shape[0]) } else { (b.shape[0], b.shape[1]) };
    if am != m || bn != n || bk != k {
        return Err(BindingError::Shape(format!(
            "gemm needs op(a) [m, k], op(b) [k, n] and c [m, n]; a {:?}, b {:?}, c {:?} (trans_a {trans_a}, trans_b {trans_b})",
            a.shape, b.shape, c.shape
        )));
    }
    let alpha = bd.scalar("alpha").ok_or_else(|| BindingError::NoScalar { role: "alpha".into() })? as f32;
    let beta = bd.scalar("beta").unwrap_or(0.0) as f32;
    let g = Gemm { m, n, k, trans_a, trans_b, alpha, beta, dtype: c.dtype };
    if g.reads_c() {
        readable(bd, "c")?;
    }
    Ok(g)
}

/// The op's inputs in logical order (each tensor's own shape, row-major).
#[derive(Clone, Copy, Debug)]
pub struct GemmInputs<'a> {
    /// `a` as stored.
    pub a: &'a [f64],
    /// `b` as stored.
    pub b: &'a [f64],
    /// `c`'s initial contents; needed only when [`Gemm::reads_c`].
    pub c0: Option<&'a [f64]>,
}

/// Gold, baseline (rounded to the output type) and condition (per element
/// `|alpha| Σₖ |a||b| + |beta| |c₀|`) of a case, `[m, n]` row-major. Panics when the inputs do
/// not match the geometry.
pub fn forward(g: &Gemm, x: &GemmInputs<'_>) -> RoleValues {
    let (m, n, k) = (g.m as usize, g.n as usize, g.k as usize);
    assert_eq!(x.a.len(), m * k, "a does not match the geometry");
    assert_eq!(x.b.len(), k * n, "b does not match the geometry");
    let c0 = if g.reads_c() { Some(x.c0.expect("beta != 0 reads c")) } else { None };
    // op(a) row-major [m, k] and op(b) column-major (each column contiguous), so every dot
    // product runs over two contiguous slices.
    let a_rows: Vec<f64> = (0..m * k).map(|i| if g.trans_a { x.a[(i % k) * m + i / k] } else { x.a[i] }).collect();
    let b_cols: Vec<f64> = (0..n * k).map(|i| if g.trans_b { x.b[i] } else { x.b[(i % k) * n + i / k] }).collect();
    let (alpha, beta) = (g.alpha, g.beta);
    let mut out = RoleValues { gold: vec![0.0; m * n], baseline: vec![0.0; m * n], cond: vec![0.0; m * n] };
    for i in 0..m {
        let ar = &a_rows[i * k..(i + 1) * k];
        for j in 0..n {
            let bc = &b_cols[j * k..(j + 1) * k];
            let (mut acc64, mut acc32, mut abs) = (0.0f64, 0.0f32, 0.0f64);
            for (&p, &q) in ar.iter().zip(bc) {
                acc64 += p * q;
                acc32 += p as f32 * q as f32;
                abs += (p * q).abs();
            }
            let o = i * n + j;
            let (mut gold, mut low, mut cond) = (alpha as f64 * acc64, alpha * acc32, (alpha as f64).abs() * abs);
            if let Some(c0) = c0 {
                gold += beta as f64 * c0[o];
                low += beta * c0[o] as f32;
                cond += (beta as f64 * c0[o]).abs();
            }
            out.gold[o] = gold;
            out.baseline[o] = round_to(low as f64, g.dtype);
            out.cond[o] = cond;
        }
    }
    out
}

/// The tolerance of an output each of whose elements is a sum of `terms` products computed in
/// f32 and rounded to `dtype`: `bound = 2 · err_lowp + floor`, `err_lowp` the baseline's largest
/// error (finite pairs only: an element past the type's range is judged by the value oracle's
/// overflow rule), `floor = (1 + u_out) · γ_terms · max cond + 4 · u_out · max(1, max |gold|)`
/// (the module docs derive it).
pub fn dot_tolerance(dtype: Dtype, terms: u64, v: &RoleValues) -> Tolerance {
    let worst = v.cond.iter().filter(|x| x.is_finite()).fold(0.0f64, |a, &x| a.max(x));
    let nu = terms as f64 * Dtype::F32.unit_roundoff();
    let gamma = if nu < 0.5 { nu / (1.0 - nu) } else { f64::INFINITY };
    let u_out = dtype.unit_roundoff();
    let floor = (1.0 + u_out) * gamma * worst + 4.0 * u_out * peak(&v.gold).max(1.0);
    baseline_tolerance(&v.gold, &v.baseline, 2.0, floor)
}

/// The built-in op `gemm`: `c` judged by [`dot_tolerance`] over `k + 2` terms; on the GPU,
/// `gemm_f64` (which reads a dense copy of `c`'s initial contents: the kernel writes `c`).
#[derive(Clone, Copy, Debug, Default)]
pub struct GemmOp;

impl OpReference for GemmOp {
    fn op(&self) -> BuiltinOp {
        BuiltinOp::Gemm
    }

    fn case(&self, b: &Bound<'_>) -> Result<OpCase, BindingError> {
        geometry(b).map(|g| g.to_case())
    }

    fn cpu(&self, c: &OpCase, inputs: &RoleInputs<'_>) -> OpValues {
        let g = Gemm::from_case(c);
        let x = GemmInputs { a: inputs["a"], b: inputs["b"], c0: inputs.get("c").copied() };
        OpValues::from([("c".to_string(), forward(&g, &x))])
    }

    fn gpu(&self) -> GpuReference {
        GpuReference { manifest: "gemm_f64.toml", outputs: &[GpuOutput { role: "c", gold: "ref_c", baseline: "ref_c_lowp", cond: Some("ref_c_cond") }] }
    }

    fn rule(&self, _role: &str, c: &OpCase, values: &OpValues, _inputs: &RoleInputs<'_>) -> Rule {
        Rule::Bound(dot_tolerance(c.dtype, c.dim("k") + 2, &values["c"]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::reference::max_abs_diff;

    fn geo(m: u64, n: u64, k: u64) -> Gemm {
        Gemm { m, n, k, trans_a: false, trans_b: false, alpha: 1.0, beta: 0.0, dtype: Dtype::F32 }
    }

    #[test]
    fn two_by_two_by_hand() {
        // [1 2; 3 4] · [5 6; 7 8] = [19 22; 43 50]; alpha 2, beta -1 with c₀ = [1 1; 1 1].
        let mut g = geo(2, 2, 2);
        g.alpha = 2.0;
        g.beta = -1.0;
        let out = forward(&g, &GemmInputs { a: &[1.0, 2.0, 3.0, 4.0], b: &[5.0, 6.0, 7.0, 8.0], c0: Some(&[1.0; 4]) });
        assert_eq!(out.gold, vec![37.0, 43.0, 85.0, 99.0]);
        assert_eq!(out.baseline, out.gold);
        assert_eq!(out.cond, vec![39.0, 45.0, 87.0, 101.0]);
    }

    #[test]
    fn transposes_read_the_stored_matrix_transposed() {
        // op(a) = [1 2 3] (1 x 3) stored as a column [3, 1]; op(b) = [[1],[0],[2]] (3 x 1) stored
        // as a row [1, 3]: 1 + 0 + 6 = 7. Then a 2x3 · 3x2 with both transposed.
        let mut g = geo(1, 1, 3);
        g.trans_a = true;
        g.trans_b = true;
        let out = forward(&g, &GemmInputs { a: &[1.0, 2.0, 3.0], b: &[1.0, 0.0, 2.0], c0: None });
        assert_eq!(out.gold, vec![7.0]);
        let mut g = geo(2, 2, 3);
        g.trans_a = true;
        g.trans_b = true;
        // a stored [3, 2] = op(a)ᵀ with op(a) = [1 2 3; 4 5 6]; b stored [2, 3] = op(b)ᵀ with
        // op(b) = [1 0; 0 1; 1 1]: op(a)·op(b) = [4 5; 10 11].
        let a = [1.0, 4.0, 2.0, 5.0, 3.0, 6.0];
        let b = [1.0, 0.0, 1.0, 0.0, 1.0, 1.0];
        assert_eq!(forward(&g, &GemmInputs { a: &a, b: &b, c0: None }).gold, vec![4.0, 5.0, 10.0, 11.0]);
        // The same product untransposed.
        let g = geo(2, 2, 3);
        let a = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        let b = [1.0, 0.0, 0.0, 1.0, 1.0, 1.0];
        assert_eq!(forward(&g, &GemmInputs { a: &a, b: &b, c0: None }).gold, vec![4.0, 5.0, 10.0, 11.0]);
    }

    #[test]
    fn beta_zero_never_reads_nan_in_c() {
        let mut g = geo(1, 2, 1);
        g.beta = 0.0;
        let c0 = [f64::NAN, f64::INFINITY];
        let out = forward(&g, &GemmInputs { a: &[3.0], b: &[1.0, -2.0], c0: Some(&c0) });
        assert_eq!(out.gold, vec![3.0, -6.0]);
        assert_eq!(out.baseline, out.gold);
        // beta != 0 propagates them, as BLAS does.
        g.beta = 1.0;
        let out = forward(&g, &GemmInputs { a: &[3.0], b: &[1.0, -2.0], c0: Some(&c0) });
        assert!(out.gold[0].is_nan() && out.gold[1] == f64::INFINITY);
        let t = dot_tolerance(g.dtype, 3, &out);
        assert!(t.bound.is_finite(), "{t:?}");
    }

    #[test]
    fn baseline_rounds_to_the_dtype_and_accumulates_in_f32() {
        // 1 + 2⁻²⁴ + 2⁻²⁴: f32 sequential sums lose both small terms, f64 keeps them.
        let mut g = geo(1, 1, 3);
        let tiny = 2f64.powi(-24);
        let out = forward(&g, &GemmInputs { a: &[1.0, tiny, tiny], b: &[1.0, 1.0, 1.0], c0: None });
        assert_eq!(out.gold[0], 1.0 + 2.0 * tiny);
        assert_eq!(out.baseline[0], 1.0);
        // f16: 1/3 · 1 rounded to f16.
        g = geo(1, 1, 1);
        g.dtype = Dtype::F16;
        let third = round_to(1.0 / 3.0, Dtype::F16);
        let out = forward(&g, &GemmInputs { a: &[third], b: &[3.0], c0: None });
        assert_eq!(out.baseline[0], round_to(third * 3.0, Dtype::F16));
    }

    /// Deterministic pseudo-random values rounded to `dtype`.
    fn values(n: usize, seed: u64, scale: f64, dtype: Dtype) -> Vec<f64> {
        (0..n).map(|i| round_to(((((i as u64 + 1) * 2654435761 + seed * 40503) % 2001) as f64 / 1000.0 - 1.0) * scale, dtype)).collect()
    }

    /// A correct kernel in another summation order (blocked by 16, FMA) stays inside the bound,
    /// and so does the baseline itself, for long sums, large and tiny magnitudes and every type.
    #[test]
    fn other_orders_and_the_baseline_pass_the_bound() {
        for dtype in [Dtype::F16, Dtype::Bf16, Dtype::F32] {
            for (k, scale) in [(1usize, 1.0), (17, 1.0), (200, 1.0), (4099, 1.0), (513, 8.0), (300, 1e-3), (64, 2f64.powi(-20))] {
                let g = Gemm { m: 2, n: 3, k: k as u64, trans_a: false, trans_b: false, alpha: 0.5, beta: 2.0, dtype };
                let (a, b, c0) = (values(2 * k, 1, scale, dtype), values(k * 3, 2, scale, dtype), values(6, 3, 1.0, dtype));
                let out = forward(&g, &GemmInputs { a: &a, b: &b, c0: Some(&c0) });
                let tol = dot_tolerance(dtype, g.k + 2, &out);
                assert!(max_abs_diff(&out.baseline, &out.gold) <= tol.bound, "{dtype} k {k}: {tol:?}");
                let blocked: Vec<f64> = (0..6)
                    .map(|o| {
                        let (i, j) = (o / 3, o % 3);
                        let mut acc = 0.0f32;
                        for kb in (0..k).rev().step_by(16) {
                            let mut part = 0.0f32;
                            for kk in kb.saturating_sub(15)..=kb {
                                part = (a[i * k + kk] as f32).mul_add(b[kk * 3 + j] as f32, part);
                            }
                            acc += part;
                        }
                        round_to((0.5f32 * acc + 2.0 * c0[o] as f32) as f64, dtype)
                    })
                    .collect();
                assert!(max_abs_diff(&blocked, &out.gold) <= tol.bound, "{dtype} k {k}: blocked {:?} gold {:?} {tol:?}", blocked, out.gold);
                // A stale tile (one block of 16 products replaced by the next) is far outside
                // while k is moderate; at k in the thousands the bound reaches about one
                // product's size (the price of holding for every summation order), and in bf16
                // two output ulps are about as large.
                if k > 32 && k < 1024 && scale == 1.0 && dtype != Dtype::Bf16 {
                    let mut wrong = out.gold.clone();
                    wrong[0] += (0..16).map(|kk| a[kk] * (b[(kk + 16) * 3] - b[kk * 3])).sum::<f64>();
                    assert!(max_abs_diff(&wrong, &out.gold) > tol.bound, "{dtype} k {k}: {tol:?}");
                }
            }
        }
    }
}
