//! `cudafuzz case example|check|decode`: case files without a GPU.

use anyhow::{Context, Result};

use super::{chain, fail, load_seed, resolve_kernel, CaseCommand};
use crate::case::Case;
use crate::corpus::Seed;
use crate::exit;
use crate::generate::decode_case;
use crate::plan::{Contract, Plan};
use crate::registry;
use crate::report;

pub(super) fn case_command(c: CaseCommand) -> Result<i32> {
    match c {
        CaseCommand::Example { kernel } => {
            let mut case = Case::example(&kernel);
            if let Ok(m) = registry::resolve(&kernel) {
                case.params = m.default_params();
            }
            print!("{}", Seed::new(case).to_json());
            Ok(exit::OK)
        }
        CaseCommand::Check { file, kernel } => {
            let manifest = kernel.as_deref().map(resolve_kernel).transpose()?;
            let seed = load_seed(&file, manifest.as_ref())?;
            let case = &seed.case;
            let plan = Plan::new(case);
            print!("{}", report::plan_table(case, &plan));
            let manifest = match manifest {
                Some(m) => Some(m),
                None if !case.kernel.is_empty() => registry::resolve(&case.kernel).ok(),
                None => None,
            };
            match manifest {
                Some(m) => print!("{}", report::contract_lines(&m.name, &m.contract.check(case, &plan))),
                None => {
                    println!("kernel `{}` not found: no contract to check against (pass --kernel)", case.kernel);
                    print!("{}", report::contract_lines("any kernel", &Contract::anything().check(case, &plan)));
                }
            }
            Ok(exit::OK)
        }
        CaseCommand::Decode { file, kernel } => {
            let manifest = kernel.as_deref().map(resolve_kernel).transpose()?;
            let bytes = std::fs::read(&file).with_context(|| format!("{}: cannot read", file.display())).map_err(|e| fail(exit::USAGE, chain(e)))?;
            let ctx = manifest.as_ref().map(|m| m.decode_context()).unwrap_or_default();
            let case = decode_case(&mut arbitrary::Unstructured::new(&bytes), &ctx)
                .map_err(|e| fail(exit::USAGE, format!("{}: cannot decode: {e}", file.display())))?;
            print!("{}", Seed::new(case).to_json());
            Ok(exit::OK)
        }
    }
}
