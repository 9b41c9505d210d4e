//! Finds Envoy's protobuf descriptors shipped inside the envoy-types crate (it does not
//! export them) so `isobar translate` can print resources as Envoy's JSON.
//! Set `ENVOY_TYPES_DESCRIPTORS` to a descriptor file to skip the search.
//! It also asks the linker for a compact relocation table where the C library can load it,
//! and to lay out together the functions that run at start (`build/startup-symbols.txt`).
//! Both are link options of the `isobar` binary alone; `ISOBAR_BUILD_RELR=0` and
//! `ISOBAR_BUILD_SYMBOL_ORDER=0` turn them off.

use std::path::{Path, PathBuf};

const CRATE_DIR: &str = "envoy-types-0.7.7";
const FILE: &str = "src/generated/types.bin";

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=ENVOY_TYPES_DESCRIPTORS");
    pack_relative_relocations();
    startup_symbol_order();
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
/// about as new anyway), never for another libc or a cross build. `ISOBAR_BUILD_RELR=0`
/// turns it off, e.g. to build for older hosts with a toolchain that targets their glibc.
fn pack_relative_relocations() {
    println!("cargo:rerun-if-env-changed=ISOBAR_BUILD_RELR");
    println!("cargo:rerun-if-env-changed=ISOBAR_RELR");
    if std::env::var_os("ISOBAR_RELR").is_some() {
        println!("cargo:warning=ISOBAR_RELR is now ISOBAR_BUILD_RELR (honoured for now)");
    }
    let off = |name: &str| std::env::var(name).is_ok_and(|v| v == "0");
    if off("ISOBAR_BUILD_RELR") || off("ISOBAR_RELR") {
        return;
    }
    let gnu_linux = std::env::var("CARGO_CFG_TARGET_OS").is_ok_and(|os| os == "linux")
        && std::env::var("CARGO_CFG_TARGET_ENV").is_ok_and(|env| env == "gnu");
    let native = std::env::var("TARGET").ok() == std::env::var("HOST").ok();
    if gnu_linux && native && glibc_minor().is_some_and(|minor| minor >= 36) {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}

/// The functions `isobar serve` runs as it starts and idles are spread over the whole
/// `.text` (25 MB), and the kernel maps code into a process in runs of pages around each
/// one it touches: at idle, 8–10 MiB of code pages were resident. Laid out together, in
/// the order `build/startup-symbols.txt` lists them (recorded on x86-64 Linux by the
/// `symbols` bench profile), they fill ~3 MiB. LLD (rustc's default linker there since
/// 1.90) takes such a list; GNU ld and mold do not: a one-line program is linked with
/// the option first, with the same flags and linker, and the option is kept only if
/// that link succeeds (a warning says when it is not). A name the binary no longer has
/// is skipped, so a stale list costs memory, never a build; names match only a build
/// like the recorded ones (no `--target`, default features, this Cargo.lock and rustc).
fn startup_symbol_order() {
    println!("cargo:rerun-if-env-changed=ISOBAR_BUILD_SYMBOL_ORDER");
    println!("cargo:rerun-if-env-changed=RUSTC_LINKER");
    if std::env::var("ISOBAR_BUILD_SYMBOL_ORDER").is_ok_and(|v| v == "0")
        || std::env::var("TARGET").ok().as_deref() != Some(RECORDED_ON)
    {
        return;
    }
    let dir = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default();
    let list = format!("{dir}/build/startup-symbols.txt");
    println!("cargo:rerun-if-changed={list}");
    // `-Wl,` splits its argument at commas.
    if list.contains(',') || !Path::new(&list).is_file() {
        return;
    }
    let args = [
        format!("-Wl,--symbol-ordering-file={list}"),
        "-Wl,--no-warn-symbol-ordering".to_string(),
    ];
    if links_with(&args) {
        for arg in args {
            println!("cargo:rustc-link-arg-bins={arg}");
        }
    } else {
        println!(
            "cargo:warning=the linker refuses --symbol-ordering-file: isobar is linked without its startup symbol order (idle RSS ~7 MiB higher; see BENCHMARKS.md)"
        );
    }
}

const RECORDED_ON: &str = "x86_64-unknown-linux-gnu";

/// Whether a one-line program links with `args`, built as this crate is (its target,
/// RUSTFLAGS and linker).
fn links_with(args: &[String]) -> bool {
    let Some(out) = std::env::var_os("OUT_DIR").map(PathBuf::from) else {
        return false;
    };
    let source = out.join("link_probe.rs");
    if std::fs::write(&source, "fn main() {}\n").is_err() {
        return false;
    }
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let mut command = std::process::Command::new(rustc);
    command
        .arg(&source)
        .arg("-o")
        .arg(out.join("link_probe"))
        .args(["--target", RECORDED_ON]);
    let flags = std::env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    command.args(flags.split('\x1f').filter(|f| !f.is_empty()));
    // The linker Cargo was told to use (environment or `.cargo/config.toml`).
    if let Ok(linker) = std::env::var("RUSTC_LINKER") {
        command.arg(format!("-Clinker={linker}"));
    }
    for arg in args {
        command.arg(format!("-Clink-arg={arg}"));
    }
    command
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
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
