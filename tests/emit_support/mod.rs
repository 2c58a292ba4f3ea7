//! What the emit tests share: their subjects, reading emitted files back, and running emitted
//! repros against a stub CUDA runtime or a fake driver.

pub mod parse;
pub mod stub;
pub mod subjects;
