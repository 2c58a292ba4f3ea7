//! Data scheme v2 (issue 30 step 1): the host's and the GPU's builds of one generator source
//! (`kernels/harness/datagen.h`) make the same bits. Host tests pin the scheme's properties
//! (old seeds keep v1, value classes reach what they promise); NVRTC builds the GPU side
//! without a GPU; on a GPU, about a million values per class and element type (and integers,
//! ranges, mixed classes) are compared bit for bit. Each test that needs NVRTC or a GPU skips
//! with a printed reason without one.

mod common;

use cudafuzz::core::case::{Case, DataScheme, ValueClass};
use cudafuzz::core::plan::Plan;
use cudafuzz::engine::data::scheme2::{self, DgTensor};
use cudafuzz::engine::data::{self, device::DeviceGenerator};

/// The tensors the cross-check draws: every class alone in every floating type, with rows of
/// 1, 7 and 4096 elements; mixed classes; a value range of one sign; integers in three ranges.
fn tensors() -> Vec<(String, DgTensor, bool)> {
    let mut out = Vec::new();
    let base = DgTensor { seed: 0x5eed_0000_0000_0001, row: 4096, ..Default::default() };
    // Bit k of the mask is the k-th class of ValueClass::ALL (scheme2's order).
    for (ci, class) in ValueClass::ALL.iter().enumerate() {
        for (dtype, name) in [(0, "f16"), (1, "bf16"), (2, "f32"), (3, "f64")] {
            let row = [1, 7, 4096][(ci + dtype as usize) % 3];
            out.push((format!("{class:?} {name} row {row}"), DgTensor { tensor: ci as u32, dtype, classes: 1 << ci, row, ..base }, false));
        }
    }
    out.push(("mixed f16".into(), DgTensor { tensor: 20, dtype: 0, classes: 0x1ff, ..base }, false));
    out.push(("mixed f32 in [0, 1]".into(), DgTensor { tensor: 21, dtype: 2, classes: 0x7f, has_range: 1, lo: 0.0, hi: 1.0, ..base }, false));
    for (k, (lo, hi)) in [(-1000, 1000), (0, 255), (i64::MIN / 2, i64::MAX / 2)].into_iter().enumerate() {
        out.push((format!("i64 in [{lo}, {hi}]"), DgTensor { tensor: 30 + k as u32, classes: 0b100001, ilo: lo, ihi: hi, ..base }, true));
    }
    out
}

/// Old seeds carry no scheme and replay v1; a case that says v2 draws from the counter-based
/// generator, which does not depend on the order elements are made in.
#[test]
fn seeds_record_their_scheme_and_v2_is_counter_based() {
    let m = common::manifest("kernels/activation/silu_and_mul.toml");
    let mut c: Case = m.bind(cudafuzz::core::generate::example(&m));
    c.dims.insert("tokens".into(), 5);
    c.dims.insert("d".into(), 33);
    c.data = DataScheme::V1;
    let text = serde_json::to_string(&c).unwrap();
    assert!(!text.contains("\"data\""), "v1 is written as older seeds are: {text}");
    c.data = DataScheme::V2;
    let text = serde_json::to_string(&c).unwrap();
    assert!(text.contains("\"data\":2"), "{text}");
    let back: Case = serde_json::from_str(&text).unwrap();
    assert_eq!(back.data, DataScheme::V2);
    let e = serde_json::from_str::<Case>(&text.replace("\"data\":2", "\"data\":7")).unwrap_err().to_string();
    assert!(e.contains("data scheme 7"), "{e}");

    let plan = Plan::new(&c, &m).unwrap();
    let v2 = data::generate(&c, &plan, &m);
    let mut old = c.clone();
    old.data = DataScheme::V1;
    let v1 = data::generate(&old, &plan, &m);
    let x = m.tensor_index("x").unwrap();
    assert_ne!(v1.get(x), v2.get(x), "the schemes differ");
    // Counter-based: any slice is the same elements, made alone.
    let tp = plan.tensor("x").unwrap();
    let t = scheme2::tensor_params(c.seed, tp, &tp.layout.values, None, None);
    let whole = scheme2::fill(&t, 0, 330, false);
    assert_eq!(scheme2::fill(&t, 100, 50, false), whole[100..150].to_vec());
}

