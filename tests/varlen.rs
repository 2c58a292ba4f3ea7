//! Variable lengths (issue 28 step 4): a list-valued dim drawn with boundary batches, the index
//! tensors derived from it (cu_seqlens, page tables), its minimizing and contract probes, and
//! the manifest mistakes about it. Host-only: the GPU runs are in `ci/gpu-check.sh`.

mod common;

use arbitrary::Unstructured;
use cudafuzz::core::generate::{decode_case, DecodeContext};
use cudafuzz::core::manifest::Manifest;
use cudafuzz::core::plan::{check_contract, Plan};
use cudafuzz::engine::data;

/// Every decoded case of the paged kernel plans inside its contract; its cu_seqlens are the
/// prefix sums of its lengths and its block table gives each sequence its own pages (distinct
/// across the table, inside the cache) then the pad; the batches cover empty sequences, equal
/// lengths and page edges.
#[test]
fn decoded_varlen_cases_derive_consistent_index_tensors() {
    let m = common::manifest("kernels/varlen/paged_gather.toml");
    let ctx = DecodeContext::new(&m);
    let (mut empty, mut equal, mut edge, mut checked) = (0, 0, 0, 0);
    for seed in 0..150 {
        let raw = common::decoder_bytes(seed, 256);
        let case = decode_case(&mut Unstructured::new(&raw), &ctx).unwrap();
        let plan = Plan::new(&case, &m).unwrap_or_else(|e| panic!("{e}: {}", case.summary()));
        assert!(check_contract(&m, &case, &plan).is_inside(), "{}", case.summary());
        let lens = &case.lengths["seqlens"];
        assert_eq!(lens.len() as u64, case.dim("batch"));
        let page = plan.vars.params["PAGE"] as u64;
        let inputs = data::generate(&case, &plan, &m);
        let cu = inputs.get(m.tensor_index("cu_seqlens").unwrap()).unwrap();
        let sums: Vec<f64> = std::iter::once(0)
            .chain(lens.iter().scan(0, |a, &l| {
                *a += l;
                Some(*a)
            }))
            .map(|v| v as f64)
            .collect();
        assert_eq!(cu, sums.as_slice());
        let table = inputs.get(m.tensor_index("block_table").unwrap()).unwrap();
        let width = plan.tensor("block_table").unwrap().shape[1] as usize;
        let mut pages = Vec::new();
        for (b, &len) in lens.iter().enumerate() {
            let row = &table[b * width..(b + 1) * width];
            let used = len.div_ceil(page) as usize;
            assert!(row[..used].iter().all(|&p| p >= 0.0 && p < case.dim("num_pages") as f64), "{row:?}");
            assert!(row[used..].iter().all(|&p| p == -1.0), "past its pages, the pad: {row:?}");
            pages.extend_from_slice(&row[..used]);
        }
        let n = pages.len();
        pages.sort_by(f64::total_cmp);
        pages.dedup();
        assert_eq!(pages.len(), n, "every page of the table distinct");
        empty += lens.contains(&0) as u32;
        equal += (lens.len() > 1 && lens.iter().all(|&l| l == lens[0])) as u32;
        edge += lens.iter().any(|&l| l > 0 && (l % page <= 1 || l % page == page - 1)) as u32;
        checked += 1;
    }
    assert_eq!(checked, 150);
    assert!(empty > 10 && equal > 5 && edge > 20, "empty {empty}, equal {equal}, page edges {edge}");
}

/// A seed of a kernel with lengths stores them and replays them; one without writes no
/// `lengths` key at all (old seeds and new ones of other kernels read the same).
#[test]
fn lengths_round_trip_in_seeds_and_stay_out_of_others() {
    let m = common::manifest("kernels/varlen/varlen_mean.toml");
    let mut c = m.bind(cudafuzz::core::generate::example(&m));
    c.dims.insert("batch".into(), 3);
    c.lengths.insert("seqlens".into(), vec![0, 7, 2]);
    let text = serde_json::to_string(&c).unwrap();
    assert!(text.contains("\"lengths\":{\"seqlens\":[0,7,2]}"), "{text}");
    let back: cudafuzz::core::case::Case = serde_json::from_str(&text).unwrap();
    assert_eq!(back, c);
    let plan = Plan::new(&back, &m).unwrap();
    assert_eq!(plan.tensor("x").unwrap().shape, [9, c.dim("d")]);
    assert!(c.summary().contains("seqlens=[0,7,2]"), "{}", c.summary());
    let other = common::manifest("kernels/activation/silu_and_mul.toml");
    let plain = serde_json::to_string(&other.bind(cudafuzz::core::generate::example(&other))).unwrap();
    assert!(!plain.contains("lengths"), "{plain}");
    // A list of the wrong length, or past the range, is named.
    let mut bad = c.clone();
    bad.lengths.insert("seqlens".into(), vec![1, 2]);
    let e = Plan::new(&bad, &m).unwrap_err().to_string();
    assert!(e.contains("lengths.seqlens") && e.contains("holds 2 lengths, but batch = 3"), "{e}");
    let mut outside = c.clone();
    outside.lengths.insert("seqlens".into(), vec![1, 9000, 2]);
    let plan = Plan::new(&outside, &m).unwrap();
    let v = format!("{:?}", check_contract(&m, &outside, &plan));
    assert!(v.contains("seqlens[1] = 9000 is outside 0..=8192"), "{v}");
}

