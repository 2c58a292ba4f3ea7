//! One seed per bug in `seeds/`: [`arrange`] puts each bug's smallest seed directly in the
//! seeds directory and its other seeds in `seeds/<bug-id>/examples/`.
//!
//! Seeds are moved, never rewritten or deleted: a move links the file under its new name (which
//! fails rather than replace anything; a numbered name is used when the name is taken) and
//! only then unlinks the old name. Only files already inside the seeds directory are moved.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use super::Bug;

/// Where a bug's examples go: `seeds/<id>/examples/`.
pub fn examples_dir(seeds: &Path, bug: &Bug) -> PathBuf {
    seeds.join(bug.id.as_str()).join("examples")
}

/// Moves seeds so that `seeds` holds each bug's smallest seed and `seeds/<id>/examples/` its
/// others. Returns each move as (old path, new path).
pub fn arrange(seeds: &Path, bugs: &[Bug]) -> std::io::Result<Vec<(PathBuf, PathBuf)>> {
    let mut moves = Vec::new();
    for bug in bugs {
        let wanted = bug.smallest.iter().map(|p| (p, seeds.to_path_buf())).chain(bug.examples.iter().map(|p| (p, examples_dir(seeds, bug))));
        for (path, dir) in wanted {
            if !path.starts_with(seeds) || path.parent() == Some(dir.as_path()) {
                continue;
            }
            let to = move_into(path, &dir)?;
            moves.push((path.clone(), to));
        }
    }
    Ok(moves)
}

/// Moves `path` into `dir` under its own name, or a numbered one if that is taken.
fn move_into(path: &Path, dir: &Path) -> std::io::Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("seed");
    let ext = path.extension().and_then(|s| s.to_str()).unwrap_or("json");
    for n in 1.. {
        let to = if n == 1 { dir.join(format!("{stem}.{ext}")) } else { dir.join(format!("{stem}-m{n}.{ext}")) };
        match std::fs::hard_link(path, &to) {
            Ok(()) => {
                std::fs::remove_file(path)?;
                return Ok(to);
            }
            Err(e) if e.kind() == ErrorKind::AlreadyExists => continue,
            // A file system without hard links: rename, after checking the name is free.
            Err(_) if !to.exists() => {
                std::fs::rename(path, &to)?;
                return Ok(to);
            }
            Err(e) => return Err(e),
        }
    }
    unreachable!("the loop above returns")
}
