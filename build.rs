//! Finds Envoy's protobuf descriptors shipped inside the envoy-types crate (it does not
//! export them) so `isobar translate` can print resources as Envoy's JSON.
//! Set `ENVOY_TYPES_DESCRIPTORS` to a descriptor file to skip the search.
//! It also asks the linker for a compact relocation table where the C library can load it.

use std::path::PathBuf;

const CRATE_DIR: &str = "envoy-types-0.7.7";
const FILE: &str = "src/generated/types.bin";

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=ENVOY_TYPES_DESCRIPTORS");
    pack_relative_relocations();
    let found = std::env::var_os("ENVOY_TYPES_DESCRIPTORS")
        .map(PathBuf::from)
        .or_else(search_registry);
    let Some(source) = found else {
        panic!(
            "cannot find {CRATE_DIR}/{FILE} under $CARGO_HOME/registry/src; set ENVOY_TYPES_DESCRIPTORS"
        );
    };
    let out = PathBuf::from(std::env::var_os("OUT_DIR").unwrap_or_default())
        .join("envoy_descriptors.bin");
    if let Err(e) = std::fs::copy(&source, &out) {
        panic!("copying {} to {}: {e}", source.display(), out.display());
    }
}

/// The binary is position independent, so the loader patches ~50,000 pointers at start.
/// Stored as RELR (a bitmap per run of pointers) the table is 15 KB instead of 1.3 MB,
/// and the loader no longer reads 1.3 MB of it into memory (idle RSS −1 MiB; see
/// BENCHMARKS.md). A binary linked so needs glibc 2.36 or later where it runs: it is
/// asked for only in a native build on such a glibc (a binary built there needs a glibc
/// about as new anyway), never for another libc or a cross build. `ISOBAR_RELR=0` turns
/// it off, e.g. to build for older hosts with a toolchain that targets their glibc.
fn pack_relative_relocations() {
    println!("cargo:rerun-if-env-changed=ISOBAR_RELR");
    if std::env::var("ISOBAR_RELR").is_ok_and(|v| v == "0") {
        return;
    }
    let gnu_linux = std::env::var("CARGO_CFG_TARGET_OS").is_ok_and(|os| os == "linux")
        && std::env::var("CARGO_CFG_TARGET_ENV").is_ok_and(|env| env == "gnu");
    let native = std::env::var("TARGET").ok() == std::env::var("HOST").ok();
    if gnu_linux && native && glibc_minor().is_some_and(|minor| minor >= 36) {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}

/// The build machine's glibc as `getconf` reports it ("glibc 2.36" → 36).
fn glibc_minor() -> Option<u32> {
    let out = std::process::Command::new("getconf")
        .arg("GNU_LIBC_VERSION")
        .output()
        .ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let version = text.trim().strip_prefix("glibc ")?;
    let mut parts = version.split('.');
    (parts.next()? == "2").then_some(())?;
    parts.next()?.parse().ok()
}

fn search_registry() -> Option<PathBuf> {
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))?;
    let registries = std::fs::read_dir(home.join("registry/src")).ok()?;
    registries
        .flatten()
        .map(|entry| entry.path().join(CRATE_DIR).join(FILE))
        .find(|candidate| candidate.is_file())
}
