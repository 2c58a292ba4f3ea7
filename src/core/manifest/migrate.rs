//! `cudafuzz manifest migrate`: a format-1 manifest (attention only: q, k, v, o of rank 4,
//! `[contract]` with head_dim and sequence ranges, `[[buffers]]`) rewritten as format 2.
//!
//! The attention conventions that format 1 built in become explicit declarations: the dims
//! `batch, heads_kv, heads_q, seq_q, seq_k, head_dim` (drawn in that order) with the ranges,
//! caps and boundary hints the old decoder used; `heads_q % heads_kv == 0` as a requirement and
//! `heads_q == heads_kv` as a contract relation where GQA was not declared; the scalars `causal`
//! and `scale`; the tensors q, k, v (inputs) and o (output, NaN sentinel) in BHSD order with the
//! contract's layout kind and alignment; each buffer as a tensor (a `role = "lse"` buffer as the
//! output the attention op's log-sum-exp is checked against); the reference `attention_fwd`;
//! and stride arguments `q.stride_s` as `q.stride(2)`. [`migrate`] returns the new text with
//! what it could not carry over ([`Migration::losses`]: unknown keys, values of the wrong type
//! that would otherwise widen to a default) and what it had to guess ([`Migration::guesses`]:
//! roles, shared dims, value classes); the CLI refuses a conversion with losses unless told
//! `--force`, prints every guess, and writes the text (never over an existing file).

use std::fmt::Write as _;

use thiserror::Error;

/// A converted manifest, what was lost on the way and what was guessed.
#[derive(Debug, Clone, PartialEq)]
pub struct Migration {
    /// The format-2 text.
    pub text: String,
    /// What the old file said that the new one does not: keys format 1 never had (dropped),
    /// values of the wrong type (replaced by defaults, often wider).
    pub losses: Vec<String>,
    /// What format 1 left unsaid and the conversion assumed, each with how to change it.
    pub guesses: Vec<String>,
}

/// Keys format 1 had, per table.
const TOP_KEYS: [&str; 11] = ["name", "description", "source", "entry", "fuzz", "options", "defines", "params", "contract", "launch", "buffers"];
const CONTRACT_KEYS: [&str; 10] = ["dtypes", "layouts", "head_dim", "head_dim_multiple", "seq_q", "seq_k", "min_align", "causal", "gqa", "max_element_offset"];
const LAUNCH_KEYS: [&str; 5] = ["grid", "block", "shared_bytes", "timeout_ms", "args"];
const BUFFER_KEYS: [&str; 6] = ["name", "count", "dtype", "init", "value", "role"];

/// Each key of `t` that format 1 did not have, as a loss naming it (`contract.foo`).
fn unknown_keys(t: &toml::Table, known: &[&str], prefix: &str, losses: &mut Vec<String>) {
    for k in t.keys().filter(|k| !known.contains(&k.as_str())) {
        losses.push(format!("`{prefix}{k}` is not a format-1 key: it would be dropped"));
    }
}

/// Each key of `t` whose value is not of the type format 1 read it as.
fn mistyped(t: &toml::Table, prefix: &str, losses: &mut Vec<String>) {
    let is_range = |v: &toml::Value| v.as_array().is_some_and(|a| a.len() == 2 && a.iter().all(|x| x.is_integer()));
    for (k, v) in t {
        let (ok, want, default) = match k.as_str() {
            "head_dim" | "seq_q" | "seq_k" => (is_range(v), "[lo, hi] of integers", "the range [1, 1048576]"),
            "head_dim_multiple" | "min_align" | "max_element_offset" => (v.is_integer(), "an integer", "no such constraint"),
            "causal" | "gqa" => (v.is_bool(), "true or false", "false"),
            "layouts" => (
                v.as_str().is_some_and(|l| ["contiguous", "inner_contiguous", "strided"].contains(&l)),
                "\"contiguous\", \"inner_contiguous\" or \"strided\"",
                "strided",
            ),
            "dtypes" => (v.as_array().is_some_and(|a| a.iter().all(|x| x.is_str())), "a list of type names", "[\"f16\", \"bf16\"]"),
            _ => continue,
        };
        if !ok {
            losses.push(format!("`{prefix}{k} = {v}` is not {want}: it would become {default}"));
        }
    }
}