/// What each class promises, on the host: normals within about 8.3 sigma with mean 0 and
/// variance 1, huge values past expf's overflow, tiny ones subnormal in f16, constant rows one
/// value per row, zeros of both signs, integers inside their range and covering it.
#[test]
fn v2_classes_keep_their_promises() {
    let n = 200_000;
    let t = |classes: u32, dtype: u32, row: u64| DgTensor { seed: 42, tensor: 3, dtype, classes, row, ..Default::default() };
    let normal = scheme2::fill(&t(1, 3, 1), 0, n, false);
    let mean = normal.iter().sum::<f64>() / n as f64;
    let var = normal.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n as f64;
    assert!(mean.abs() < 0.01 && (var - 1.0).abs() < 0.02 && normal.iter().all(|x| x.abs() < 8.5), "mean {mean}, var {var}");
    let huge = scheme2::fill(&t(1 << 4, 2, 1), 0, 1000, false);
    assert!(huge.iter().all(|x| x.abs() >= 64.0 && x.abs() < 32768.0) && huge.iter().any(|x| x.abs() > 88.8), "huge");
    let tiny = scheme2::fill(&t(1 << 3, 0, 1), 0, 1000, false);
    assert!(tiny.iter().any(|&x| x != 0.0 && x.abs() < 2f64.powi(-14)), "f16 subnormals");
    let rows = scheme2::fill(&t(1 << 6, 2, 16), 0, 1600, false);
    assert!(rows.chunks(16).all(|r| r.iter().all(|&x| x == r[0])) && rows.chunks(16).any(|r| r[0] != rows[0]), "constant rows");
    let zero = scheme2::fill(&t(1 << 5, 2, 1), 0, 100, false);
    assert!(zero.iter().all(|&x| x == 0.0) && zero.iter().any(|x| x.is_sign_negative()), "signed zeros");
    let ints = scheme2::fill(&DgTensor { ilo: -3, ihi: 4, ..t(1, 0, 1) }, 0, 1000, true);
    assert!(ints.iter().all(|&v| (-3.0..=4.0).contains(&v) && v.fract() == 0.0) && (-3..=4).all(|k| ints.contains(&(k as f64))), "ints");
}

/// NVRTC builds the GPU side (no GPU needed).
#[test]
fn the_gpu_generator_compiles() {
    common::harness_compiles("datagen.cu", "cf_dg_fill");
}

/// On a GPU: every value of every tensor above, host against device, bit for bit (about a
/// million per class and type).
#[test]
fn gpu_and_host_generators_agree_bit_for_bit() {
    if common::lacks_gpu(false) {
        return;
    }
    let gpu = cudafuzz::engine::gpu::Gpu::open(0).expect("open the GPU");
    let g = DeviceGenerator::load(&gpu).unwrap_or_else(|e| panic!("{e}"));
    let (mut total, mut summary) = (0usize, Vec::new());
    for (name, t, integer) in tensors() {
        let n = if integer { 1 << 20 } else { 1_000_003 };
        // Two slices: the start, and a stretch past 2^32 elements (the counter's high word).
        for first in [0u64, (1u64 << 32) - 17] {
            let host = scheme2::fill(&t, first, n, integer);
            let dev = g.fill(&t, first, n, integer).unwrap_or_else(|e| panic!("{name}: {e}"));
            if let Some(i) = (0..n).find(|&i| host[i].to_bits() != dev[i].to_bits()) {
                panic!("{name}, element {}: host {:e} ({:#x}), GPU {:e} ({:#x})", first + i as u64, host[i], host[i].to_bits(), dev[i], dev[i].to_bits());
            }
            total += n;
        }
        summary.push(name);
    }
    eprintln!("datagen: {total} values, {} tensors, host and GPU bit-identical", summary.len());
}

