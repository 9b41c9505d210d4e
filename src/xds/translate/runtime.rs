//! Envoy's runtime over RTDS: Contour's `dynamic` layer (`isobar bootstrap` asks for it),
//! with its RE2 program size limits and the `listener` section's runtime settings.

use isobar_sdk::ir::{Ir, Protocol};

use crate::xds::proto::{PbValue, append_field, struct_bytes};
use crate::xds::resource::Encoded;
use crate::xds::settings::RuntimeSettings;

/// The RTDS layer's name, as in Contour's bootstrap.
pub const DYNAMIC_LAYER: &str = "dynamic";

/// The largest RE2 program Envoy compiles under this layer
/// (`re2.max_program_size.error_level`, as Contour sets it; Envoy's own default is 100).
pub const RE2_PROGRAM_MAX: u64 = 1_048_576;

/// The `dynamic` layer: `envoy.service.runtime.v3.Runtime` with its keys in order.
pub(in crate::xds) fn dynamic_layer(ir: &Ir, settings: &RuntimeSettings) -> Encoded {
    let mut numbers: Vec<(String, f64)> = vec![
        (
            "re2.max_program_size.error_level".to_string(),
            RE2_PROGRAM_MAX as f64,
        ),
        ("re2.max_program_size.warn_level".to_string(), 1000.0),
    ];
    if let Some(n) = settings.max_requests_per_io_cycle {
        numbers.push(("http.max_requests_per_io_cycle".to_string(), f64::from(n)));
    }
    if let Some(n) = settings.max_connections_per_listener {
        for l in ir
            .listeners
            .values()
            .filter(|l| l.protocol != Protocol::Stats)
        {
            numbers.push((
                format!("envoy.resource_limits.listener.{}.connection_limit", l.name),
                f64::from(n),
            ));
        }
    }
    numbers.sort_by(|a, b| a.0.cmp(&b.0));
    let mut fields: Vec<(&str, PbValue<'_>)> = numbers
        .iter()
        .map(|(k, v)| (k.as_str(), PbValue::Number(*v)))
        .collect();
    // `runtime-settings`, as strings; the keys set above win.
    for (key, value) in &settings.extra {
        if numbers.iter().all(|(k, _)| k != key) {
            fields.push((key.as_str(), PbValue::Str(value)));
        }
    }
    fields.sort_by(|a, b| a.0.cmp(b.0));
    // Runtime: name (1), layer (2, a Struct).
    let mut out = Vec::new();
    append_field(&mut out, 1, DYNAMIC_LAYER.as_bytes());
    append_field(&mut out, 2, &struct_bytes(&fields));
    Encoded::from(out)
}
