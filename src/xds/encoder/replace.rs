//! Splicing a change into the last build: the vhosts it touched re-encoded, the
//! extension clusters and TCP proxies it changed replaced, the rest kept.

use super::*;

impl Encoder {
    /// Serves the extension clusters `ir` has: a new one is put, one gone removed, one
    /// that changed replaced (its endpoints put again if they moved).
    pub(super) fn replace_extension_clusters(
        &mut self,
        ir: &Ir,
        objects: &Objects,
        settings: &EnvoySettings,
        changes: &mut Changes,
    ) {
        if self.extension_clusters == ir.extension_clusters {
            return;
        }
        let known = std::mem::take(&mut self.extension_clusters);
        for (name, was) in &known {
            if ir.extension_clusters.get(name) != Some(was) {
                self.release_cluster(name, changes);
            }
        }
        for (name, now) in &ir.extension_clusters {
            if known.get(name) != Some(now) {
                self.use_cluster(ir, objects, settings, name, changes);
            }
        }
        self.extension_clusters.clone_from(&ir.extension_clusters);
    }

    /// Sends again each TCP or UDP listener whose proxy changed (see
    /// [`Encoder::same_listeners`]), its new clusters counted in use before its old
    /// ones are released.
    pub(super) fn replace_proxies(
        &mut self,
        ir: &Ir,
        objects: &Objects,
        settings: &EnvoySettings,
        changes: &mut Changes,
    ) {
        for (li, l) in ir.listeners.values().enumerate() {
            let now = proxy_clusters(ir, l);
            let state = &self.listeners[li];
            if state.proxy == l.tcp_proxy && state.proxy_clusters == now {
                continue;
            }
            for name in now.keys() {
                self.use_cluster(ir, objects, settings, name, changes);
            }
            let old = std::mem::replace(&mut self.listeners[li].proxy_clusters, now);
            for name in old.keys() {
                self.release_cluster(name, changes);
            }
            let state = &mut self.listeners[li];
            state.proxy.clone_from(&l.tcp_proxy);
            changes.put(
                XdsType::Listener,
                state.shape.name.clone(),
                state.proxy_listener(settings),
            );
        }
    }

    /// Gives the TCP and UDP listeners of `ir` that a scoped build left without a proxy
    /// the proxy (and clusters) last sent, unless the object that made it is among
    /// `rebuilt` (then it is gone or changed, and the listener changed shape).
    pub fn carry_tcp_proxies(&self, ir: &mut Ir, rebuilt: &BTreeSet<isobar_sdk::ObjectKey>) {
        for known in &self.listeners {
            let Some(proxy) = &known.proxy else {
                continue;
            };
            if rebuilt.contains(&proxy.source) {
                continue;
            }
            let Some(l) = ir.listeners.get_mut(&known.shape.name) else {
                continue;
            };
            if l.tcp_proxy.is_none() {
                l.tcp_proxy = Some(proxy.clone());
                for (name, c) in &known.proxy_clusters {
                    ir.clusters.entry(name.clone()).or_insert_with(|| c.clone());
                }
            }
        }
    }

    /// Replaces the vhosts named in `touched` (the ones they had, if any) with the ones
    /// `ir` has; every vhost of `ir` must be named in `touched`. `ir` must also hold
    /// every cluster and secret its vhosts use, and the listeners this encoder was made
    /// with (see [`Encoder::same_listeners`]). `published` is the snapshot holding what
    /// this encoder produced last (the bytes of the vhosts not touched are copied from
    /// it). Returns the resources that changed; `Stale` when `published` does not hold
    /// what was produced (then this encoder is of no further use).
    pub fn replace(
        &mut self,
        ir: &Ir,
        objects: &Objects,
        settings: &EnvoySettings,
        touched: &BTreeSet<String>,
        published: Option<&Snapshot>,
    ) -> Result<Changes, Stale> {
        let mut changes = Changes::default();
        self.begin(ir, objects, settings, &mut changes)?;
        let mut arena = Arena::default();
        let mut entries = Vec::new();
        let mut fresh = self.encode(ir, settings, &mut arena, &mut entries);
        // What stays in use is counted again before the old shares are released, so it
        // is neither removed nor sent again.
        for (_, parts, _) in &mut fresh {
            parts.clusters.retain(|c| ir.clusters.contains_key(c));
            for name in &parts.clusters {
                self.use_cluster(ir, objects, settings, name, &mut changes);
            }
            for sds in parts.on.iter().filter_map(|p| p.secret.as_deref()) {
                self.use_secret(ir, sds, &mut changes);
            }
        }
        let mut touches = vec![Touched::default(); self.listeners.len()];
        if !self.started {
            // RDS is always published, even empty, so a listener never waits on it.
            for (touch, state) in touches.iter_mut().zip(&self.listeners) {
                touch.table = state.shape.protocol == Protocol::Http;
                if state.shards > 0 {
                    touch.shards = ShardSet::all();
                }
            }
        }
        // The old shares: released now, compared with the new ones below so that only
        // what differs is assembled and sent again.
        let olds = self.release(touched, &mut changes);
        let mut assembling: Vec<(&String, Fresh)> = Vec::with_capacity(fresh.len());
        for (fqdn, parts, bytes) in fresh {
            let old = olds.get(fqdn);
            for (li, touch) in touches.iter_mut().enumerate() {
                let entry = entries[bytes.0.clone()]
                    .iter_mut()
                    .find(|e| e.listener == li);
                let (range, rds) = match entry {
                    Some(e) => (Some(e.bytes.clone()), e.rds.take()),
                    None => (None, None),
                };
                let share = Compared {
                    was: old.and_then(|o| o.on(li)),
                    now: parts.on(li),
                    bytes: arena.get(range.as_ref()),
                    rds,
                    shard: parts.shard,
                };
                self.compare(fqdn, li, share, settings.vhds, touch, &mut changes);
            }
            for placed in &parts.on {
                let state = &mut self.listeners[placed.listener];
                state.vhosts += 1;
                state.fallbacks += usize::from(placed.fallback());
            }
            self.index_shard(fqdn, parts.shard, true);
            self.vhosts.insert(fqdn.clone(), parts);
            assembling.push((fqdn, bytes));
        }
        // In FQDN order already: built in bulk.
        let assembling: BTreeMap<&String, Fresh> = assembling.into_iter().collect();
        self.compare_removed(&olds, settings, &mut touches, &mut changes);
        // A change that would split a listener's routes, or join them, is a full build's
        // (the listener and every shard change).
        if self.started
            && self.listeners.iter().any(|l| {
                l.shape.protocol == Protocol::Http
                    && l.shards != shards(settings, l.vhosts, l.shards)
            })
        {
            return Err(Stale);
        }
        for (li, touch) in touches.iter_mut().enumerate() {
            self.count_fallback(ir, li, touch, &mut changes);
        }
        let table = Table {
            vhosts: &self.vhosts,
            olds: &olds,
            fresh: &assembling,
            entries: &entries,
            arena: &arena,
            published,
        };
        for (li, touch) in touches.iter().enumerate() {
            self.assemble(li, *touch, &table, settings, &mut changes)?;
        }
        if !self.started {
            self.put_own_listeners(settings, &mut changes);
            self.started = true;
        }
        Ok(changes)
    }

