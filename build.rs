//! Builds data scheme v2's generator (kernels/harness/datagen.h) for the host, from the same
//! source NVRTC compiles for the GPU. No contraction into fused multiply-adds: the host and the
//! GPU must round every operation alike (engine/data/scheme2.rs).
fn main() {
    println!("cargo:rerun-if-changed=kernels/harness/datagen.h");
    println!("cargo:rerun-if-changed=kernels/harness/datagen_host.c");
    cc::Build::new()
        .file("kernels/harness/datagen_host.c")
        .flag("-ffp-contract=off")
        .flag_if_supported("-fno-fast-math")
        .flag_if_supported("-fexcess-precision=standard")
        .opt_level(2)
        .warnings(true)
        .compile("cf_datagen");
}
