//! Reading the emitted files back: the allocation images, arguments and judged outputs of a `.cu`
//! repro ([`parse_cu`]) and of a Python one ([`parse_python`]), and the checks of what they hold
//! against the library's [`Expected`].

use cudafuzz::core::manifest::ResolvedArg;
use cudafuzz::engine::reference::Rule;
use cudafuzz::tools::emit::{decode, Run};

use super::subjects::Expected;

pub fn section<'a>(text: &'a str, start: &str, end: &str) -> &'a str {
    let from = text.find(start).unwrap_or_else(|| panic!("no `{start}` in the emitted file")) + start.len();
    let len = text[from..].find(end).unwrap_or_else(|| panic!("no `{end}` after `{start}`"));
    &text[from..from + len]
}

pub fn num(tok: &str) -> u64 {
    let t = tok.trim().trim_end_matches("ull").trim_end_matches("ll").trim_end_matches('u');
    match t.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).unwrap_or_else(|_| panic!("bad hex {tok:?}")),
        None => t.parse::<i64>().map(|x| x as u64).unwrap_or_else(|_| panic!("bad number {tok:?}")),
    }
}

/// A decoded repro: allocation images and names, checksums, arguments `(kind, value)` of every
/// launch in order, and the judged outputs `(alloc, rule, gold_alloc, baseline_alloc, gold, bits)`.
pub struct Parsed {
    pub images: Vec<Vec<u8>>,
    pub names: Vec<String>,
    pub checksums: Vec<String>,
    pub args: Vec<(u64, u64)>,
    pub expects: Vec<ParsedExpect>,
}

/// One judged output as a repro declares it.
pub struct ParsedExpect {
    /// The kernel's allocation judged.
    pub alloc: u64,
    /// 0 bound, 1 relative.
    pub rule: u64,
    /// The reference runs' allocations of it (-1: the gold is embedded).
    pub gold_alloc: i64,
    pub baseline_alloc: i64,
    /// The embedded gold (empty for a reference kernel).
    pub gold: Vec<f64>,
    /// The rule's numbers, as f64 bits.
    pub bits: Vec<u64>,
}

pub fn doubles(bytes: &[u8]) -> Vec<f64> {
    bytes.chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().unwrap())).collect()
}

/// The numbers in a `{...}` list: `{1ull, 2ull}`.
pub fn braced(s: &str) -> Vec<u64> {
    s.trim().trim_start_matches('{').trim_end_matches('}').split(',').map(str::trim).filter(|t| !t.is_empty()).map(num).collect()
}

pub fn parse_cu_runs(text: &str) -> Vec<Run> {
    let mut runs = Vec::new();
    for line in section(text, "cfr_runs[] = {\n", "\n};").lines() {
        let l = line.trim();
        if l.starts_with("//") {
            continue;
        }
        let inner = l.trim_start_matches('{').trim_end_matches("},");
        let (head, pat) = inner.split_once(", {").unwrap();
        let (bytes, period) = head.split_once(", ").unwrap();
        let pattern: Vec<u8> = pat.trim_end_matches('}').split(", ").map(|b| num(b) as u8).collect();
        let (bytes, period) = (num(bytes), num(period) as usize);
        runs.push(if period == 0 { Run::Literal { bytes } } else { Run::Fill { pattern: pattern[..period].to_vec(), bytes } });
    }
    runs
}

