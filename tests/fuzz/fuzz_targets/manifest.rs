//! The manifest decoder (the files provider's, `isobar translate`'s): any text, as a
//! YAML or a JSON file, decodes to objects or to an error naming a line of the file, in
//! bounded time (libFuzzer's `-timeout`), and never panics.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|bytes: &[u8]| {
    // The kinds come from the plugins' registrations: without them every document would
    // be skipped as a kind Isobar does not read, and the decoders never reached.
    assert!(
        isobar_sdk::Kind::from_type("projectcontour.io/v1", "HTTPProxy").is_some(),
        "the plugins' kinds are not linked in"
    );
    let Ok(text) = std::str::from_utf8(bytes) else {
        return;
    };
    for file in ["fuzz.yaml", "fuzz.json"] {
        match isobar::provider::manifest::parse_file(Path::new(file), text) {
            Ok(objects) => {
                for object in &objects {
                    assert!(!object.key().name.is_empty(), "an object without a name");
                }
            }
            Err(error) => {
                let lines = text.lines().count().max(1);
                if let Some(line) = error.line {
                    assert!(
                        (1..=lines).contains(&line),
                        "{error}: line {line} of a file of {lines}"
                    );
                }
                assert!(!error.message.is_empty(), "an error without a message");
            }
        }
    }
});
