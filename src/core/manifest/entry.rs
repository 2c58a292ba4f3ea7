//! The entry point as a manifest writes it: an `extern "C"` name (`my_kernel`), or a C++ name
//! expression with placeholders (`ns::Kernel<{VEC}, {T}>`) that each build fills in.
//!
//! Placeholders: `{NAME}` for a param or define (its value in this build), `{T}` for the
//! case's element type as C spells it (`__half`, `__nv_bfloat16`, `float`), `{T_x}` for tensor
//! `x`'s element type. NVRTC instantiates the expression and lowers it to the cubin's symbol;
//! for nvcc builds and prebuilt modules the symbol is found by demangling the module's kernels
//! ([`same_name`]).

use std::collections::BTreeMap;

use crate::core::case::Dtype;

use super::{expr, TensorSpec};

/// Characters a name expression may hold besides identifiers' and placeholders' braces.
const EXPRESSION_PUNCTUATION: &str = ":<>, *&()-+";

/// Checks an entry's spelling: a C identifier, or a name expression of identifiers, `::`,
/// template brackets, literals and placeholders. The error is the problem, for the `entry` field.
pub fn check_spelling(entry: &str) -> Result<(), String> {
    if expr::is_identifier(entry) {
        return Ok(());
    }
    if entry.trim().is_empty() {
        return Err("empty; name the kernel (`my_kernel`, or a C++ name such as `ns::my_kernel<{VEC}, {T}>`)".into());
    }
    if let Some(c) = entry.chars().find(|c| !(c.is_ascii_alphanumeric() || c == &'_' || c == &'{' || c == &'}' || EXPRESSION_PUNCTUATION.contains(*c))) {
        return Err(format!("{entry:?} holds {c:?}: an entry is an `extern \"C\"` name or a C++ name expression (`ns::my_kernel<{{VEC}}, {{T}}>`)"));
    }
    let mut depth = 0i32;
    for c in entry.chars() {
        depth += match c {
            '{' => 1,
            '}' => -1,
            _ => 0,
        };
        if !(0..=1).contains(&depth) {
            return Err(format!("{entry:?}: unbalanced braces; a placeholder is `{{NAME}}`"));
        }
    }
    if depth != 0 {
        return Err(format!("{entry:?}: unbalanced braces; a placeholder is `{{NAME}}`"));
    }
    if let Some(p) = placeholders(entry).into_iter().find(|p| !expr::is_identifier(p)) {
        return Err(format!("{entry:?}: placeholder {{{p}}} is not a name; a placeholder is `{{NAME}}`"));
    }
    if !entry.trim_start().starts_with(|c: char| c.is_ascii_alphabetic() || c == '_' || c == ':') {
        return Err(format!("{entry:?} does not start with a name"));
    }
    Ok(())
}

/// The placeholders of an entry, in order (`["VEC", "T"]`).
pub fn placeholders(entry: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = entry;
    while let Some(open) = rest.find('{') {
        let Some(close) = rest[open..].find('}') else { break };
        out.push(&rest[open + 1..open + close]);
        rest = &rest[open + close + 1..];
    }
    out
}

/// Checks that every placeholder names a param, a define, `T` or `T_<tensor>`; the error names
/// the first that does not and what it may name.
pub fn check_placeholders(entry: &str, params: &BTreeMap<String, Vec<i64>>, defines: &BTreeMap<String, i64>, tensors: &[TensorSpec]) -> Result<(), String> {
    for p in placeholders(entry) {
        let known = p == "T" || params.contains_key(p) || defines.contains_key(p) || p.strip_prefix("T_").is_some_and(|t| tensors.iter().any(|x| x.name == t));
        if !known {
            let mut names: Vec<String> = vec!["T".into()];
            names.extend(tensors.iter().map(|t| format!("T_{}", t.name)));
            names.extend(params.keys().cloned());
            names.extend(defines.keys().cloned());
            return Err(format!("placeholder {{{p}}} names no param, define or type; it may be one of {}", names.join(", ")));
        }
    }
    Ok(())
}

/// The entry of one build: every placeholder replaced by its value. Placeholders were checked
/// at load, so an unknown one cannot occur; it is left as written.
pub fn instantiate(entry: &str, params: &BTreeMap<String, i64>, defines: &BTreeMap<String, i64>, dtype: Dtype, tensors: &[TensorSpec]) -> String {
    if !entry.contains('{') {
        return entry.to_string();
    }
    let mut out = String::with_capacity(entry.len());
    let mut rest = entry;
    while let Some(open) = rest.find('{') {
        let Some(close) = rest[open..].find('}').map(|c| open + c) else { break };
        out.push_str(&rest[..open]);
        let name = &rest[open + 1..close];
        let value = if name == "T" {
            Some(dtype.c_type().to_string())
        } else if let Some(t) = name.strip_prefix("T_").and_then(|t| tensors.iter().find(|x| x.name == t)) {
            Some(t.dtype.resolve(dtype).c_type().to_string())
        } else {
            params.get(name).or_else(|| defines.get(name)).map(i64::to_string)
        };
        match value {
            Some(v) => out.push_str(&v),
            None => out.push_str(&rest[open..=close]),
        }
        rest = &rest[close + 1..];
    }
    out.push_str(rest);
    out
}