/// On a GPU: a case's arena filled on the device ([`DeviceArena::fill`]: canaries, gaps,
/// inputs, sentinels and constants) holds, byte for byte, what the host image uploads. Cases of
/// every shipped NVRTC kernel, and cases pushed past 2^31 elements, whose fill must stay cheap
/// (the bound: 50 ms each).
#[test]
fn the_device_fill_writes_the_host_image() {
    use cudafuzz::core::generate::{past_int32_variant, DecodeContext, PastInt32};
    use cudafuzz::engine::arena::{device::DeviceArena, HostImage};
    if common::lacks_gpu(false) {
        return;
    }
    let gpu = cudafuzz::engine::gpu::Gpu::open(0).expect("open the GPU");
    let g = DeviceGenerator::load(&gpu).unwrap_or_else(|e| panic!("{e}"));
    let mut staging = cudafuzz::engine::arena::staging::Staging::default();
    cudafuzz::engine::arena::device::pooled(true);
    let (mut cases, mut bytes, mut pushed, mut slowest) = (0usize, 0u64, 0usize, std::time::Duration::ZERO);
    for m in common::shipped() {
        let ctx = DecodeContext::new(&m);
        for (k, mut case) in common::v2_cases(&m, 0xf111, 24) {
            // Every sixth case pushed past 2^31 elements where the kernel has such a tensor.
            let is_pushed = k % 6 == 5;
            if is_pushed {
                let Some(t) = ctx.past_int32_tensors(PastInt32::WideStride).into_iter().next() else { continue };
                let Some(p) = past_int32_variant(&case, &m, &t, PastInt32::WideStride) else { continue };
                case = p;
            }
            let Ok(plan) = Plan::new(&case, &m) else { continue };
            let image = HostImage::build(&case, &plan, &data::generate(&case, &plan, &m));
            let recipes = data::recipes(&case, &plan, &m);
            let t0 = std::time::Instant::now();
            let arena = DeviceArena::fill(&image.layout, &plan, &recipes, &g).unwrap_or_else(|e| panic!("{}: {}: {e}", m.name, case.summary()));
            cudafuzz::engine::gpu::synchronize().unwrap_or_else(|e| panic!("{}: {}: {e}", m.name, case.summary()));
            let took = t0.elapsed();
            let after = arena.download(&image, &mut staging).unwrap();
            for tp in &plan.tensors {
                let i = tp.index;
                let a = &image.layout.allocs[i];
                let (ds, de) = (a.data_offset as usize, (a.data_offset + a.span_bytes) as usize);
                for r in &image.held[i] {
                    let r = r.start as usize..r.end as usize;
                    let pairs = after[i][r.clone()].iter().zip(&image.bytes[i][r.clone()]);
                    // An uninitialised span holds whatever the device had: only its redzones count.
                    let uninit = |b: usize| image.data_uninit[i] && (ds..de).contains(&b);
                    if let Some((b, (d, h))) = pairs.enumerate().map(|(k, p)| (r.start + k, p)).find(|&(b, (d, h))| d != h && !uninit(b)) {
                        panic!("{}: {}: tensor {}, byte {b} (data at {ds}..{de}): device {d:#04x}, host image {h:#04x}", m.name, case.summary(), tp.name);
                    }
                    bytes += r.len() as u64;
                }
            }
            cases += 1;
            if plan.reaches_past_int32() {
                pushed += 1;
                slowest = slowest.max(took);
            }
        }
    }
    eprintln!("device fill: {cases} cases ({pushed} past 2^31 elements), {bytes} bytes, identical to the host image; slowest pushed fill {slowest:?}");
    assert!(cases > 100 && pushed > 0, "{cases} cases, {pushed} pushed");
    assert!(slowest < std::time::Duration::from_millis(50), "a pushed case's fill took {slowest:?}");
}

/// The device path reads the drawn values back from the arena's bytes (they are exact in their
/// element types): for cases of every shipped kernel, what the host image holds reads back as
/// exactly what the generator drew, bit for bit (NaN included). No GPU needed: the host image
/// is the device fill's bytes (the test above).
#[test]
fn values_read_back_from_the_image_are_the_values_drawn() {
    use cudafuzz::engine::arena::HostImage;
    let mut checked = 0usize;
    for m in common::shipped() {
        for (_, case) in common::v2_cases(&m, 0xbac4, 8) {
            // Small cases only: the debug build of CI draws every value on one core.
            let Some(plan) = Plan::new(&case, &m).ok().filter(|p| p.tensors.iter().map(|t| t.numel).sum::<u64>() < 1 << 20 && !p.reaches_past_int32()) else {
                continue;
            };
            let drawn = data::generate(&case, &plan, &m);
            let image = HostImage::build(&case, &plan, &drawn);
            let back = data::values_of(data::recipes(&case, &plan, &m), &plan, |tp, _, _| data::read_strided(image.data(tp.index, &image.bytes[tp.index]), tp));
            for tp in &plan.tensors {
                let (a, b) = (drawn.get(tp.index).unwrap_or_default(), back.get(tp.index).unwrap_or_default());
                assert_eq!(a.len(), b.len(), "{}: {}", m.name, tp.name);
                if let Some(k) = (0..a.len()).find(|&k| a[k].to_bits() != b[k].to_bits()) {
                    panic!(
                        "{}: {}: {} element {k}: drawn {:e} ({:#x}), read back {:e} ({:#x})",
                        m.name,
                        case.summary(),
                        tp.name,
                        a[k],
                        a[k].to_bits(),
                        b[k],
                        b[k].to_bits()
                    );
                }
                checked += a.len();
            }
        }
    }
    eprintln!("{checked} drawn values read back bit for bit");
    assert!(checked > 100_000, "{checked}");
}
