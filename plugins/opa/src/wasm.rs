//! Policies compiled by `opa build -t wasm`, run by opa-wasm on wasmtime. The bundle's
//! entrypoints ending in `/deny` and `/warn` are asked (e.g. `isobar/deny`).

use futures::executor::block_on;
use opa_wasm::Runtime;
use wasmtime::{Config, Engine, Module, Store, StoreLimits, StoreLimitsBuilder};

/// Fuel for loading a policy's data, and again for each evaluation.
const FUEL: u64 = 500_000_000;

/// A store whose memories may not grow past `max_memory` bytes (a growth past it fails,
/// as the policy's allocator sees it: out of memory).
fn limited_store(engine: &Engine, max_memory: usize) -> Store<StoreLimits> {
    let limits = StoreLimitsBuilder::new().memory_size(max_memory).build();
    let mut store = Store::new(engine, limits);
    store.limiter(|limits| limits);
    store
}

use crate::{Data, Policy, Prepared, Verdict, messages};

pub struct WasmPolicy {
    name: String,
    engine: Engine,
    module: Module,
    /// The most memory a store may hold, in bytes.
    max_memory: usize,
    deny: Option<String>,
    warn: Option<String>,
}

impl WasmPolicy {
    pub fn load(name: &str, bytes: &[u8], max_memory_mb: u32) -> Result<WasmPolicy, String> {
        let max_memory = usize::try_from(max_memory_mb).unwrap_or(usize::MAX) << 20;
        let mut config = Config::new();
        config.consume_fuel(true);
        let engine = Engine::new(&config).map_err(|e| format!("{name}: {e:#}"))?;
        let module = Module::new(&engine, bytes).map_err(|e| format!("{name}: {e:#}"))?;
        // Instantiate once now so a module that does not speak OPA's ABI stops start-up.
        let mut store = limited_store(&engine, max_memory);
        store.set_fuel(FUEL).map_err(|e| format!("{name}: {e:#}"))?;
        let runtime = block_on(Runtime::new(&mut store, &module))
            .map_err(|e| format!("{name}: not an OPA wasm policy: {e:#}"))?;
        let pick = |suffix: &str| {
            let mut found: Vec<&str> = runtime
                .entrypoints()
                .into_iter()
                .filter(|e| e.ends_with(suffix) || *e == &suffix[1..])
                .collect();
            found.sort();
            found.first().map(|e| e.to_string())
        };
        let deny = pick("/deny").or_else(|| pick("/violation"));
        let warn = pick("/warn");
        if deny.is_none() && warn.is_none() {
            return Err(format!(
                "{name}: no entrypoint ends in /deny or /warn (entrypoints: {})",
                {
                    let mut all: Vec<&str> = runtime.entrypoints().into_iter().collect();
                    all.sort();
                    all.join(", ")
                }
            ));
        }
        Ok(WasmPolicy {
            name: name.to_string(),
            engine,
            module,
            max_memory,
            deny,
            warn,
        })
    }
}

impl Policy for WasmPolicy {
    fn name(&self) -> &str {
        &self.name
    }

    /// A compiled policy cannot be inspected: it gets the inventory.
    fn reads_inventory(&self) -> bool {
        true
    }

    fn prepare(&self, data: &Data) -> Result<Box<dyn Prepared + '_>, String> {
        let mut store = limited_store(&self.engine, self.max_memory);
        store.set_fuel(FUEL).map_err(|e| format!("{e:#}"))?;
        let policy = block_on(async {
            let runtime = Runtime::new(&mut store, &self.module).await?;
            runtime.with_data(&mut store, &data.json).await
        })
        .map_err(|e| format!("{e:#}"))?;
        Ok(Box::new(PreparedWasm {
            policy: self,
            store,
            loaded: policy,
        }))
    }
}

struct PreparedWasm<'a> {
    policy: &'a WasmPolicy,
    store: Store<StoreLimits>,
    loaded: opa_wasm::Policy<opa_wasm::DefaultContext>,
}

impl PreparedWasm<'_> {
    fn entrypoint(
        &mut self,
        entrypoint: &Option<String>,
        input: &serde_json::Value,
    ) -> Result<Vec<String>, String> {
        let Some(entrypoint) = entrypoint else {
            return Ok(Vec::new());
        };
        self.store.set_fuel(FUEL).map_err(|e| format!("{e:#}"))?;
        let results: serde_json::Value =
            block_on(self.loaded.evaluate(&mut self.store, entrypoint, input))
                .map_err(|e| format!("{e:#}"))?;
        // OPA's result set: [{"result": <value>}], empty when undefined.
        let mut out = Vec::new();
        for item in results.as_array().into_iter().flatten() {
            if let Some(value) = item.get("result") {
                out.extend(messages(value, entrypoint)?);
            }
        }
        Ok(out)
    }
}

impl Prepared for PreparedWasm<'_> {
    fn evaluate(&mut self, input: &serde_json::Value) -> Result<Verdict, String> {
        let deny = self.policy.deny.clone();
        let warn = self.policy.warn.clone();
        Ok(Verdict {
            deny: self.entrypoint(&deny, input)?,
            warn: self.entrypoint(&warn, input)?,
        })
    }
}
