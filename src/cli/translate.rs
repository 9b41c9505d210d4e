//! `isobar translate`: the Envoy resources and conditions for a manifest directory,
//! without Envoy or a cluster. Exits non-zero when a manifest cannot be read, or when a
//! resource breaks one of Envoy's validation rules (naming it: Envoy would refuse it).

use crate::cli::output::translation;
use crate::cli::serve::envoy_settings;
use crate::cli::{Format, TranslateArgs};
use crate::provider::files::load_dir;
use crate::runner::pipeline::Pipeline;
use crate::xds::validate::check;
use crate::xds::{XdsType, translate};

pub fn run(args: &TranslateArgs) -> anyhow::Result<()> {
    let config = args.config.load(serde_json::Map::new())?;
    let pipeline = Pipeline::for_config(&config)?;
    let manifests = args.manifests()?;
    if !manifests.is_dir() {
        anyhow::bail!("manifest directory {} does not exist", manifests.display());
    }
    let (objects, errors) = load_dir(manifests);
    let output = pipeline.build(&objects);
    let resources = translate(&output.ir, &objects, &envoy_settings(&config));
    // Envoy's own validation rules (anything breaking one would be refused: a NACK),
    // checked on a second thread while the output is made and printed.
    let (printed, found) = std::thread::scope(|scope| {
        let checks = scope.spawn(|| -> anyhow::Result<Vec<String>> {
            let mut found = Vec::new();
            for t in XdsType::ORDER {
                for (name, bytes) in resources.of(t) {
                    for violation in check(t, bytes).map_err(|e| anyhow::anyhow!(e))? {
                        found.push(format!(
                            "isobar: Envoy would refuse {} {name}: {violation}",
                            t.short()
                        ));
                    }
                }
            }
            Ok(found)
        });
        let printed = (|| -> anyhow::Result<()> {
            let doc = translation(
                &resources,
                &output.status,
                &objects,
                pipeline.controller_name(),
            )
            .map_err(|e| anyhow::anyhow!(e))?;
            let text = match args.output {
                Format::Yaml => serde_yaml::to_string(&doc)?,
                Format::Json => serde_json::to_string_pretty(&doc)? + "\n",
            };
            print!("{text}");
            Ok(())
        })();
        let found = checks
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p));
        (printed, found)
    });
    printed?;
    let found = found?;
    for line in &found {
        eprintln!("{line}");
    }
    let refused = found.len();
    if refused > 0 {
        anyhow::bail!("{refused} value(s) Envoy would refuse");
    }
    if !errors.is_empty() {
        for e in &errors {
            eprintln!("isobar: {e}");
        }
        anyhow::bail!("{} manifest file(s) could not be read", errors.len());
    }
    if args.strict {
        let invalid: Vec<String> = output
            .status
            .objects
            .iter()
            .filter(|(_, status)| invalid(status))
            .map(|(key, _)| key.to_string())
            .collect();
        for key in &invalid {
            eprintln!("isobar: {key} is invalid (its status says why)");
        }
        if !invalid.is_empty() {
            anyhow::bail!("{} invalid object(s) (--strict)", invalid.len());
        }
    }
    Ok(())
}

/// Whether an object's status says it is invalid: an error condition, or one of Gateway
/// API's `Accepted`, `ResolvedRefs` and `Programmed` False on it, a parent or a listener.
fn invalid(status: &isobar_sdk::ObjectStatus) -> bool {
    use isobar_sdk::condition::ConditionStatus;
    if !status.errors.is_empty() {
        return true;
    }
    let Some(gateway) = &status.gateway else {
        return false;
    };
    gateway
        .conditions
        .iter()
        .chain(gateway.parents.iter().flat_map(|p| &p.conditions))
        .chain(gateway.listeners.iter().flat_map(|l| &l.conditions))
        .any(|c| {
            matches!(c.type_.as_str(), "Accepted" | "ResolvedRefs" | "Programmed")
                && c.status == ConditionStatus::False
        })
}
