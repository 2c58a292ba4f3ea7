//! One compute-sanitizer tool: a plain value that options, cases' run switches and findings
//! carry, so every layer can name a tool without depending on the code that runs it
//! ([`crate::run::sanitizer`]).

use std::fmt;

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// A tool list that does not parse.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ToolListError {
    /// A name that is not a tool.
    #[error("unknown sanitizer tool `{0}`: expected memcheck, racecheck, initcheck, synccheck or all")]
    Unknown(String),
    /// No tool at all.
    #[error("no sanitizer tool named: expected e.g. memcheck,racecheck or all")]
    Empty,
}

/// One compute-sanitizer tool.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Tool {
    /// Out-of-bounds and misaligned accesses, API errors.
    Memcheck,
    /// Shared-memory data races.
    Racecheck,
    /// Reads of uninitialised global memory.
    Initcheck,
    /// Invalid barrier use.
    Synccheck,
}

impl Tool {
    /// Every tool, in the order `all` runs them.
    pub const ALL: [Tool; 4] = [Tool::Memcheck, Tool::Racecheck, Tool::Initcheck, Tool::Synccheck];

    /// The name compute-sanitizer's `--tool` takes.
    pub fn name(self) -> &'static str {
        match self {
            Tool::Memcheck => "memcheck",
            Tool::Racecheck => "racecheck",
            Tool::Initcheck => "initcheck",
            Tool::Synccheck => "synccheck",
        }
    }

    /// The tool behind a sanitizer oracle (`None` for the native oracles).
    pub fn of(oracle: crate::core::finding::Oracle) -> Option<Tool> {
        use crate::core::finding::Oracle;
        match oracle {
            Oracle::Memcheck => Some(Tool::Memcheck),
            Oracle::Racecheck => Some(Tool::Racecheck),
            Oracle::Initcheck => Some(Tool::Initcheck),
            Oracle::Synccheck => Some(Tool::Synccheck),
            _ => None,
        }
    }

    /// Parses `memcheck,racecheck` or `all`.
    pub fn parse_list(s: &str) -> Result<Vec<Tool>, ToolListError> {
        if s.trim() == "all" {
            return Ok(Tool::ALL.to_vec());
        }
        let mut out = Vec::new();
        for name in s.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            let tool = Tool::ALL.into_iter().find(|t| t.name() == name).ok_or_else(|| ToolListError::Unknown(name.to_string()))?;
            if !out.contains(&tool) {
                out.push(tool);
            }
        }
        if out.is_empty() {
            return Err(ToolListError::Empty);
        }
        Ok(out)
    }
}

impl fmt::Display for Tool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Tools as an option names them: `memcheck,racecheck` or `all`, parsed once where the option
/// is read (`--sanitize`, the gate's passes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolList(pub Vec<Tool>);

impl std::str::FromStr for ToolList {
    type Err = ToolListError;

    fn from_str(s: &str) -> Result<ToolList, ToolListError> {
        Tool::parse_list(s).map(ToolList)
    }
}

impl fmt::Display for ToolList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.0.iter().map(|t| t.name()).collect();
        f.write_str(&names.join(","))
    }
}

/// What `--escalate` asks for: re-run each new finding's case under these tools in order, or
/// not at all (`none`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Escalate {
    /// New findings stay native.
    Off,
    /// The tools, in the order they are tried.
    Tools(ToolList),
}

impl std::str::FromStr for Escalate {
    type Err = ToolListError;

    fn from_str(s: &str) -> Result<Escalate, ToolListError> {
        if s.trim() == "none" {
            return Ok(Escalate::Off);
        }
        s.parse().map(Escalate::Tools)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_lists_and_escalations_parse_once() {
        assert_eq!("memcheck, racecheck".parse::<ToolList>().unwrap().0, [Tool::Memcheck, Tool::Racecheck]);
        assert_eq!("all".parse::<ToolList>().unwrap().to_string(), "memcheck,racecheck,initcheck,synccheck");
        assert_eq!("none".parse::<Escalate>().unwrap(), Escalate::Off);
        assert_eq!("memcheck".parse::<Escalate>().unwrap(), Escalate::Tools(ToolList(vec![Tool::Memcheck])));
        assert_eq!("nonsense".parse::<Escalate>().unwrap_err(), ToolListError::Unknown("nonsense".into()));
        assert_eq!(",".parse::<ToolList>().unwrap_err(), ToolListError::Empty);
    }
}
