//! Compiles the BPF programs with clang (CO-RE: no kernel headers). Without clang the crate
//! still builds, and the collector says at run time how to get it.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(numaio_bpf_object)");
    let src = "bpf/numaio.bpf.c";
    println!("cargo::rerun-if-changed={src}");
    println!("cargo::rerun-if-changed=bpf/kernel.h");
    println!("cargo::rerun-if-env-changed=NUMAIO_BPF_CLANG");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR is set by cargo"));
    let obj = out.join("numaio.bpf.o");
    let arch = match std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() {
        Ok("x86_64") => "x86",
        Ok("aarch64") => "arm64",
        other => {
            println!(
                "cargo::warning=numaio-bpf: no BPF programs for target arch {other:?}; the collector will be unavailable"
            );
            return;
        }
    };
    let clang = std::env::var("NUMAIO_BPF_CLANG").unwrap_or_else(|_| "clang".into());
    let status = Command::new(&clang)
        .args(["-O2", "-g", "-target", "bpf", "-Wall", "-Werror"])
        .arg(format!("-D__TARGET_ARCH_{arch}"))
        .args(["-Ibpf", "-c", src, "-o"])
        .arg(&obj)
        .status();
    match status {
        Ok(s) if s.success() => {
            // Debug info is only needed as BTF; DWARF would triple the binary's share.
            let _ = Command::new("llvm-strip").arg("-g").arg(&obj).status();
            println!("cargo::rustc-cfg=numaio_bpf_object");
        }
        Ok(s) => println!(
            "cargo::warning=numaio-bpf: {clang} failed to compile {src} ({s}): built without the eBPF collector; install clang and libbpf-dev and rebuild"
        ),
        Err(e) => println!(
            "cargo::warning=numaio-bpf: {clang} not found ({e}): built without the eBPF collector; install clang and libbpf-dev and rebuild"
        ),
    }
}
