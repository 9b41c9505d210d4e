//! The xDS request parser against prost: any bytes a client sends as a discovery
//! request are read as prost reads them (names included), or refused as prost refuses
//! them, and never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    if let Err(disagreement) = isobar::xds::agrees_with_prost(bytes) {
        panic!("{disagreement}");
    }
});