/// A format-1 manifest that cannot be converted.
#[derive(Debug, Error)]
#[error("{0}")]
pub struct MigrateError(String);

/// The attention dims in the order the converted manifest draws them: (name, cap, hints).
const DIMS: [(&str, u64, &str); 6] = [
    ("batch", 3, ""),
    ("heads_kv", 4, ""),
    ("heads_q", 16, ""),
    ("seq_q", 1024, SEQ_HINTS),
    ("seq_k", 1024, SEQ_HINTS),
    ("head_dim", 256, "1, 2, 8, 16, 32, 40, 46, 59, 63, 64, 65, 72, 80, 96, 111, 127, 128, 160, 192, 256"),
];

/// Sequence lengths around common tile sizes and the shapes FlashAttention's own tests use.
const SEQ_HINTS: &str = "1, 2, 3, 15, 16, 17, 31, 32, 33, 63, 64, 65, 79, 80, 81, 113, 127, 128, 129, 203, 255, 256, 257, 511, 512, 513, 1023, 1024";

fn get<'a>(t: &'a toml::Table, key: &str) -> Option<&'a toml::Value> {
    t.get(key)
}

fn quote(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

fn range(c: &toml::Table, key: &str, default: [i64; 2]) -> [i64; 2] {
    c.get(key).and_then(|v| v.as_array()).and_then(|a| Some([a.first()?.as_integer()?, a.get(1)?.as_integer()?])).unwrap_or(default)
}

/// Converts the text of a format-1 manifest into format 2, saying what was lost and guessed.
pub fn migrate(old: &str) -> Result<Migration, MigrateError> {
    let t: toml::Table = toml::from_str(old).map_err(|e| MigrateError(format!("invalid toml: {}", crate::core::error::clip_lines(&e.to_string()))))?;
    if t.contains_key("format") {
        return Err(MigrateError("it already has a `format` key: it is not a format-1 manifest".into()));
    }
    let empty = toml::Table::new();
    let c = get(&t, "contract").and_then(|v| v.as_table()).unwrap_or(&empty);
    let mut losses = Vec::new();
    unknown_keys(&t, &TOP_KEYS, "", &mut losses);
    unknown_keys(c, &CONTRACT_KEYS, "contract.", &mut losses);
    mistyped(c, "contract.", &mut losses);
    if let Some(l) = get(&t, "launch").and_then(|v| v.as_table()) {
        unknown_keys(l, &LAUNCH_KEYS, "launch.", &mut losses);
    }
    for (i, b) in get(&t, "buffers").and_then(|v| v.as_array()).into_iter().flatten().enumerate() {
        if let Some(b) = b.as_table() {
            unknown_keys(b, &BUFFER_KEYS, &format!("buffers[{i}]."), &mut losses);
        }
    }
    let mut o = String::new();
    // The old file's opening comments describe the kernel: they stay on top.
    for line in old.lines().take_while(|l| l.trim_start().starts_with('#') || l.trim().is_empty()) {
        let _ = writeln!(o, "{line}");
    }
    let _ = writeln!(o, "# Converted from format 1 by `cudafuzz manifest migrate`: review it (kernels/README.md has the schema).");
    let _ = writeln!(o, "format = 2");
    for key in ["name", "description", "source", "entry"] {
        if let Some(v) = get(&t, key) {
            let _ = writeln!(o, "{key} = {v}");
        }
    }
    if let Some(v) = get(&t, "fuzz") {
        let _ = writeln!(o, "fuzz = {v}");
    }
    let _ = writeln!(o, "options = {}", get(&t, "options").cloned().unwrap_or(toml::Value::Array(Vec::new())));
    let _ = writeln!(o, "dtypes = {}", c.get("dtypes").cloned().unwrap_or(toml::Value::Array(vec!["f16".into(), "bf16".into()])));
    let _ = writeln!(o, "# Every case keeps these; GQA: heads_q / heads_kv query heads share one kv head.");
    let _ = writeln!(o, "requires = [\"heads_q % heads_kv == 0\"]");
    write_table(&mut o, "defines", get(&t, "defines"));
    write_table(&mut o, "params", get(&t, "params"));
    dims(&mut o, &t, c);
    scalars(&mut o, c);
    contract(&mut o, c);
    let lse = tensors(&mut o, &t, c)?;
    let _ = writeln!(o, "\n[reference]\nop = \"attention_fwd\"");
    if let Some(name) = lse.filter(|n| n != "lse") {
        let _ = writeln!(o, "bind = {{ lse = {} }}", quote(&name));
    }
    launch(&mut o, &t)?;
    Ok(Migration { text: o, losses, guesses: guesses(c) })
}

/// What every conversion assumes that format 1 did not say.
fn guesses(c: &toml::Table) -> Vec<String> {
    let mut g = vec![
        "o is a pure output, filled with NaN before each launch: if the kernel reads or accumulates into o, make it `role = \"inout\"` (drawn values)"
            .to_string(),
        "seq_q and seq_k are drawn independently: if the kernel takes one sequence length, add \"seq_k == seq_q\" to `requires`".to_string(),
        "q, k and v draw from the value classes normal, uniform, large, constant_rows: change `values` where the kernel's inputs differ".to_string(),
    ];
    if !c.contains_key("gqa") {
        g.push("no `gqa` key: heads_q == heads_kv is a contract relation; remove it from [contract] relations if the kernel groups query heads".into());
    }
    g
}

fn write_table(o: &mut String, name: &str, v: Option<&toml::Value>) {
    let _ = writeln!(o, "\n[{name}]");
    if let Some(table) = v.and_then(|v| v.as_table()) {
        for (k, v) in table {
            let _ = writeln!(o, "{k} = {v}");
        }
    }
}

fn dims(o: &mut String, t: &toml::Table, c: &toml::Table) {
    let tiles: Vec<String> =
        get(t, "params").and_then(|p| p.as_table()).map(|p| p.keys().filter(|k| k.starts_with("BLOCK")).map(|k| quote(k)).collect()).unwrap_or_default();
    let _ =
        writeln!(o, "\n# Dims are drawn in this order; hints are values to bias toward (a param named as a hint: each\n# of its values and one either side).");
    let _ = writeln!(o, "[dims]");
    for (name, cap, hints) in DIMS {
        let [lo, hi] = match name {
            "seq_q" | "seq_k" | "head_dim" => range(c, name, [1, 1 << 20]),
            _ => [1, 1 << 20],
        };
        let mut h: Vec<String> = hints.split(", ").filter(|s| !s.is_empty()).map(str::to_string).collect();
        if name.starts_with("seq") {
            h.extend(tiles.iter().cloned());
        }
        let mut line = format!("{name} = {{ range = [{lo}, {hi}], cap = {cap}");
        if name == "head_dim" {
            if let Some(m) = c.get("head_dim_multiple").and_then(|v| v.as_integer()).filter(|&m| m > 1) {
                line.push_str(&format!(", multiple = {m}"));
            }
        }
        if !h.is_empty() {
            line.push_str(&format!(", hints = [{}]", h.join(", ")));
        }
        let _ = writeln!(o, "{line} }}");
    }
}

fn scalars(o: &mut String, c: &toml::Table) {
    let causal = c.get("causal").and_then(|v| v.as_bool()).unwrap_or(false);
    let _ = writeln!(o, "\n[scalars]");
    if causal {
        let _ = writeln!(o, "causal = {{ type = \"bool\" }}");
    } else {
        let _ = writeln!(o, "causal = {{ type = \"bool\", choices = [false] }}");
    }
    // Format 1 drew the scale from these three values but accepted any: the range keeps that.
    let _ = writeln!(o, "scale = {{ type = \"f32\", choices = [\"1 / sqrt(head_dim)\", 1.0, 0.5], weights = [6, 1, 1], range = [-1e6, 1e6] }}");
}

fn contract(o: &mut String, c: &toml::Table) {
    let _ = writeln!(o, "\n[contract]");
    let gqa = c.get("gqa").and_then(|v| v.as_bool()).unwrap_or(false);
    let _ = writeln!(o, "relations = [{}]", if gqa { "" } else { "\"heads_q == heads_kv\"" });
    if let Some(m) = c.get("max_element_offset") {
        let _ = writeln!(o, "max_element_offset = {m}");
    }
}

/// Writes the tensors; returns the name of the buffer whose role was `lse`, if any.
fn tensors(o: &mut String, t: &toml::Table, c: &toml::Table) -> Result<Option<String>, MigrateError> {
    let layout = match c.get("layouts").and_then(|v| v.as_str()).unwrap_or("strided") {
        "contiguous" => "dense",
        "inner_contiguous" => "inner",
        _ => "strided",
    };
    let align = c.get("min_align").and_then(|v| v.as_integer()).filter(|&a| a > 1);
    let align = align.map(|a| format!("\nalign = {a}")).unwrap_or_default();
    for (name, heads, seq) in [("q", "heads_q", "seq_q"), ("k", "heads_kv", "seq_k"), ("v", "heads_kv", "seq_k"), ("o", "heads_q", "seq_q")] {
        let role = if name == "o" { "output" } else { "input" };
        let values = if name == "o" { String::new() } else { "\nvalues = [\"normal\", \"uniform\", \"large\", \"constant_rows\"]".into() };
        let _ = writeln!(o, "\n[[tensors]]\nname = \"{name}\"\nrole = \"{role}\"\nshape = [\"batch\", \"{heads}\", \"{seq}\", \"head_dim\"]\nlayout = \"{layout}\"{align}{values}");
    }
    let mut lse = None;
    for (i, b) in t.get("buffers").and_then(|v| v.as_array()).into_iter().flatten().enumerate() {
        let b = b.as_table().ok_or_else(|| MigrateError(format!("buffers[{i}] is not a table")))?;
        let field = |k: &str| b.get(k).and_then(|v| v.as_str()).map(str::to_string);
        let name = field("name").ok_or_else(|| MigrateError(format!("buffers[{i}] has no name")))?;
        let count = b.get("count").map(|v| v.as_str().map(str::to_string).unwrap_or_else(|| v.to_string())).unwrap_or_else(|| "1".into());
        let dtype = field("dtype").unwrap_or_else(|| "f32".into());
        let init = match field("init").as_deref() {
            Some("zero") => "\"zero\"".to_string(),
            Some("neg_inf") => "\"neg_inf\"".to_string(),
            Some("const") => format!("{{ const = {} }}", b.get("value").map(|v| v.to_string()).unwrap_or_else(|| "0.0".into())),
            _ => "\"uninit\"".to_string(),
        };
        let (role, shape) = if field("role").as_deref() == Some("lse") {
            lse = Some(name.clone());
            ("output", "[\"batch\", \"heads_q\", \"seq_q\"]".to_string())
        } else {
            ("scratch", format!("[{}]", quote(&count)))
        };
        let _ = writeln!(
            o,
            "\n[[tensors]]\nname = {}\nrole = \"{role}\"\nshape = {shape}\ndtype = {}\nlayout = \"fixed\"\ninit = {init}",
            quote(&name),
            quote(&dtype)
        );
    }
    Ok(lse)
}

fn launch(o: &mut String, t: &toml::Table) -> Result<(), MigrateError> {
    let l = t.get("launch").and_then(|v| v.as_table()).ok_or_else(|| MigrateError("no [launch] section".into()))?;
    let _ = writeln!(o, "\n[launch]");
    for key in ["grid", "block", "shared_bytes", "timeout_ms"] {
        if let Some(v) = l.get(key) {
            let _ = writeln!(o, "{key} = {v}");
        }
    }
    let args = l.get("args").and_then(|v| v.as_array()).ok_or_else(|| MigrateError("[launch] has no args".into()))?;
    let _ = writeln!(o, "args = [");
    let mut line = String::new();
    for a in args {
        let a = a.as_table().ok_or_else(|| MigrateError(format!("argument {a} is not a table")))?;
        let (ty, v) = a.iter().next().ok_or_else(|| MigrateError("an empty argument table".into()))?;
        let text = v.as_str().map(str::to_string).unwrap_or_else(|| v.to_string());
        let item = format!("{{ {ty} = {} }},", quote(&strides(&text)));
        if !line.is_empty() && line.len() + item.len() > 96 {
            let _ = writeln!(o, "  {}", line.trim_end());
            line.clear();
        }
        line.push_str(&item);
        line.push(' ');
    }
    if !line.is_empty() {
        let _ = writeln!(o, "  {}", line.trim_end());
    }
    let _ = writeln!(o, "]");
    Ok(())
}

/// `q.stride_b` → `q.stride(0)` (and h, s, d → 1, 2, 3) in an expression.
fn strides(expr: &str) -> String {
    let mut out = expr.to_string();
    for (letter, i) in [("b", 0), ("h", 1), ("s", 2), ("d", 3)] {
        for t in ["q", "k", "v", "o"] {
            let from = format!("{t}.stride_{letter}");
            let to = format!("{t}.stride({i})");
            // Only the whole name: `q.stride_s` but not a longer identifier that starts with it.
            let mut next = String::new();
            let mut rest = out.as_str();
            while let Some(p) = rest.find(&from) {
                let after = &rest[p + from.len()..];
                let whole = !after.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_');
                next.push_str(&rest[..p]);
                next.push_str(if whole { &to } else { &from });
                rest = after;
            }
            next.push_str(rest);
            out = next;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_keys_and_mistyped_values_are_losses_never_silent() {
        let v1 = r#"
name = "k"
source = "k.cu"
entry = "k_fwd"
accumulate = true
[contract]
head_dim = "64"
seq_q = [1, 512]
causal = "yes"
window = 128
[launch]
grid = [1, 1, 1]
block = [128, 1, 1]
stream = 2
args = [{ ptr = "q" }]
"#;
        let m = migrate(v1).unwrap();
        let all = m.losses.join("\n");
        assert_eq!(m.losses.len(), 5, "{all}");
        for needle in [
            "`accumulate`",
            "`contract.window`",
            "`launch.stream`",
            "`contract.head_dim = \"64\"` is not [lo, hi] of integers: it would become the range [1, 1048576]",
            "`contract.causal",
        ] {
            assert!(all.contains(needle), "{needle} in {all}");
        }
        assert!(m.guesses.iter().any(|g| g.contains("gqa")), "{:?}", m.guesses);
    }

    #[test]
    fn stride_names_become_indices() {
        assert_eq!(strides("q.stride_s * 2 + k.stride_d"), "q.stride(2) * 2 + k.stride(3)");
        assert_eq!(strides("q.stride_sx"), "q.stride_sx");
    }

    #[test]
    fn a_format_1_manifest_converts_to_one_that_loads() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("k.cu"), "").unwrap();
        let v1 = r#"
name = "k"
source = "k.cu"
entry = "k_fwd"
[params]
BLOCK_M = [64, 128]
[contract]
dtypes = ["f16"]
layouts = "inner_contiguous"
head_dim = [64, 128]
head_dim_multiple = 8
seq_q = [1, 512]
seq_k = [1, 512]
min_align = 16
causal = false
gqa = false
[launch]
grid = ["cdiv(seq_q, BLOCK_M)", "heads_q", "batch"]
block = [128, 1, 1]
args = [{ ptr = "q" }, { ptr = "k" }, { ptr = "v" }, { ptr = "o" }, { ptr = "lse" }, { i64 = "q.stride_s" }, { f32 = "scale" }, { i32 = "causal" }]
[[buffers]]
name = "lse"
count = "batch * heads_q * seq_q"
dtype = "f32"
init = "neg_inf"
role = "lse"
"#;
        let migration = migrate(v1).unwrap();
        assert!(migration.losses.is_empty(), "{:?}", migration.losses);
        assert!(
            migration.guesses.iter().any(|g| g.contains("seq_k == seq_q")) && migration.guesses.iter().any(|g| g.contains("inout")),
            "{:?}",
            migration.guesses
        );
        let v2 = migration.text;
        let path = dir.path().join("k.v2.toml");
        let m = crate::core::manifest::Manifest::from_toml(&path, &v2).unwrap_or_else(|e| panic!("{e}\n{v2}"));
        assert_eq!(m.dims.iter().map(|d| d.name.as_str()).collect::<Vec<_>>(), ["batch", "heads_kv", "heads_q", "seq_q", "seq_k", "head_dim"]);
        assert_eq!(m.dim("head_dim").unwrap().multiple, 8);
        assert_eq!(m.contract.relations, vec!["heads_q == heads_kv"]);
        assert_eq!(m.tensor("q").unwrap().align, 16);
        assert_eq!(m.tensor("lse").unwrap().role, crate::core::manifest::Role::Output);
        assert!(matches!(m.launch.args[5], crate::core::manifest::ArgSpec::I64(ref e) if e == "q.stride(2)"));
        let old = crate::core::manifest::Manifest::from_toml(&dir.path().join("k.toml"), v1).unwrap_err();
        assert!(old.to_string().contains("cudafuzz manifest migrate"), "{old}");
    }
}