/// Minimizing offers the list at its low end and each sequence shrunk; contract probes a batch
/// of three with an empty sequence, a long one, one past the range (outside) and page edges.
#[test]
fn lengths_are_minimized_and_probed() {
    let m = common::manifest("kernels/varlen/paged_gather.toml");
    let mut c = m.bind(cudafuzz::core::generate::example(&m));
    c.dims.insert("batch".into(), 2);
    c.dims.insert("num_pages".into(), 40);
    c.lengths.insert("seqlens".into(), vec![33, 100]);
    Plan::new(&c, &m).unwrap();
    let lists: Vec<Vec<u64>> = cudafuzz::tools::minimize::candidates(&c, &m).iter().map(|n| n.lengths["seqlens"].clone()).collect();
    for want in [vec![1, 1], vec![16, 50], vec![0, 100], vec![33, 50]] {
        assert!(lists.contains(&want), "{want:?} not among {lists:?}");
    }
    let plan = cudafuzz::tools::contract::plan_probes(&m, 1).unwrap();
    let probes: Vec<_> = plan.probes.iter().filter(|p| p.family == cudafuzz::tools::contract::Family::Lengths("seqlens".into())).collect();
    let shown: Vec<String> = probes.iter().map(|p| p.value.to_string()).collect();
    for want in ["[200 0 200]", "[4096 1 1]", "[4097 1 1]", "[1 16 1]", "[1 17 1]"] {
        assert!(shown.iter().any(|s| s == want), "{want} not among {shown:?}");
    }
    let past = probes.iter().find(|p| p.value.to_string() == "[4097 1 1]").unwrap();
    assert!(!past.declared_inside);
    assert!(probes.iter().find(|p| p.value.to_string() == "[200 0 200]").unwrap().declared_inside);
    // The probe's case keeps the requires: the cache grew to hold the long sequence's pages.
    let long = &probes.iter().find(|p| p.value.to_string() == "[4096 1 1]").unwrap().cases[0];
    assert!(long.dim("num_pages") >= 4096 / 16 + 2, "{}", long.summary());
}

/// Mistakes about lengths and derived tensors name the field and the fix.
#[test]
fn lengths_mistakes_name_the_field_and_the_fix() {
    let cases: [(&str, &str, &str); 5] = [
        ("count = \"batch\"", "count = \"batches\"", "`batches` is not a dim"),
        ("derive = { cu_seqlens = \"seqlens\" }", "derive = { cu_seqlens = \"lens\" }", "`lens` is not a list of [lengths]"),
        ("derive = { cu_seqlens = \"seqlens\" }", "derive = { cu_seqlens = \"seqlens\", page_size = \"4\" }", "page_size and pad belong to page_table"),
        ("dtype = \"i32\"\nlayout = \"dense\"\nderive", "dtype = \"f32\"\nlayout = \"dense\"\nderive", "integer dtype"),
        ("shape = [\"batch + 1\"]", "shape = [\"batch + 1\", \"2\"]", "derived values of this kind need 1"),
    ];
    let dir = tempfile::tempdir().unwrap();
    for (i, (from, to, want)) in cases.iter().enumerate() {
        let path = common::copy_kernel(dir.path(), "varlen/varlen_mean.toml", &["varlen_mean.cu", "varlen_mean_ref.cu"], &format!("m{i}.toml"), &|s| {
            assert!(s.contains(from), "test bug: {from}");
            s.replacen(from, to, 1)
        });
        let e = Manifest::load(&path).unwrap_err().to_string();
        assert!(e.contains(want), "{to}: {e}");
    }
    // A page table needs the range its pages come from.
    let path = common::copy_kernel(dir.path(), "varlen/paged_gather.toml", &["paged_gather.cu", "paged_gather_ref.cu"], "pt.toml", &|s| {
        s.replacen("range = [0, \"num_pages - 1\"]\n", "", 1)
    });
    let e = Manifest::load(&path).unwrap_err().to_string();
    assert!(e.contains("block_table.range") && e.contains("draws its pages from its range"), "{e}");
}