pub fn parse_cu(text: &str) -> Parsed {
    let runs = parse_cu_runs(text);
    let blob: Vec<u8> = section(text, "cfr_blob[] = {\n", "\n};").split(',').map(str::trim).filter(|t| !t.is_empty()).map(|t| num(t) as u8).collect();
    let (mut images, mut names, mut checksums, mut numel) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for line in section(text, "cfr_allocs[CFR_N_ALLOCS] = {\n", "\n};").lines() {
        let body = line.trim().trim_start_matches('{');
        let head = &body[..body.find(", {").unwrap()];
        // name, program, tensor, role, dtype, sentinel, sentinel_bits, total, data_offset, span,
        // tail, uninit, first_run, n_runs, literal_offset, fnv, rank
        let f: Vec<&str> = head.split(", ").collect();
        let (total, first, n, lit) = (num(f[7]), num(f[12]) as usize, num(f[13]) as usize, num(f[14]) as usize);
        let img = decode(&runs[first..first + n], &blob[lit..]);
        assert_eq!(img.len() as u64, total);
        images.push(img);
        names.push(f[0].trim_matches('"').to_string());
        checksums.push(format!("{:016x}", num(f[15])));
        let shape = braced(&body[body.find(", {").unwrap() + 2..body.find("}, {").unwrap() + 1]);
        numel.push(shape.iter().take(num(f[16]) as usize).product::<u64>());
    }
    let mut args = Vec::new();
    for line in section(text, "cfr_args[] = {\n", "\n};").lines() {
        let b = braced(&line[..line.find("},").unwrap() + 1]);
        args.push((b[0], b[1]));
    }
    let mut expects = Vec::new();
    for line in section(text, "cfr_expects[] = {\n", "\n};").lines() {
        let body = line.trim().trim_start_matches('{');
        let (head, bits) = body.split_once(", {").unwrap();
        let f: Vec<i64> = head.split(", ").map(|t| num(t) as i64).collect();
        if f[0] < 0 {
            continue;
        }
        let bits = braced(&bits[..bits.find('}').unwrap()]);
        let off = f[4] as usize;
        let gold = if f[2] < 0 { doubles(&blob[off..off + 8 * numel[f[0] as usize] as usize]) } else { Vec::new() };
        expects.push(ParsedExpect { alloc: f[0] as u64, rule: f[1] as u64, gold_alloc: f[2], baseline_alloc: f[3], gold, bits });
    }
    Parsed { images, names, checksums, args, expects }
}

pub fn base64_decode(s: &str) -> Vec<u8> {
    let val = |c: u8| -> u32 {
        match c {
            b'A'..=b'Z' => (c - b'A') as u32,
            b'a'..=b'z' => (c - b'a') as u32 + 26,
            b'0'..=b'9' => (c - b'0') as u32 + 52,
            b'+' => 62,
            b'/' => 63,
            _ => panic!("bad base64 {c}"),
        }
    };
    let mut out = Vec::new();
    for chunk in s.as_bytes().chunks(4) {
        let pad = chunk.iter().filter(|&&c| c == b'=').count();
        let n = chunk.iter().filter(|&&c| c != b'=').fold(0u32, |acc, &c| acc << 6 | val(c)) << (6 * pad);
        let bytes = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        out.extend_from_slice(&bytes[..3 - pad]);
    }
    out
}

pub fn py_field<'a>(line: &'a str, key: &str) -> &'a str {
    let from = line.find(&format!(" {key}=")).or_else(|| line.find(&format!("({key}="))).unwrap_or_else(|| panic!("no {key} in {line}")) + key.len() + 2;
    let rest = &line[from..];
    &rest[..rest.find([',', ')']).unwrap_or(rest.len())]
}

pub fn parse_py_runs(line: &str) -> Vec<Run> {
    let runs_text = line.trim().trim_start_matches("runs=[(").trim_end_matches(")]),");
    let mut runs = Vec::new();
    for r in runs_text.split("), (").filter(|r| !r.is_empty() && *r != "runs=[]),") {
        let f: Vec<&str> = r.split(", ").collect();
        let period = num(f[0]) as usize;
        let bytes = num(f[2]);
        let pattern: Vec<u8> =
            f[1].trim_start_matches("b\"").trim_end_matches('"').split("\\x").filter(|h| !h.is_empty()).map(|h| u8::from_str_radix(h, 16).unwrap()).collect();
        assert_eq!(pattern.len(), period, "{r}");
        runs.push(if period == 0 { Run::Literal { bytes } } else { Run::Fill { pattern, bytes } });
    }
    runs
}