    /// The first build's listeners (the rest checks that the listeners keep their
    /// shape) and the clusters every build serves: extension clusters, and those of TCP
    /// proxies.
    fn begin(
        &mut self,
        ir: &Ir,
        objects: &Objects,
        settings: &EnvoySettings,
        changes: &mut Changes,
    ) -> Result<(), Stale> {
        if !self.started {
            self.listeners = ir
                .listeners
                .values()
                .map(|l| ListenerState {
                    shape: l.empty(),
                    vhosts: 0,
                    fallbacks: 0,
                    fallback_secret: None,
                    fallback_counted: false,
                    proxy: l.tcp_proxy.clone(),
                    proxy_clusters: proxy_clusters(ir, l),
                    shards: if l.protocol == Protocol::Http {
                        shards(
                            settings,
                            l.virtual_hosts.len(),
                            self.were_sharded.get(&l.name).copied().unwrap_or(0),
                        )
                    } else {
                        0
                    },
                })
                .collect();
        } else if !self.same_listeners(ir) {
            return Err(Stale);
        }
        if self.started {
            self.replace_proxies(ir, objects, settings, changes);
            self.replace_extension_clusters(ir, objects, settings, changes);
        }
        if !self.started {
            self.extension_clusters.clone_from(&ir.extension_clusters);
            for name in ir.extension_clusters.keys() {
                self.use_cluster(ir, objects, settings, name, changes);
            }
            let pinned: Vec<String> = self
                .listeners
                .iter()
                .flat_map(|l| l.proxy_clusters.keys().cloned())
                .collect();
            for name in &pinned {
                self.use_cluster(ir, objects, settings, name, changes);
            }
        }
        Ok(())
    }

    /// Takes the vhosts of `touched` out (their listeners' counts, shard index,
    /// clusters and secrets released): their old shares, to compare the new ones with.
    fn release<'a>(
        &mut self,
        touched: &'a BTreeSet<String>,
        changes: &mut Changes,
    ) -> BTreeMap<&'a String, Parts> {
        let mut olds = BTreeMap::new();
        for fqdn in touched {
            let Some(old) = self.vhosts.remove(fqdn) else {
                continue;
            };
            self.index_shard(fqdn, old.shard, false);
            for placed in &old.on {
                let state = &mut self.listeners[placed.listener];
                state.vhosts -= 1;
                state.fallbacks -= usize::from(placed.fallback());
            }
            for name in &old.clusters {
                self.release_cluster(name, changes);
            }
            for sds in old.on.iter().filter_map(|p| p.secret.clone()) {
                self.release_secret(&sds, changes);
            }
            olds.insert(fqdn, old);
        }
        olds
    }

    /// The vhosts of `olds` that are gone: each share compared with nothing.
    fn compare_removed(
        &mut self,
        olds: &BTreeMap<&String, Parts>,
        settings: &EnvoySettings,
        touches: &mut [Touched],
        changes: &mut Changes,
    ) {
        for (fqdn, old) in olds {
            if self.vhosts.contains_key(*fqdn) {
                continue;
            }
            for placed in &old.on {
                let li = placed.listener;
                let share = Compared {
                    was: Some(placed),
                    now: None,
                    bytes: None,
                    rds: None,
                    shard: old.shard,
                };
                self.compare(fqdn, li, share, settings.vhds, &mut touches[li], changes);
            }
        }
    }

    /// The listeners the first build puts whole: `stats-health` and TCP proxies.
    fn put_own_listeners(&self, settings: &EnvoySettings, changes: &mut Changes) {
        for state in &self.listeners {
            if state.shape.protocol == Protocol::Stats {
                let stats = encoded(&stats_listener(&state.shape, settings));
                changes.put(XdsType::Listener, state.shape.name.clone(), Some(stats));
            } else if let Some(proxied) = state.proxy_listener(settings) {
                changes.put(XdsType::Listener, state.shape.name.clone(), Some(proxied));
            }
        }
    }
}
