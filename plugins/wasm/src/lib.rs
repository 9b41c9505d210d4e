//! The `wasm` processor: WebAssembly modules named in `contour.yaml`, run on wasmtime
//! after the sources, each on a fresh instance with a fuel and a memory limit.
//!
//! The ABI (version 1) is documented in `plugins/wasm/ABI.md`: the host hands a module the
//! IR's virtual hosts as JSON and gets back changes (headers to set or remove on every
//! route of a vhost) and conditions. A module that traps, runs out of fuel or memory, or
//! answers with anything the host cannot use is isolated: none of its changes apply, the
//! objects it would have changed get a `ProcessorFailed` warning, and
//! `isobar_plugin_events_total{plugin="wasm"}` counts why. The rest of the pipeline runs.

mod abi;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use isobar_sdk::condition::{ConditionType, Reason};
use isobar_sdk::plugin::{ConfigError, Factory, PluginRegistration, parse_config};
use isobar_sdk::{BuildContext, Ir, ObjectKey, Processor, StatusReport};

pub use abi::{ABI_VERSION, Change, Failure, Module, Output, ReportedCondition};

pub const NAME: &str = "wasm";

/// Fuel a call may burn unless its module says otherwise: about 100 ms of work.
pub const DEFAULT_FUEL: u64 = 200_000_000;
/// Linear memory a module may grow to unless it says otherwise.
pub const DEFAULT_MEMORY_MB: u64 = 64;

/// One entry of `plugins.wasm.modules`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, isobar_sdk::schemars::JsonSchema)]
#[schemars(crate = "isobar_sdk::schemars")]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ModuleConfig {
    /// Shown in conditions, logs and metrics.
    pub name: String,
    /// A `.wasm` binary or a `.wat` text module.
    pub path: String,
    /// Handed to the module as `config`.
    #[serde(default)]
    pub config: serde_json::Value,
    #[serde(default = "default_fuel")]
    pub fuel: u64,
    #[serde(default = "default_memory")]
    pub max_memory_mb: u64,
}

fn default_fuel() -> u64 {
    DEFAULT_FUEL
}

fn default_memory() -> u64 {
    DEFAULT_MEMORY_MB
}

/// The `plugins.wasm` section of `contour.yaml`.
#[derive(
    Debug, Default, Clone, PartialEq, Serialize, Deserialize, isobar_sdk::schemars::JsonSchema,
)]
#[schemars(crate = "isobar_sdk::schemars")]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct WasmConfig {
    /// Modules, run in this order.
    #[serde(default)]
    pub modules: Vec<ModuleConfig>,
}

pub struct Wasm {
    modules: Vec<Module>,
}

impl std::fmt::Debug for Wasm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wasm")
            .field(
                "modules",
                &self.modules.iter().map(Module::name).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl Wasm {
    pub fn load(config: &WasmConfig) -> Result<Wasm, ConfigError> {
        let engine = abi::engine().map_err(ConfigError)?;
        let mut modules = Vec::new();
        for (i, m) in config.modules.iter().enumerate() {
            if modules.iter().any(|o: &Module| o.name() == m.name) {
                return Err(ConfigError(format!(
                    "modules[{i}]: name {:?} is used twice",
                    m.name
                )));
            }
            let module = Module::load(&engine, m)
                .map_err(|e| ConfigError(format!("modules[{i}] ({}): {e}", m.name)))?;
            modules.push(module);
        }
        Ok(Wasm { modules })
    }
}

fn build(config: &serde_json::Value) -> Result<Box<dyn Processor>, ConfigError> {
    let config: WasmConfig = parse_config(config)?;
    Ok(Box::new(Wasm::load(&config)?))
}

isobar_sdk::inventory::submit! {
    PluginRegistration {
        name: NAME,
        summary: "WebAssembly processors (ABI v1) that change headers of routes, with fuel and memory limits",
        factory: Factory::Processor(build),
        settings: Some(isobar_sdk::plugin::Settings::of::<WasmConfig>()),
    }
}

impl Processor for Wasm {
    fn process(&self, _ctx: &BuildContext<'_>, ir: &mut Ir, status: &mut StatusReport) {
        if self.modules.is_empty() {
            return;
        }
        for module in &self.modules {
            // The input is rebuilt per module: an earlier module's changes are visible.
            let vhosts = abi::vhosts_json(ir);
            let outcome = module
                .run(&vhosts)
                .and_then(|output| abi::validate(&output, ir).map(|()| output));
            match outcome {
                Ok(output) => {
                    abi::apply(&output.changes, ir);
                    for condition in &output.conditions {
                        for key in owners(ir, condition.vhost.as_deref()) {
                            status.warning(
                                &key,
                                ConditionType::ProcessorError,
                                Reason::ProcessorReported,
                                format!("processor {}: {}", module.name(), condition.message),
                            );
                        }
                    }
                }
                Err(failure) => {
                    isobar_sdk::telemetry::count(
                        NAME,
                        &format!("{}:{}", failure.kind(), module.name()),
                    );
                    tracing::warn!(module = module.name(), %failure, "wasm processor failed; its changes were dropped");
                    for key in owners(ir, None) {
                        status.warning(
                            &key,
                            ConditionType::ProcessorError,
                            Reason::ProcessorFailed,
                            format!(
                                "processor {} failed ({failure}); its changes were not applied",
                                module.name()
                            ),
                        );
                    }
                }
            }
        }
    }
}

/// The objects with routes in vhost `fqdn` (every vhost when `None`).
fn owners(ir: &Ir, fqdn: Option<&str>) -> Vec<ObjectKey> {
    let mut out: BTreeMap<ObjectKey, ()> = BTreeMap::new();
    let vhosts = ir.listeners.values().flat_map(|l| {
        let secure = l
            .secure_virtual_hosts
            .values()
            .flat_map(isobar_sdk::ir::SecureVirtualHost::http_hosts);
        l.virtual_hosts.values().chain(secure)
    });
    for vhost in vhosts {
        if fqdn.is_some_and(|f| f != vhost.fqdn) {
            continue;
        }
        for route in vhost.routes.values() {
            out.insert(route.source.clone(), ());
        }
    }
    out.into_keys().collect()
}