pub fn parse_python(text: &str) -> Parsed {
    let blob_text: String = section(text, "BLOB = (\n", "\n)").lines().map(|l| l.trim().trim_matches('"')).collect();
    let blob = base64_decode(&blob_text);
    let lines: Vec<&str> = section(text, "ALLOCS = [\n", "\n]\n").lines().collect();
    let (mut images, mut names, mut checksums, mut numel) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for pair in lines.chunks(2) {
        let head = pair[0];
        let (total, lit) = (num(py_field(head, "total")), num(py_field(head, "literal_offset")) as usize);
        let img = decode(&parse_py_runs(pair[1]), &blob[lit..]);
        assert_eq!(img.len() as u64, total);
        images.push(img);
        names.push(py_field(head, "name").trim_matches('"').to_string());
        checksums.push(py_field(head, "sha256").trim_matches('"').to_string());
        let shape = &head[head.find("shape=[").unwrap() + 7..];
        numel.push(shape[..shape.find(']').unwrap()].split(", ").filter(|t| !t.is_empty()).map(num).product::<u64>());
    }
    let mut args = Vec::new();
    for line in section(text, "ARGS = [", "\n]\n").lines().skip(1) {
        let body = line.trim().trim_start_matches('(');
        let f: Vec<&str> = body[..body.find(')').unwrap()].split(", ").collect();
        let kind = ["\"ptr\"", "\"i32\"", "\"u32\"", "\"i64\"", "\"u64\"", "\"f32\"", "\"f64\""].iter().position(|k| *k == f[1]).unwrap() as u64;
        let v = num(f[2]);
        args.push((kind, if kind == 1 { v as i64 as i32 as u32 as u64 } else { v }));
    }
    let mut expects = Vec::new();
    for line in section(text, "EXPECTS = [\n", "]\n").lines() {
        let field = |k: &str| num(py_field(line, k)) as i64;
        let bits: Vec<u64> = line[line.find("bits=[").unwrap() + 6..line.find("])").unwrap()].split(", ").map(num).collect();
        let (alloc, gold_alloc, off) = (field("alloc"), field("gold_alloc"), field("gold_offset") as usize);
        let gold = if gold_alloc < 0 { doubles(&blob[off..off + 8 * numel[alloc as usize] as usize]) } else { Vec::new() };
        expects.push(ParsedExpect { alloc: alloc as u64, rule: field("rule") as u64, gold_alloc, baseline_alloc: field("baseline_alloc"), gold, bits });
    }
    Parsed { images, names, checksums, args, expects }
}

/// The arguments as both files code them: `(kind, value)`, kind 0 pointer (the allocation's
/// index across programs), 1 i32, 2 u32, 3 i64, 4 u64, 5 f32, 6 f64 (bits).
pub fn expected_args(e: &Expected) -> Vec<(u64, u64)> {
    let mut base = 0u64;
    let mut out = Vec::new();
    for p in &e.programs {
        out.extend(p.args.iter().map(|a| match *a {
            ResolvedArg::Tensor(t) => (0, base + t as u64),
            ResolvedArg::I32(x) => (1, x as u32 as u64),
            ResolvedArg::U32(x) => (2, x as u64),
            ResolvedArg::I64(x) => (3, x as u64),
            ResolvedArg::U64(x) => (4, x),
            ResolvedArg::F32(x) => (5, x.to_bits() as u64),
            ResolvedArg::F64(x) => (6, x.to_bits()),
        }));
        base += p.plan.tensors.len() as u64;
    }
    out
}

pub fn assert_same_bits(a: &[f64], b: &[f64], what: &str) {
    assert_eq!(a.len(), b.len(), "{what}: length");
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert_eq!(x.to_bits(), y.to_bits(), "{what}[{i}]");
    }
}

/// The judged outputs both files must embed: host gold with its rule, or the reference runs'
/// allocations (the bits are checked by the stub tests, which see the bound).
pub fn check_expects(parsed: &Parsed, e: &Expected, what: &str) {
    if e.programs.len() > 1 {
        let n = e.kernel().plan.tensors.len() as i64;
        let want: Vec<(u64, i64, i64)> = e.judged().iter().map(|&i| (i as u64, n + i as i64, 2 * n + i as i64)).collect();
        let got: Vec<(u64, i64, i64)> = parsed.expects.iter().map(|x| (x.alloc, x.gold_alloc, x.baseline_alloc)).collect();
        assert_eq!(got, want, "{what}: reference outputs");
        return;
    }
    assert_eq!(parsed.expects.len(), e.gold.len(), "{what}: judged outputs");
    for (x, (index, gold, rule)) in parsed.expects.iter().zip(&e.gold) {
        assert_eq!(x.alloc, *index as u64, "{what}");
        assert_same_bits(&x.gold, gold, &format!("{what}: gold of tensor {index}"));
        let want = match rule {
            Rule::Bound(t) => (0, vec![t.factor, t.err_lowp, t.floor, t.bound]),
            Rule::Relative(r) => (1, vec![*r, 0.0, 0.0, 0.0]),
        };
        assert_eq!((x.rule, x.bits.clone()), (want.0, want.1.iter().map(|v| v.to_bits()).collect::<Vec<_>>()), "{what}: rule of tensor {index}");
    }
}
