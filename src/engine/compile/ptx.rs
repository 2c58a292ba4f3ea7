//! The compiled entry point's parameter list, read from PTX, against the manifest's argument
//! list: [`check_entry_params`].
//!
//! A manifest that lists one argument too few, or an `i32` where the kernel takes a `long long`,
//! compiles and launches: the driver copies the bytes the manifest supplies into the kernel's
//! parameter buffer, and the kernel reads garbage or shifted values. Nothing says so on a GPU,
//! so `cudafuzz build` compares the two. The cubin's parameter metadata has no stable format;
//! PTX (a `compute_XY` compile) spells every parameter as `.param .u64 name` or, for a struct
//! passed by value, `.param .align 8 .b8 name[24]`.

use super::{request_for, Arch, Compiler};
use crate::core::case::Dtype;
use crate::core::manifest::{ArgSpec, Manifest, ManifestError, ReferenceSpec};

/// The byte size of each parameter of `.entry <entry>(...)` in `ptx`, in order; `None` when the
/// PTX has no such entry.
pub fn entry_param_sizes(ptx: &str, entry: &str) -> Option<Vec<u32>> {
    let list = ptx.match_indices(".entry").find_map(|(i, _)| {
        let after = ptx[i + ".entry".len()..].trim_start().strip_prefix(entry)?;
        let list = after.trim_start().strip_prefix('(')?;
        Some(&list[..list.find(')')?])
    })?;
    if list.trim().is_empty() {
        return Some(Vec::new());
    }
    list.split(',').map(param_size).collect()
}

/// The size of one `.param` declaration: its type's width times its array length.
fn param_size(decl: &str) -> Option<u32> {
    let width: u32 = decl.split_whitespace().find_map(|t| match t {
        ".u8" | ".s8" | ".b8" | ".pred" => Some(1),
        ".u16" | ".s16" | ".b16" | ".f16" => Some(2),
        ".u32" | ".s32" | ".b32" | ".f32" => Some(4),
        ".u64" | ".s64" | ".b64" | ".f64" => Some(8),
        _ => None,
    })?;
    let count = match decl.rfind('[') {
        Some(i) => decl[i + 1..].trim_end().trim_end_matches(']').trim().parse::<u32>().ok()?,
        None => 1,
    };
    width.checked_mul(count)
}

/// Compares the manifest's argument list (`field`, e.g. `launch.args`) with the entry point's
/// parameter sizes: a count or size mismatch is the problem, giving both counts and the first
/// position whose size differs.
pub fn compare_args(args: &[ArgSpec], sizes: &[u32], entry: &str) -> Result<(), ArgMismatch> {
    let first = args.iter().zip(sizes).position(|(a, &s)| a.size_bytes() != s);
    if args.len() == sizes.len() && first.is_none() {
        return Ok(());
    }
    Err(ArgMismatch {
        entry: entry.to_string(),
        listed: args.len(),
        takes: sizes.len(),
        first_difference: first.map(|i| SizeDifference {
            position: i,
            listed_type: args[i].type_name(),
            listed_bytes: args[i].size_bytes(),
            kernel_bytes: sizes[i],
        }),
    })
}

/// A manifest's argument list that does not match its compiled entry point.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the manifest lists {listed} arguments, the compiled entry point `{entry}` takes {takes} parameters; {}{}", .first_difference.as_ref().map_or_else(|| format!("the first {} agree in size", listed.min(takes)), |d| d.to_string()), " (ptr, i64, u64, f64: 8 bytes; i32, u32, f32: 4); make the list match the kernel's signature in order")]
pub struct ArgMismatch {
    /// The entry point.
    pub entry: String,
    /// Arguments the manifest lists.
    pub listed: usize,
    /// Parameters the compiled entry point takes.
    pub takes: usize,
    /// The first position whose sizes differ, if any does.
    pub first_difference: Option<SizeDifference>,
}

/// One argument whose size differs from the kernel's parameter at its position.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SizeDifference {
    /// 0-based position in the list.
    pub position: usize,
    /// The manifest's type there (`i32`).
    pub listed_type: &'static str,
    /// Its size in bytes.
    pub listed_bytes: u32,
    /// The kernel parameter's size in bytes.
    pub kernel_bytes: u32,
}

