//! Encoding vhosts, comparing them with what each listener held, and assembling each
//! listener's resources from its table.

use super::*;

impl Encoder {
    /// Every vhost of `ir`, encoded, in FQDN order: its shares on each listener (and
    /// the clusters it uses), and where its fresh bytes are among `entries` (in `arena`).
    /// Each listener's vhosts are in FQDN order already: merged, every FQDN comes once
    /// with all of its vhosts, and nothing is sorted or looked up.
    pub(super) fn encode<'a>(
        &self,
        ir: &'a Ir,
        settings: &EnvoySettings,
        arena: &mut Arena,
        entries: &mut Vec<FreshEntry>,
    ) -> Vec<(&'a String, Parts, Fresh)> {
        type Heads<'a> = Vec<(
            usize,
            std::iter::Peekable<Box<dyn Iterator<Item = (&'a String, Vhost<'a>)> + 'a>>,
        )>;
        let mut heads: Heads<'a> = Vec::new();
        for (li, listener) in ir.listeners.values().enumerate() {
            let plain = listener
                .virtual_hosts
                .iter()
                .map(|(f, v)| (f, Vhost::Plain(v)));
            let secure = listener
                .secure_virtual_hosts
                .iter()
                .map(|(f, v)| (f, Vhost::Secure(v)));
            let plain: Box<dyn Iterator<Item = (&'a String, Vhost<'a>)> + 'a> = Box::new(plain);
            let secure: Box<dyn Iterator<Item = (&'a String, Vhost<'a>)> + 'a> = Box::new(secure);
            heads.push((li, plain.peekable()));
            heads.push((li, secure.peekable()));
        }
        let listeners: Vec<&ir::Listener> = ir.listeners.values().collect();
        let sharding = self.listeners.iter().any(|l| l.shards > 0);
        let mut out = Vec::new();
        loop {
            let next = heads
                .iter_mut()
                .filter_map(|(_, it)| it.peek().map(|(fqdn, _)| *fqdn))
                .min();
            let Some(fqdn) = next else {
                break;
            };
            let count = heads
                .iter_mut()
                .filter_map(|(_, it)| it.peek())
                .filter(|(f, _)| *f == fqdn)
                .count();
            let mut on = Vec::with_capacity(count);
            let mut clusters = SmallSet::default();
            let start = entries.len();
            for (li, it) in &mut heads {
                let Some((_, vhost)) = it.next_if(|(f, _)| *f == fqdn) else {
                    continue;
                };
                let listener = listeners[*li];
                let (placed, entry) = match vhost {
                    Vhost::Plain(vhost) => {
                        clusters.extend(vhost.cluster_names().map(str::to_string));
                        let range = arena.push(|b| b.extend_from_slice(&virtual_host(vhost, None)));
                        let placed = Placed {
                            listener: *li,
                            share: arena.get(Some(&range)).map_or(Share::of(&[]), Share::of),
                            routes: None,
                            fallback_routes: None,
                            rds: false,
                            secret: None,
                        };
                        (
                            placed,
                            FreshEntry {
                                listener: *li,
                                bytes: range,
                                rds: None,
                            },
                        )
                    }
                    Vhost::Secure(vhost) => {
                        clusters.extend(vhost.cluster_names().map(str::to_string));
                        self.encode_secure(ir, listener, *li, fqdn, vhost, settings, arena)
                    }
                };
                on.push(placed);
                entries.push(entry);
            }
            let shard = if !sharding {
                0
            } else if crate::xds::shard::in_every_shard(fqdn) {
                EVERY_SHARD
            } else {
                u16::try_from(crate::xds::shard::host_hash(fqdn)).unwrap_or(EVERY_SHARD)
            };
            let parts = Parts {
                on: on.into_boxed_slice(),
                clusters,
                shard,
            };
            out.push((fqdn, parts, Fresh(start..entries.len())));
        }
        out
    }

    /// A secure vhost's share on listener `on` (index `li`): its filter chain in
    /// `arena`, and its own RouteConfiguration, made at once.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn encode_secure(
        &self,
        ir: &Ir,
        on: &ir::Listener,
        li: usize,
        fqdn: &str,
        vhost: &ir::SecureVirtualHost,
        settings: &EnvoySettings,
        arena: &mut Arena,
    ) -> (Placed, FreshEntry) {
        let chain = arena.push(|b| encode_vhost_chain(on, vhost, settings, b));
        let routes = virtual_host(&vhost.http, None);
        let rds = vhost.tcp_proxy.is_none();
        // Its own RouteConfiguration: its vhost, its other hosts' and the 421 answers.
        let own = rds.then(|| {
            let name = on.route_config_name(fqdn);
            secure_route_configuration(&name, vhost, &routes)
        });
        let placed = Placed {
            listener: li,
            share: arena.get(Some(&chain)).map_or(Share::of(&[]), Share::of),
            routes: Some(Share::of(own.as_deref().unwrap_or(&routes))),
            fallback_routes: vhost.fallback.then(|| routes.as_slice().into()),
            rds,
            secret: vhost
                .tls
                .as_ref()
                .map(|t| t.secret.clone())
                .filter(|s| ir.secrets.contains_key(s)),
        };
        let own = own.map(Encoded::from);
        let entry = FreshEntry {
            listener: li,
            bytes: chain,
            rds: own,
        };
        (placed, entry)
    }

    /// Compares a vhost's share on listener `li` before and after a change: records
    /// what of the listener must be assembled again, and puts or removes the vhost's own
    /// resources (its VHDS vhost, its RouteConfiguration).
    pub(super) fn compare(
        &self,
        fqdn: &str,
        li: usize,
        share: Compared<'_>,
        vhds: bool,
        touch: &mut Touched,
        changes: &mut Changes,
    ) {
        let Compared {
            was,
            now,
            bytes,
            rds,
            shard,
        } = share;
        if was.is_none() && now.is_none() {
            return;
        }
        let listener = &self.listeners[li].shape;
        let same = was.map(|p| p.share) == now.map(|p| p.share);
        touch.table |= !same;
        let shards = self.listeners[li].shards;
        match listener.protocol {
            Protocol::Http if shards > 0 && !same => touch.shards.add(shard, shards),
            Protocol::Http if vhds && shards == 0 && !same => {
                let vhost = bytes
                    .filter(|_| now.is_some())
                    .map(|b| Encoded::from(vhds_virtual_host(&listener.name, fqdn, b)));
                changes.put(XdsType::VirtualHost, vhds_name(&listener.name, fqdn), vhost);
            }
            Protocol::Https => {
                let fallback = |p: Option<&Placed>| p.is_some_and(Placed::fallback);
                let routes = |p: Option<&Placed>| p.and_then(|p| p.routes);
                touch.fallback |= (fallback(was) || fallback(now))
                    && (fallback(was) != fallback(now) || routes(was) != routes(now));
                let had_rds = was.is_some_and(|p| p.rds);
                let name = || listener.route_config_name(fqdn);
                match (rds, now.is_some_and(|p| p.rds)) {
                    (Some(any), true) if !had_rds || routes(was) != routes(now) => {
                        changes.put(XdsType::Route, name(), Some(any));
                    }
                    (_, false) if had_rds => changes.put(XdsType::Route, name(), None),
                    _ => {}
                }
            }
            Protocol::Http | Protocol::Tcp | Protocol::Udp | Protocol::Stats => {}
        }
    }

    /// Counts listener `li`'s fallback certificate in use while a vhost on it enables it.
    pub(super) fn count_fallback(
        &mut self,
        ir: &Ir,
        li: usize,
        touch: &mut Touched,
        changes: &mut Changes,
    ) {
        let named = ir
            .listeners
            .get(&self.listeners[li].shape.name)
            .and_then(|l| l.fallback_secret.clone());
        let state = &mut self.listeners[li];
        if named.is_some() {
            state.fallback_secret = named;
        }
        let fallback = state
            .fallback_secret
            .clone()
            .filter(|_| state.fallbacks > 0);
        match (&fallback, state.fallback_counted) {
            (Some(sds), false)
                if self.secrets.contains_key(sds) || ir.secrets.contains_key(sds) =>
            {
                self.listeners[li].fallback_counted = true;
                self.use_secret(ir, sds, changes);
                touch.table = true;
                touch.fallback = true;
            }
            (None, true) => {
                self.listeners[li].fallback_counted = false;
                if let Some(sds) = self.listeners[li].fallback_secret.clone() {
                    self.release_secret(&sds, changes);
                }
                touch.table = true;
                touch.fallback = true;
            }
            _ => {}
        }
    }

    /// Assembles what `touch` says of listener `li` again: its table, its listener, its
    /// fallback RouteConfiguration.
    pub(super) fn assemble(
        &self,
        li: usize,
        touch: Touched,
        table: &Table<'_>,
        settings: &EnvoySettings,
        changes: &mut Changes,
    ) -> Result<(), Stale> {
        let state = &self.listeners[li];
        let listener = &state.shape;
        let name = &listener.name;
        if touch.fallback {
            let routes = self
                .vhosts
                .values()
                .filter_map(|p| p.on(li)?.fallback_routes.as_deref());
            let routes_name = fallback_routes(listener);
            let any = state
                .fallback_counted
                .then(|| Encoded::from(route_configuration(&routes_name, routes)));
            changes.put(XdsType::Route, routes_name, any);
        }
        if !touch.table {
            return Ok(());
        }
        match listener.protocol {
            Protocol::Http if state.shards > 0 => {
                self.assemble_shards(li, &touch, table, settings, changes)?;
            }
            Protocol::Http => {
                // Every vhost in one RouteConfiguration (state-of-the-world streams);
                // under VHDS delta streams get a shell instead, and the vhosts apart.
                let shell = route_configuration(name, std::iter::empty());
                let any = table.splice(
                    &shell,
                    (XdsType::Route, name),
                    ROUTE_CONFIGURATION_VIRTUAL_HOSTS,
                    li,
                    None,
                    None,
                    None,
                )?;
                changes.put(XdsType::Route, name.clone(), Some(any));
                if settings.vhds {
                    changes.put(
                        XdsType::VhdsRoute,
                        name.clone(),
                        Some(vhds_route_configuration(name)),
                    );
                }
                let served =
                    (state.vhosts > 0).then(|| encoded(&http_listener(listener, settings, 0)));
                changes.put(XdsType::Listener, name.clone(), served);
            }
            Protocol::Https => {
                let served = if state.vhosts > 0 {
                    let fallback = match (state.fallback_counted, &state.fallback_secret) {
                        (true, Some(sds)) => Some(fallback_chain_bytes(listener, sds, settings)),
                        _ => None,
                    };
                    Some(table.splice(
                        &https_listener_shell(listener, settings),
                        (XdsType::Listener, name),
                        LISTENER_FILTER_CHAINS,
                        li,
                        fallback.as_deref(),
                        None,
                        None,
                    )?)
                } else {
                    None
                };
                changes.put(XdsType::Listener, name.clone(), served);
            }
            Protocol::Tcp | Protocol::Udp | Protocol::Stats => {}
        }
        Ok(())
    }

    /// Assembles a split HTTP listener `li`: the shards `touch` names (each one's
    /// RouteConfiguration and scope), and the listener.
    fn assemble_shards(
        &self,
        li: usize,
        touch: &Touched,
        table: &Table<'_>,
        settings: &EnvoySettings,
        changes: &mut Changes,
    ) -> Result<(), Stale> {
        let state = &self.listeners[li];
        let listener = &state.shape;
        let name = &listener.name;
        let shards = state.shards;
        // Many shards touched (a full build touches them all): the listener's
        // vhosts sorted into them once; a few: each one's from the index.
        let mut members: Vec<Vec<(&String, &Parts)>> = Vec::new();
        members.resize_with(shards, Vec::new);
        if touch.shards.len() * 4 <= shards {
            for (k, shard) in members.iter_mut().enumerate() {
                if touch.shards.contains(k) {
                    *shard = self.shard_members(k, shards);
                    shard.retain(|(_, parts)| parts.on(li).is_some());
                }
            }
        } else {
            for (fqdn, parts) in table.vhosts {
                if parts.on(li).is_none() {
                    continue;
                }
                if parts.shard == EVERY_SHARD {
                    members.iter_mut().for_each(|s| s.push((fqdn, parts)));
                } else if let Some(shard) = members.get_mut(usize::from(parts.shard) % shards) {
                    shard.push((fqdn, parts));
                }
            }
        }
        // Each touched shard's RouteConfiguration, and its scope.
        for k in 0..shards {
            if !touch.shards.contains(k) {
                continue;
            }
            let routes = crate::xds::shard::shard_name(name, k);
            let shell = crate::xds::shard::route_shell(&routes);
            let any = table.splice(
                &shell,
                (XdsType::Route, &routes),
                ROUTE_CONFIGURATION_VIRTUAL_HOSTS,
                li,
                None,
                Some(&|parts: &Parts| parts.in_shard(k, shards)),
                members.get(k).map(Vec::as_slice),
            )?;
            changes.put(XdsType::Route, routes.clone(), Some(any));
            changes.put(
                XdsType::ScopedRoute,
                routes,
                Some(crate::xds::shard::scope(name, k)),
            );
        }
        let served =
            (state.vhosts > 0).then(|| encoded(&http_listener(listener, settings, shards)));
        changes.put(XdsType::Listener, name.clone(), served);
        Ok(())
    }
}
