//! Finds Envoy's protobuf descriptors shipped inside the envoy-types crate (it does not
//! export them) so `isobar translate` can print resources as Envoy's JSON.
//! Set `ENVOY_TYPES_DESCRIPTORS` to a descriptor file to skip the search.

use std::path::PathBuf;

const CRATE_DIR: &str = "envoy-types-0.7.7";
const FILE: &str = "src/generated/types.bin";

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=ENVOY_TYPES_DESCRIPTORS");
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