impl std::fmt::Display for SizeDifference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the first whose size differs is position {}: the manifest's {} is {} bytes, the kernel's parameter {} bytes",
            self.position, self.listed_type, self.listed_bytes, self.kernel_bytes
        )
    }
}

/// Checks a manifest's argument list, and a reference kernel's, against their entry points'
/// PTX for every dtype (default params, the virtual architecture of `arch`). A source that does
/// not compile is left to the cubin build, which reports it with NVRTC's log.
pub fn check_entry_params(compiler: &Compiler, m: &Manifest, arch: Arch) -> Result<(), ManifestError> {
    let mut targets = vec![("launch.args", m.clone(), m.dtypes.clone())];
    if let ReferenceSpec::Kernel(k) = &m.reference {
        targets.push(("reference.args", crate::engine::reference::kernel_manifest(m, k, true), vec![Dtype::F64]));
        targets.push(("reference.args", crate::engine::reference::kernel_manifest(m, k, false), m.dtypes.clone()));
    }
    if matches!(m.build, super::Build::Prebuilt(_)) {
        // The module was built elsewhere: its source's PTX need not be the module's.
        targets.remove(0);
    }
    for (field, km, dtypes) in targets {
        for dtype in dtypes {
            let req = request_for(&km, &m.default_params(), dtype, arch, &Default::default());
            let Ok((ptx, symbol)) = compiler.ptx(&req) else { continue };
            let Some(sizes) = entry_param_sizes(&ptx, &symbol) else { continue };
            compare_args(&km.launch.args, &sizes, &req.entry).map_err(|problem| ManifestError::Invalid {
                path: m.path.clone(),
                field: field.into(),
                problem: format!("{problem} (compiled for {})", dtype.name()),
            })?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const PTX: &str = "//\n.version 8.5\n.target sm_80\n\n.visible .entry other(\n\t.param .u32 other_param_0\n)\n{}\n\
        .visible .entry silu_and_mul(\n\t.param .u64 .ptr .global .align 1 silu_and_mul_param_0,\n\t.param .u64 silu_and_mul_param_1,\n\
        \t.param .u32 silu_and_mul_param_2,\n\t.param .align 8 .b8 silu_and_mul_param_3[24],\n\t.param .f32 silu_and_mul_param_4\n)\n{\n ret;\n}\n\
        .visible .entry empty()\n{}\n";

    #[test]
    fn parameter_sizes_are_read_from_the_entry() {
        assert_eq!(entry_param_sizes(PTX, "silu_and_mul"), Some(vec![8, 8, 4, 24, 4]));
        assert_eq!(entry_param_sizes(PTX, "other"), Some(vec![4]));
        assert_eq!(entry_param_sizes(PTX, "empty"), Some(vec![]));
        assert_eq!(entry_param_sizes(PTX, "silu"), None, "a prefix of another entry's name");
        assert_eq!(entry_param_sizes(PTX, "missing"), None);
    }

    #[test]
    fn mismatches_give_both_counts_and_the_first_position() {
        let args = |v: &[&str]| -> Vec<ArgSpec> {
            v.iter()
                .map(|t| match *t {
                    "ptr" => ArgSpec::Ptr("x".into()),
                    "i32" => ArgSpec::I32("n".into()),
                    _ => ArgSpec::I64("n".into()),
                })
                .collect()
        };
        assert!(compare_args(&args(&["ptr", "i32", "i64"]), &[8, 4, 8], "k").is_ok());
        let e = compare_args(&args(&["ptr", "i32"]), &[8, 4, 8], "k").unwrap_err();
        assert_eq!((e.listed, e.takes, e.first_difference.clone()), (2, 3, None));
        let text = e.to_string();
        assert!(text.contains("lists 2 arguments") && text.contains("takes 3 parameters") && text.contains("the first 2 agree"), "{text}");
        let e = compare_args(&args(&["ptr", "i32", "i32"]), &[8, 4, 8], "k").unwrap_err();
        assert_eq!(e.first_difference.as_ref().map(|d| (d.position, d.listed_bytes, d.kernel_bytes)), Some((2, 4, 8)));
        let text = e.to_string();
        assert!(text.contains("position 2") && text.contains("i32 is 4 bytes") && text.contains("8 bytes"), "{text}");
    }
}