/// Whether a demangled kernel name (`void ns::Kernel<4u, float>(float const*, int)`, or
/// without return type and parameters) is the one a name expression names: compared without
/// spaces, return type, parameter list, integer literal suffixes (`4u`, `8l`) and the casts
/// demanglers write before literals (`(unsigned int)4`).
pub fn same_name(demangled: &str, expression: &str) -> bool {
    normal_form(&strip_signature(demangled)) == normal_form(expression)
}

/// A demangled function name without its parameter list and return type.
fn strip_signature(demangled: &str) -> String {
    let mut depth = 0i32;
    let mut name_start = 0;
    let mut end = demangled.len();
    for (i, c) in demangled.char_indices() {
        match c {
            '<' => depth += 1,
            '>' => depth -= 1,
            '(' if depth == 0 => {
                end = i;
                break;
            }
            ' ' if depth == 0 => name_start = i + 1,
            _ => {}
        }
    }
    demangled[name_start..end].to_string()
}

fn normal_form(name: &str) -> String {
    let compact: String = name.chars().filter(|c| !c.is_whitespace()).collect();
    let compact = without_literal_casts(compact.trim_start_matches("::"));
    let compact = compact.as_str();
    // Integer literal suffixes: a digit run followed by u/l letters and then a delimiter.
    let bytes = compact.as_bytes();
    let mut out = String::with_capacity(compact.len());
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i] as char;
        out.push(c);
        let starts_number = c.is_ascii_digit() && (i == 0 || !(bytes[i - 1] as char).is_ascii_alphanumeric() && bytes[i - 1] != b'_');
        if starts_number {
            let mut j = i + 1;
            while j < bytes.len() && bytes[j].is_ascii_digit() {
                out.push(bytes[j] as char);
                j += 1;
            }
            let mut k = j;
            while k < bytes.len() && matches!(bytes[k], b'u' | b'U' | b'l' | b'L') {
                k += 1;
            }
            if k == bytes.len() || matches!(bytes[k], b',' | b'>' | b')') {
                i = k;
            } else {
                i = j;
            }
            continue;
        }
        i += 1;
    }
    out
}

/// `(unsignedint)4` → `4`: a parenthesised type name right before a number.
fn without_literal_casts(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(open) = rest.find('(') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let cast = after.find(')').filter(|&close| {
            let inside = &after[..close];
            !inside.is_empty()
                && inside.chars().all(|c| c.is_ascii_alphabetic() || c == '_')
                && after[close + 1..].starts_with(|c: char| c.is_ascii_digit() || c == '-')
        });
        match cast {
            Some(close) => rest = &after[close + 1..],
            None => {
                out.push('(');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// The base name of an entry (`rms_norm` of `cfx::rms_norm<{VEC}, {T}>`): what a list of a
/// module's functions is narrowed to.
pub fn base_name(entry: &str) -> &str {
    let head = entry.split('<').next().unwrap_or(entry);
    head.rsplit("::").next().unwrap_or(head).trim()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spelling_accepts_names_and_name_expressions_and_refuses_the_rest() {
        for ok in ["my_kernel", "ns::Kernel<{VEC}, {T}>", "Kernel<8, float>", "a::b::c", "k<{T_x}, -1>"] {
            assert!(check_spelling(ok).is_ok(), "{ok}");
        }
        for bad in ["", "k;rm", "k<{VEC>}", "k<{{VEC}}>", "<int>", "k\"x\""] {
            assert!(check_spelling(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn placeholders_are_filled_per_build() {
        let params = BTreeMap::from([("VEC".to_string(), 4i64)]);
        let defines = BTreeMap::from([("TILE".to_string(), 64i64)]);
        let e = "ns::Kernel<{VEC}, {T}, {TILE}>";
        assert_eq!(placeholders(e), vec!["VEC", "T", "TILE"]);
        assert_eq!(instantiate(e, &params, &defines, Dtype::Bf16, &[]), "ns::Kernel<4, __nv_bfloat16, 64>");
        assert_eq!(instantiate("plain", &params, &defines, Dtype::F32, &[]), "plain");
        let declared = BTreeMap::from([("VEC".to_string(), vec![1, 2, 4])]);
        assert!(check_placeholders(e, &declared, &defines, &[]).is_ok());
        let err = check_placeholders("k<{VECTOR}>", &declared, &defines, &[]).unwrap_err();
        assert!(err.contains("{VECTOR}") && err.contains("VEC"), "{err}");
    }

    #[test]
    fn demangled_names_match_their_expression() {
        assert!(same_name("void ns::Kernel<4u, float>(float const*, int)", "ns::Kernel<4, float>"));
        assert!(same_name("ns::Kernel<4u, __half>", "ns::Kernel<4,__half>"));
        assert!(same_name("void k<8l, 16ul>(int)", "k<8, 16>"));
        assert!(same_name("void plain(float*)", "plain"));
        assert!(!same_name("void ns::Kernel<8u, float>(float const*)", "ns::Kernel<4, float>"));
        assert!(!same_name("void ns::Kernel<4u, double>(double*)", "ns::Kernel<4, float>"));
        assert!(same_name("void f16x2<2u>(int)", "f16x2<2>"), "digits inside names are not literals");
        assert!(same_name("void cfx::rms_norm<(unsigned int)8, float, 128>(float*, int)", "cfx::rms_norm<8, float, 128>"));
        assert!(same_name("void k<(long)-1>(int)", "k<-1>"));
        assert_eq!(base_name("cfx::rms_norm<{VEC}, {T}>"), "rms_norm");
    }
}
